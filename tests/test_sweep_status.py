"""`mixer sweep status`: where each run of a sweep stands (tested, fitted, running, stopped, not started),
its epochs and errors so far and the time it has left, read from the run directories and their logs
without writing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import TEST_CONFIGS, error_field
from mixer_lightning.cli import main
from mixer_lightning.commands.sweep.manifest import point_lock

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")


def _log(run_dir: Path, accuracies: list[float], start: float, seconds: list[float]) -> None:
    """``val/acc1`` once an epoch, as Lightning's TensorBoardLogger writes it (with ``epoch`` beside it),
    the epoch ending `seconds[i]` after `start`."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    for epoch, (acc, after) in enumerate(zip(accuracies, seconds, strict=True)):
        step = 10 * (epoch + 1) - 1
        writer.add_scalar("val/acc1", acc, global_step=step, walltime=start + after)
        writer.add_scalar("epoch", epoch, global_step=step, walltime=start + after)
    writer.close()


def test_every_state_of_a_sweeps_runs_and_the_time_left(capsys: pytest.CaptureFixture) -> None:
    """Six runs of the tiny sweep (2 epochs each): tested; fitted (the test next); running (the point's lock
    held by a live process: here this one); stopped (twice: one whose lock file a process that is gone
    left, one never locked); not started. Epochs from the logs of the config's max_epochs, the pace the median epoch
    time, the time left at that pace, and a run not started priced at the median pace of its point's other
    seeds, or the sweep's where they have none."""
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--seeds", "0,1,2", "--emit", "s"])
    capsys.readouterr()
    runs = {entry["name"]: Path(entry["run_dir"]) for entry in json.loads(Path("s/sweep.json").read_text())["runs"]}
    assert sorted(runs) == [f"C{c}_seed{s}" for c in ("4_S20", "8_S12") for s in range(3)]
    tested, fitted, running = runs["C4_S20_seed0"], runs["C4_S20_seed1"], runs["C4_S20_seed2"]
    other, stopped = runs["C8_S12_seed0"], runs["C8_S12_seed1"]
    _log(tested, [0.5, 0.7], 1000.0, [10.0, 20.0])
    tested.joinpath("test_metrics.json").write_text('{"test/acc1": 0.75}')
    _log(fitted, [0.4, 0.6], 1000.0, [10.0, 20.0])
    fitted.joinpath("fit_summary.json").write_text("{}")
    _log(running, [0.45], 2000.0, [30.0])  # one epoch: no pace of its own yet
    # resumed with --trainer.max_epochs 3: the newest config the run saved counts, not the sweep's
    running.joinpath("config.yaml").write_text("trainer:\n  max_epochs: 2\n")
    running.joinpath("config.resume1.yaml").write_text("trainer:\n  max_epochs: 3\n")
    _log(other, [0.3], 3000.0, [12.0])
    _log(stopped, [0.35, 0.65], 4000.0, [5.0, 17.0])  # killed after its last epoch, before the fit ended
    for run in (running, other, stopped):
        run.joinpath("checkpoints").mkdir(parents=True, exist_ok=True)
        run.joinpath("checkpoints", "last.ckpt").write_bytes(b"x")
    with point_lock(stopped):  # a holder that is gone: the file stays, the lock is free
        pass
    lock = point_lock(running)
    lock.acquire()
    try:
        before = sorted(str(p) for p in Path("s").rglob("*"))
        main(["sweep", "status", "s", "--json"])
        (sweep,) = json.loads(capsys.readouterr().out)["sweeps"]
        main(["sweep", "status", "s"])
        out = capsys.readouterr().out.splitlines()
        assert sorted(str(p) for p in Path("s").rglob("*")) == before  # nothing written
    finally:
        lock.release()
    got = {r["name"]: r for r in sweep["runs"]}
    assert {name: r["phase"] for name, r in got.items()} == {
        "C4_S20_seed0": "tested",
        "C4_S20_seed1": "fitted",
        "C4_S20_seed2": "running",
        "C8_S12_seed0": "stopped",
        "C8_S12_seed1": "stopped",
        "C8_S12_seed2": "not started",
    }
    assert sweep["counts"] == {"tested": 1, "running": 1, "fitted": 1, "stopped": 2, "not started": 1}
    assert got["C4_S20_seed0"]["test_error"] == pytest.approx(0.25) and got["C4_S20_seed0"]["left_s"] == 0
    assert got["C4_S20_seed0"]["val_error"] == pytest.approx(0.3) and got["C4_S20_seed0"]["epochs"] == 2
    assert got["C4_S20_seed0"]["max_epochs"] == 2 and got["C4_S20_seed0"]["seconds_per_epoch"] == pytest.approx(10.0)
    assert got["C4_S20_seed2"]["running"] is True and got["C8_S12_seed1"]["running"] is False
    assert got["C8_S12_seed1"]["seconds_per_epoch"] == pytest.approx(12.0)
    # the sweep's pace is the median of 10, 10 and 12 s; a run without its own is priced at its point's
    # other seeds (C4_S20: 10 s; C8_S12: 12 s), the sweep's pace only where they have none
    assert sweep["pace_s"] == pytest.approx(10.0)
    assert got["C4_S20_seed2"]["max_epochs"] == 3
    assert (got["C4_S20_seed2"]["left_s"], got["C4_S20_seed2"]["left_estimated"]) == (pytest.approx(20.0), True)
    assert got["C8_S12_seed1"]["left_s"] == 0  # every epoch logged: nothing left to train
    assert (got["C8_S12_seed2"]["left_s"], got["C8_S12_seed2"]["left_estimated"]) == (pytest.approx(24.0), True)
    assert got["C8_S12_seed0"]["left_s"] == pytest.approx(12.0)
    assert sweep["left_s"] == pytest.approx(20.0 + 12.0 + 24.0)
    assert out[0].startswith("sweep s: 6 runs: 1 tested, 1 running, 1 fitted, 2 stopped, 1 not started; about 1 min")
    line = {row.split()[0]: row.split() for row in out[2:]}
    assert line["C4_S20_seed2"][1:3] == ["running", "1/3"] and line["C8_S12_seed2"][1:4] == ["not", "started", "0/2"]
    assert line["C8_S12_seed1"][1:4] == ["stopped", "2/2", "0.3500"]  # a fraction, as `sweep report` prints it


def test_a_run_logged_to_csv_has_no_pace_and_the_time_left_is_unknown(capsys: pytest.CaptureFixture) -> None:
    """A CSVLogger's metrics.csv keeps no times: the run's epochs and error are read, its pace is not, and
    with no run's pace to go by the time left is unknown, not made up."""
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "s"])
    capsys.readouterr()
    (entry,) = json.loads(Path("s/sweep.json").read_text())["runs"]
    run = Path(entry["run_dir"])
    run.mkdir(parents=True)
    run.joinpath("metrics.csv").write_text("epoch,step,val/acc1\n0,9,0.5\n")
    main(["sweep", "status", "s", "--json"])
    (sweep,) = json.loads(capsys.readouterr().out)["sweeps"]
    (status,) = sweep["runs"]
    assert (status["epochs"], status["val_error"], status["seconds_per_epoch"]) == (1, 0.5, None)
    assert status["left_s"] is None and sweep["left_s"] is None
    main(["sweep", "status", "s"])
    assert "time left unknown (no run has logged an epoch time yet)" in capsys.readouterr().out


def test_a_run_without_max_epochs_is_named_where_the_time_left_is_unknown(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "s"])
    capsys.readouterr()
    (entry,) = json.loads(Path("s/sweep.json").read_text())["runs"]
    run = Path(entry["run_dir"])
    _log(run, [0.5, 0.6], 1000.0, [10.0, 20.0])
    run.joinpath("config.yaml").write_text("trainer:\n  max_time: 00:01:00:00\n")  # stops on time, not epochs
    main(["sweep", "status", "s"])
    assert "time left unknown (no trainer.max_epochs in the config of C4_S20_seed0)" in capsys.readouterr().out


def test_the_status_of_what_is_not_a_sweep_is_one_line(capsys: pytest.CaptureFixture) -> None:
    Path("plain").mkdir()
    assert error_field(capsys, ["sweep", "status", "plain"]) == "directories"


def test_the_help_of_a_sweep_sub_command_keeps_no_docstring_indentation(capsys: pytest.CaptureFixture) -> None:
    """A sub-command's help is its function's docstring, whose indentation showed as a ragged margin."""
    with pytest.raises(SystemExit) as done:
        main(["sweep", "status", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    description = out.split("\n\n")[1].splitlines()
    assert len(description) > 1 and not any(line.startswith(" ") for line in description)
    assert "\n    mixer sweep status sweeps/fig5_c10" in out


LEGACY_CONFIG = """\
seed_everything: {seed}
trainer:
  max_epochs: 3
  logger:
    class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args: {{save_dir: old/runs, name: C4_S20, version: seed{seed}}}
model:
  class_path: mixer_lightning.tasks.SMixerModule
  init_args: {{patch_size: 4, omega: 1000, channels: 4, num_blocks: 2, tokens: null}}
data:
  class_path: mixer_lightning.data.ImageDataModule
  init_args: {{dataset: digits, batch_size: 32}}
"""


def test_a_sweep_written_before_the_network_split_is_read(capsys: pytest.CaptureFixture) -> None:
    """A sweep the code before issue 44 wrote and ran (the long reproductions): its configs name the family's
    LightningModule (``model.class_path: ...SMixerModule``, flat arguments), its points left lock files
    holding ``PID HOST TIME``. `sweep status`, `report` and `curves` read it: a lock file nobody holds is no
    running point, and the report's titles name the network."""
    from mixer_lightning.commands.sweep.plots import figure_title

    runs = []
    for seed in (0, 1):
        name, run_dir = f"C4_S20_seed{seed}", Path(f"old/runs/C4_S20/seed{seed}")
        Path("old/configs").mkdir(parents=True, exist_ok=True)
        Path(f"old/configs/{name}.yaml").write_text("# Sweep point C4_S20\n" + LEGACY_CONFIG.format(seed=seed))
        run_dir.mkdir(parents=True)
        run_dir.joinpath("config.yaml").write_text(LEGACY_CONFIG.format(seed=seed))
        run_dir.joinpath(".mixer.lock").write_text("2756 vm 1795950685\n")
        run_dir.parent.joinpath(f".seed{seed}.point.lock").write_text("2756 vm 1795950685\n")
        run_dir.joinpath("checkpoints").mkdir()
        run_dir.joinpath("checkpoints", "last.ckpt").write_bytes(b"x")
        _log(run_dir, [0.5, 0.6 + 0.1 * seed], 1000.0, [10.0, 20.0])
        figures = {"C": 4, "S": 20, "P": 4, "m": 80, "p": 0.15, "gamma": 1.0, "axes": {}, "width_point": "C4_S20"}
        runs.append(
            {"name": name, "point": "C4_S20", "role": "grid", **figures, "seed": seed}
            | {"config": f"old/configs/{name}.yaml", "run_dir": str(run_dir)}
        )
    Path("old/runs/C4_S20/seed0/test_metrics.json").write_text('{"test/acc1": 0.75, "test/loss": 0.7}')
    manifest = {"version": 2, "kind": "channels", "omega": 1000, "gamma": 1.0, "width": None, "axes": []}
    Path("old/sweep.json").write_text(json.dumps(manifest | {"base": ["x.yaml"], "cka_reference": None, "runs": runs}))

    main(["sweep", "status", "old", "--json"])
    (sweep,) = json.loads(capsys.readouterr().out)["sweeps"]
    assert [(r["phase"], r["epochs"], r["max_epochs"]) for r in sweep["runs"]] == [("tested", 2, 3), ("stopped", 2, 3)]
    main(["sweep", "report", "old", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(r["point"], r["seeds"], r["test_error_mean"]) for r in report["summary"]] == [("C4_S20", 1, 0.25)]
    assert figure_title([json.loads(Path("old/sweep.json").read_text())], ["old"], "") == "old: digits, 3 epochs"
    main(["sweep", "curves", "old", "--metric", "val/acc1", "--json"])
    (curve,) = json.loads(capsys.readouterr().out)["curves"]
    assert curve["runs"] == 2 and [r["epoch"] for r in curve["rows"]] == [1, 2]  # counted from 1
