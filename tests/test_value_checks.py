"""Settings mean what they say (docs/reliability.md, "Settings mean what they say"): a batch count is
a count, and a value Lightning or torch would fail on later, or silently ignore, is one line before
anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")


def test_an_integer_batch_limit_counts_batches(tmp_path, capsys) -> None:
    """``--trainer.limit_train_batches 1`` was parsed as 1.0 (the whole epoch: 40 digits batches);
    an int is a number of batches, in Lightning's meaning, from a flag or a config file."""
    main(["fit", "--config", TINY, "--trainer.limit_train_batches", "1", "--trainer.max_epochs", "2"])
    (run,) = run_dirs("digits_mixer")
    assert read_json(run / "fit_summary.json")["steps"] == 2  # one batch per epoch
    capsys.readouterr()
    overlay = tmp_path / "limits.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {name: 1 for name in LIMITS[1:]}}))
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY, "--config", str(overlay), "--trainer.limit_train_batches=1", "--print_config"])
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert [(trainer[name], type(trainer[name])) for name in LIMITS] == [(1, int)] * 4


def tree(folder: Path) -> dict[str, int]:
    """Every file under `folder` with its modification time: what "nothing written" compares."""
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "flags, message",
    [
        # 0 was taken as "not given": the run trained at the dataset's 8 px.
        (["--data.image_size", "0"], "data.image_size: must be positive, got 0"),
        # A 51-line traceback (ZeroDivisionError: integer modulo by zero).
        (["--trainer.val_check_interval", "0"], "trainer.val_check_interval: must be a number of batches >= 1"),
        # One line, but naming `trainer`, not the key.
        (["--trainer.val_check_interval", "-1"], "trainer.val_check_interval: must be a number of batches >= 1"),
        # Lightning skips clipping for a value <= 0: the run trained unclipped without a word.
        (["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val: must be a finite norm >= 0, got -1.0"),
        # torch.optim accepts an infinite learning rate: reported as divergence at step 1.
        (["--model.optimizer.lr", ".inf"], "model.optimizer.init_args.lr: must be a finite number, got inf"),
        (["--model.optimizer.lr", "1e400"], "model.optimizer.init_args.lr: must be a finite number, got inf"),
        # AdamW's eps 1e-8 is 0 in float16: reported as divergence ("the loss is nan at step 1").
        (
            ["--trainer.precision", "16-true"],
            "model.optimizer.init_args.eps: 1e-08 is 0 in float16 (trainer.precision 16-true), so the optimiser "
            "divides by zero at the first step; use trainer.precision 16-mixed or bf16-true, or give eps >= 1e-4",
        ),
    ],
    ids=["image_size 0", "val_check_interval 0", "val_check_interval -1", "clip -1", "lr inf", "lr 1e400", "16-true"],
)
def test_values_lightning_would_fail_on_or_ignore_are_one_line(flags, message, capsys) -> None:
    Path("runs").mkdir()
    Path("runs/keep.txt").write_text("earlier work")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", TINY, *flags])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not any(line.startswith("Traceback") for line in err)
    assert err[-1].startswith("mixer: error: " + message), err[-1]
    assert sorted(p.name for p in Path("runs").iterdir()) == ["keep.txt"]  # no run directory


def test_half_precision_trains_with_an_eps_float16_holds(capsys) -> None:
    """The 16-true refusal is about eps only: with eps 1e-4 the same run trains."""
    main(["fit", "--config", TINY, "--trainer.precision", "16-true", "--model.optimizer.eps", "1e-4"])
    (run,) = run_dirs("digits_mixer")
    assert (run / "checkpoints" / "best.ckpt").is_file()


def test_a_resume_keeps_the_seed_and_the_data_of_the_run(capsys) -> None:
    """A resume with another seed or batch size continued the run silently (the data order and the
    augmentation streams change mid-run); now refused naming the flag, and the run is untouched. What
    cannot change the trajectory (workers) may differ; ``seed_everything: true`` takes the run's seed."""
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--seed_everything", "3"])
    (run,) = run_dirs("digits_mixer")
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["seed_everything"] == 3
    resume = ["fit", "--config", TINY, "--ckpt_path", "last", "--trainer.max_epochs", "2", "--seed_everything", "3"]
    before = tree(run)
    for flags, message in (
        (["--seed_everything", "7"], f"seed_everything: is 7, but the run being resumed has 3 ({last})"),
        (["--data.batch_size", "16"], f"data.batch_size: is 16, but the run being resumed has 32 ({last})"),
        (["--data.init_args.val_split", "0.2"], f"data.val_split: is 0.2, but the run being resumed has 0.1 ({last})"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*resume, *flags])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith("mixer: error: " + message)
        assert tree(run) == before and run_dirs("digits_mixer") == [run]
    # A checkpoint written before the seed was recorded: the run's config.yaml says it.
    checkpoint = torch.load(last, weights_only=True)
    del checkpoint["seed_everything"]
    torch.save(checkpoint, last)
    with pytest.raises(SystemExit):
        main([*resume[:-1], "0"])
    assert "seed_everything: is 0, but the run being resumed has 3" in capsys.readouterr().err
    main([*resume[:-2], "--seed_everything", "true", "--data.num_workers", "0"])
    assert read_json(run / "fit_summary.json")["epochs"] == 2 and run_dirs("digits_mixer") == [run]
