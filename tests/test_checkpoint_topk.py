"""Top-k checkpoints (docs/usage.md, "Top-k checkpoints"): ``--checkpoint.save_top_k 3`` keeps three files,
``epoch=E-step=S.ckpt``, and ``best.ckpt`` is the best of them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from helpers import CONFIGS, TEST_CONFIGS, error_field, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
CSV = str(CONFIGS / "logger" / "csv.yaml")


def logged(run: Path, name: str) -> dict[int, float]:
    """The figure `name` of each epoch, as the CSV logger wrote it."""
    with open(run / "metrics.csv", newline="") as f:
        return {int(row["epoch"]): float(row[name]) for row in csv.DictReader(f) if row.get(name)}


def test_save_top_k_keeps_k_checkpoints_and_best_ckpt_is_the_best(capsys) -> None:
    """With the filename ``best`` and k = 3, Lightning wrote every candidate to best.ckpt: it held the
    last epoch and fit_summary.json reported its score as the best. Monitored in reverse (the highest
    val/loss) so that the best is not simply the last epoch."""
    main(
        [
            "fit",
            *("--config", TINY, "--config", CSV),
            *("--trainer.max_epochs", "4", "--checkpoint.save_top_k", "3"),
            *("--checkpoint.monitor", "val/loss", "--checkpoint.mode", "max"),
        ]
    )
    (run,) = run_dirs("digits_mixer")
    losses = logged(run, "val/loss")
    assert sorted(losses) == [0, 1, 2, 3]
    folder = run / "checkpoints"
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("epoch="))
    top3 = sorted(losses, key=losses.get, reverse=True)[:3]
    assert kept == sorted(f"epoch={e}-step={4 * (e + 1)}.ckpt" for e in top3)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*kept, "best.ckpt", "last.ckpt"])  # nothing else
    best_epoch = top3[0]
    best_file = folder / f"epoch={best_epoch}-step={4 * (best_epoch + 1)}.ckpt"
    assert (folder / "best.ckpt").read_bytes() == best_file.read_bytes()
    summary = read_json(run / "fit_summary.json")
    assert summary["best_score"] == pytest.approx(max(losses.values()), rel=1e-6)
    assert Path(summary["best_checkpoint"]).name == best_file.name
    assert sorted(Path(p).name for p in summary["best_k"]) == kept
    # best.ckpt is a checkpoint like any other: the test of it runs in its run directory.
    main(["test", "--ckpt_path", str(folder / "best.ckpt")])
    assert run_dirs("digits_mixer") == [run] and (run / "test_metrics.json").is_file()


def test_top_k_with_one_fixed_filename_is_refused(capsys) -> None:
    """Each of the k checkpoints would replace the one before under one name."""
    args = ["fit", "--config", TINY, "--checkpoint.filename", "fixed", "--checkpoint.save_top_k", "2"]
    assert error_field(capsys, args) == "checkpoint.filename"
    assert not Path("runs").exists()


def test_the_checkpoint_mode_follows_the_monitor(capsys) -> None:
    """``--checkpoint.monitor val/loss`` alone kept the highest loss as best.ckpt (the mode stayed ``max``): the
    mode follows the monitor; a metric that is neither an accuracy nor a loss must say which way is better."""
    main(["fit", "--config", TINY, "--config", CSV, "--trainer.max_epochs", "4", "--checkpoint.monitor", "val/loss"])
    (run,) = run_dirs("digits_mixer")
    losses = logged(run, "val/loss")
    assert read_json(run / "fit_summary.json")["best_score"] == pytest.approx(min(losses.values()), rel=1e-6)
    args = ["fit", "--config", TINY, "--checkpoint.monitor", "val/ece"]
    assert error_field(capsys, args) == "checkpoint.mode"


def test_a_checkpoint_folder_of_ones_own_belongs_to_one_run(capsys) -> None:
    """Two fits with one ``--checkpoint.dirpath``: the second replaced the first's best.ckpt (fixed name, no
    version counter), which the first's fit_summary.json still named. Refused; one writer at a time."""
    from filelock import FileLock

    folder = ["--checkpoint.dirpath", "shared", "--trainer.max_epochs", "1"]
    main(["fit", "--config", TINY, *folder])
    kept = Path("shared/best.ckpt").read_bytes()
    assert error_field(capsys, ["fit", "--config", TINY, *folder]) == "checkpoint.dirpath"
    assert Path("shared/best.ckpt").read_bytes() == kept and len(run_dirs("digits_mixer")) == 1
    Path("free").mkdir()
    with FileLock("free/.mixer.lock"):  # another process's fit into it
        args = ["fit", "--config", TINY, "--checkpoint.dirpath", "free", "--trainer.max_epochs", "1"]
        assert error_field(capsys, args, code=1) == "checkpoint.dirpath"


def test_a_moved_or_copied_run_resumes_its_best_checkpoint(capsys) -> None:
    """Lightning drops the best state of a run whose folder changed: a moved run looked best.ckpt up at its old
    path, and a copy let a worse epoch replace best.ckpt and hard-linked the original's file into itself. Monitored
    in reverse (the highest val/loss: an early epoch) so that the best is not the last."""
    import os
    import shutil

    reverse = ["--checkpoint.monitor", "val/loss", "--checkpoint.mode", "max"]
    main(["fit", "--config", TINY, "--config", CSV, "--trainer.max_epochs", "2", *reverse])
    (run,) = run_dirs("digits_mixer")
    original = (run / "checkpoints" / "best.ckpt").read_bytes()
    for name, place in (("copy", shutil.copytree), ("moved", shutil.move)):
        other = Path("elsewhere", name, "version_0")
        place(run if name == "moved" else run, other)
        resume = ["fit", "--config", TINY, "--config", CSV, "--trainer.max_epochs", "4", *reverse]
        resume += ["--trainer.logger.init_args.save_dir", "elsewhere", "--trainer.logger.init_args.name", name]
        main([*resume, "--ckpt_path", str(other / "checkpoints" / "last.ckpt")])
        losses = logged(other, "val/loss")
        assert sorted(losses) == [0, 1, 2, 3]
        assert read_json(other / "fit_summary.json")["best_score"] == pytest.approx(max(losses.values()), rel=1e-6)
        if name == "copy":
            assert (run / "checkpoints" / "best.ckpt").read_bytes() == original
            assert not os.path.samefile(run / "checkpoints" / "best.ckpt", other / "checkpoints" / "best.ckpt")
    # resumed into a run of its own (the config's logger): the other run's best.ckpt is not linked into it
    main(
        [
            "fit",
            "--config",
            TINY,
            "--trainer.max_epochs",
            "5",
            *reverse,
            "--ckpt_path",
            str(other / "checkpoints/last.ckpt"),
        ]
    )
    (new,) = run_dirs("digits_mixer")
    assert not any(os.path.samefile(p, other / "checkpoints/best.ckpt") for p in (new / "checkpoints").glob("*.ckpt"))
