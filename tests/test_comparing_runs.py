"""Comparing ordinary runs: `mixer sweep curves A B` names each curve by what was trained (``RP S-Mixer``,
``seed=1``), draws the training loss of each epoch (not the steps the logger sampled), says what ``val/``
measured and does not call one run a mean over seeds; `mixer sweep report A B` sets runs side by side."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib
import pytest
import yaml

from helpers import accuracy, error_field
from mixer_lightning.cli import main


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, matplotlib.figure.Figure]:
    """file name -> the Figure a command saved (recorded at `Figure.savefig`, then saved as usual)."""
    figures: dict[str, matplotlib.figure.Figure] = {}
    savefig = matplotlib.figure.Figure.savefig

    def record(self, target, *args, **kwargs):
        figures[Path(getattr(target, "name", target)).name.split(".tmp")[0].lstrip(".")] = self
        return savefig(self, target, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return figures


def _run(run_dir: str, permute: bool, seed: int = 0, val_split: float = 0.1) -> Path:
    """A run directory as `mixer fit` leaves it: its config.yaml, and the scalars as Lightning's
    TensorBoardLogger writes them. Three logged steps an epoch whose losses rise (1.74 → 1.78) where the
    epoch's mean over every batch falls (1.77 → 1.74): what the classifier logs as train/loss and
    train/loss_epoch."""
    from torch.utils.tensorboard import SummaryWriter

    path = Path(run_dir)
    path.mkdir(parents=True)
    config = {
        "seed_everything": seed,
        "trainer": {
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"name": path.parent.name},
            }
        },
        "model": {
            "net": {"class_path": "mixer_lightning.models.SMixer", "init_args": {"channels": 8, "permute": permute}}
        },
        "data": {
            "class_path": "mixer_lightning.data.ImageDataModule",
            "init_args": {"dataset": "cifar10", "val_split": val_split},
        },
    }
    path.joinpath("config.yaml").write_text(yaml.safe_dump(config))
    writer = SummaryWriter(str(path))
    for epoch, (steps, mean) in enumerate([([1.80, 1.74, 1.70], 1.77), ([1.76, 1.75, 1.78], 1.74)]):
        for i, loss in enumerate(steps):
            writer.add_scalar("train/loss", loss, global_step=10 * epoch + 3 * i)
            writer.add_scalar("epoch", epoch, global_step=10 * epoch + 3 * i)
        writer.add_scalar("train/loss_epoch", mean, global_step=10 * epoch + 9)
        writer.add_scalar("val/loss", mean + 0.1, global_step=10 * epoch + 9)
        writer.add_scalar("epoch", epoch, global_step=10 * epoch + 9)
    writer.close()
    return path


def _curves(capsys: pytest.CaptureFixture, *args: str) -> list[dict]:
    capsys.readouterr()
    main(["sweep", "curves", *args, "--json", "--out", "curves"])
    return json.loads(capsys.readouterr().out)["curves"]


def test_curves_of_two_runs_name_what_was_trained(capsys: pytest.CaptureFixture, drawn: dict) -> None:
    normal = _run("runs/cifar10_s_mixer/version_3", permute=False)
    rp = _run("runs/cifar10_rp_s_mixer/version_1", permute=True)
    curves = _curves(capsys, str(normal), str(rp), "--metric", "train/loss", "--metric", "val/loss")
    losses = {c["series"]: [r["mean"] for r in c["rows"]] for c in curves if c["metric"] == "train/loss"}
    assert losses == {"S-Mixer": pytest.approx([1.77, 1.74]), "RP S-Mixer": pytest.approx([1.77, 1.74])}
    train, val = drawn["curves_train_loss.png"].axes[0], drawn["curves_val_loss.png"].axes[0]
    assert "mean over seeds" not in train.get_title() and "one run per curve" in train.get_title()
    assert [t.get_text() for t in train.get_legend().get_texts()] == ["S-Mixer (1 seed)", "RP S-Mixer (1 seed)"]
    assert val.get_ylabel().startswith("held-out validation loss")  # val_split 0.1: carved from train
    _run("runs/test_split/version_0", permute=False, val_split=0)
    _curves(capsys, "runs/test_split/version_0")
    assert drawn["curves_val_loss.png"].axes[0].get_ylabel().startswith("test loss")  # val_split 0: the test split
    _run("runs/seeds/version_0", permute=False, seed=1)
    curves = _curves(capsys, "runs/test_split/version_0", "runs/seeds/version_0")
    assert [c["series"] for c in curves] == ["S-Mixer, val_split=0, seed=0", "S-Mixer, val_split=0.1, seed=1"]


def test_report_sets_ordinary_runs_side_by_side(trained, capsys: pytest.CaptureFixture, drawn: dict) -> None:
    mixer, rp = (Path(trained(kind)).parent.parent for kind in ("mixer", "rp_s_mixer"))
    capsys.readouterr()
    main(["sweep", "report", str(mixer), str(rp), "--out", "side", "--json"])
    result = json.loads(capsys.readouterr().out)
    rows = {r["run"].split(",")[0]: r for r in result["runs"]}
    assert sorted(rows) == ["MLP-Mixer", "RP S-Mixer"]
    assert rows["RP S-Mixer"]["parameters"] == 922  # as the run's header counted them
    assert all(r["images_per_s"] > 0 and r["epochs"] == 1 for r in rows.values())
    for name, run in (("MLP-Mixer", mixer), ("RP S-Mixer", rp)):  # the runs' own validation, recomputed
        figure = accuracy(run / "checkpoints" / "last.ckpt", run / "config.yaml", "val")
        assert rows[name]["val_acc1"] == pytest.approx(figure)
    assert "model.net.class_path=mixer_lightning.models.SMixer" in rows["RP S-Mixer"]["differs"]
    assert result["validation"] == "held-out validation"  # the test configs hold 10 % of train out
    with open("side/runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    legend = [t.get_text() for t in drawn["curves_val_acc1.png"].axes[0].get_legend().get_texts()]
    assert [name.split(",")[0] for name in legend] == ["MLP-Mixer", "RP S-Mixer"]
    main(["sweep", "report", str(mixer), str(rp), "--out", "side"])
    out = capsys.readouterr().out
    assert out.startswith("run ") and "val: the held-out validation images" in out
    Path("empty").mkdir()
    assert error_field(capsys, ["sweep", "report", "empty"]) == "directories"  # neither a sweep nor runs


def test_report_gives_the_whole_test_of_the_checkpoint_the_fit_named(trained, capsys: pytest.CaptureFixture) -> None:
    """A 1-batch test of last.ckpt (test_metrics.json) was the run's figure beside the full test of best.ckpt,
    the checkpoint fit_summary.json names; a fit_summary.json cut short was a traceback."""
    import shutil

    run = Path("runs/copy/version_0")
    shutil.copytree(Path(trained("mixer")).parent.parent, run)
    main(["test", "--ckpt_path", str(run / "checkpoints/last.ckpt"), "--trainer.limit_test_batches", "1"])
    main(["test", "--ckpt_path", str(run / "checkpoints/best.ckpt")])
    assert json.loads((run / "fit_summary.json").read_text())["test_checkpoint"] == "checkpoints/best.ckpt"
    for cut in (False, True):
        if cut:
            (run / "fit_summary.json").write_text('{"epochs": 1, "para')
        capsys.readouterr()
        main(["sweep", "report", str(run), "--out", "side", "--json"])
        (row,) = json.loads(capsys.readouterr().out)["runs"]
        assert row["tested"] == "checkpoints/best.ckpt"
        assert row["test_acc1"] == pytest.approx(accuracy(run / "checkpoints/best.ckpt", run / "config.yaml", "test"))
