"""Sweeps that fight over a run, and sweep files that lie:

- a point runs in one process at a time (its lock), and a run directory outside the sweep is never moved;
- a ``--parallel`` sweep passes SIGTERM on to its points and waits for them; each point logs to its own file;
- a damaged ``sweep.json`` is one line, and a damaged ``test_metrics.json`` is tested again.

Fast tests record the fits and tests a point would run instead of running them (`runs.run_mixer`, which starts
each as a ``mixer`` process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS, error_field
from mixer_lightning.cli import main
from mixer_lightning.commands.sweep.manifest import FITTED, TESTED, is_running, point_lock, run_state

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))
EMIT = ["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--emit", "s"]
NAME, OTHER = "C4_S20_seed0", "C8_S12_seed0"
RUN, OTHER_RUN = Path("s/runs/C4_S20/seed0"), Path("s/runs/C8_S12/seed0")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The `mixer` commands a sweep point runs, recorded; a test writes test_metrics.json as the real one would."""
    from mixer_lightning.commands.sweep import runs

    calls: list[list[str]] = []

    def record(arguments: list[str]) -> None:
        calls.append(arguments)
        if arguments[0] == "test":
            run_dir = Path(arguments[arguments.index("--ckpt_path") + 1]).parent.parent
            run_dir.mkdir(parents=True, exist_ok=True)
            run_dir.joinpath("test_metrics.json").write_text('{"test/acc1": 0.75}\n')

    monkeypatch.setattr(runs, "run_mixer", record)
    monkeypatch.delenv("MIXER_ARGS", raising=False)
    return calls


def fitted(run_dir: Path) -> None:
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (run_dir / "fit_summary.json").write_text("{}\n")


def test_a_point_runs_in_one_process_at_a_time(capsys: pytest.CaptureFixture, recorded: list) -> None:
    """While another process holds the point (here: this test holds its lock), `sweep point` of it is refused
    (exit 1, field "sweep point"): what the run killed before its first checkpoint left is not moved aside,
    nothing runs. Once the lock is free, the leftovers are moved aside and the point fits and tests."""
    main(EMIT)
    RUN.mkdir(parents=True)
    (RUN / "config.yaml").write_text("live\n")
    with point_lock(RUN):
        assert is_running(RUN)
        before = snapshot(Path("s"))
        assert error_field(capsys, ["sweep", "point", "s", NAME], code=1) == "sweep point"
        assert snapshot(Path("s")) == before and recorded == []
    assert not is_running(RUN)
    main(["sweep", "point", "s", NAME])
    assert Path(f"{RUN}.aborted-1", "config.yaml").read_text() == "live\n"
    assert [c[0] for c in recorded] == ["fit", "test"] and run_state(RUN) == TESTED


DAMAGED = {
    "truncated": b'{"runs": [{"name": "a"',
    "not UTF-8": b'\xff\xfe{"runs": []}',
    "no run_dir": json.dumps({"runs": [{"name": NAME, "seed": 0, "config": "s/configs/C4_S20_seed0.yaml"}]}).encode(),
    "a run that is a string": b'{"runs": ["a"]}',
}


@pytest.mark.parametrize("command", ["point", "report", "curves", "status"])
@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_sweep_file_is_one_line(case: str, command: str, capsys: pytest.CaptureFixture, recorded) -> None:
    main(EMIT)
    Path("s/sweep.json").write_bytes(DAMAGED[case])
    capsys.readouterr()
    args = ["sweep", command, "s", *([NAME] if command == "point" else [])]
    assert error_field(capsys, args) == ("directory" if command == "point" else "directories")
    assert recorded == [] and not Path("s/runs").exists()


@pytest.mark.parametrize("where", ["outside", "dot", "dotdot", "symlink", "config"])
def test_a_run_outside_the_sweep_is_refused_and_never_moved(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture, recorded
) -> None:
    """A hand-edited run_dir (a folder of the user's, ".", "s/runs/../../x", a run directory that is a
    symbolic link out of the sweep) or a config outside the sweep's configs/ is one line; the folder it names
    is left as it was."""
    outside = tmp_path / "thesis"
    outside.mkdir()
    (outside / "chapter1.tex").write_text("precious\n")
    main(EMIT)
    manifest = json.loads(Path("s/sweep.json").read_text())
    entry = manifest["runs"][0]
    entry.update(
        {
            "outside": {"run_dir": str(outside)},
            "dot": {"run_dir": "."},
            "dotdot": {"run_dir": "s/runs/../../thesis"},
            "symlink": {},
            "config": {"config": TINY_S_MIXER},
        }[where]
    )
    Path("s/sweep.json").write_text(json.dumps({**manifest, "runs": [entry]}))
    if where == "symlink":
        RUN.parent.mkdir(parents=True)
        RUN.symlink_to(outside)
    before = snapshot(tmp_path)
    assert error_field(capsys, ["sweep", "point", "s", NAME]) == "directory"
    assert snapshot(tmp_path) == before and recorded == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("thesis")) == ["thesis"]
    assert error_field(capsys, ["sweep", "report", "s"]) == "directories"


@pytest.mark.parametrize("text", [b'{"test/acc1": 0.8', b"", b"[1, 2]", b'{"test/acc1": "0.9"}', b"{}"])
def test_a_damaged_test_result_is_one_line_in_the_report_and_tested_again(
    text: bytes, capsys: pytest.CaptureFixture, recorded
) -> None:
    main(EMIT)
    fitted(RUN)
    fitted(OTHER_RUN)
    OTHER_RUN.joinpath("test_metrics.json").write_text('{"test/acc1": 0.5}\n')
    RUN.joinpath("test_metrics.json").write_bytes(text)
    assert error_field(capsys, ["sweep", "report", "s"]) == "directories"
    assert run_state(RUN) == FITTED and run_state(OTHER_RUN) == TESTED
    main([*EMIT[:-2], "--run", "s"])  # `sweep --run` (and `sweep point`) test it again; the report reads it
    assert [c[0] for c in recorded] == ["test"] and run_state(RUN) == TESTED
    assert f"sweep: {OTHER}: done" in capsys.readouterr().out


def test_the_report_marks_one_seed_and_a_partial_test(capsys: pytest.CaptureFixture) -> None:
    """A point with one seed has no spread ("–" and null, not ± 0.0000); a result of part of the test split
    (`mixer test --trainer.limit_test_batches` records ``partial``, ``images`` and ``of``) is flagged."""
    main([*EMIT[:-2], "--seeds", "0,1", "--emit", "s"])
    results = {
        "C4_S20/seed0": {"test/acc1": 0.5},
        "C4_S20/seed1": {"test/acc1": 0.7},
        "C8_S12/seed0": {"test/acc1": 0.6, "partial": True, "images": 64, "of": 359},
    }
    for run, metrics in results.items():
        Path("s/runs", run).mkdir(parents=True)
        Path("s/runs", run, "test_metrics.json").write_text(json.dumps(metrics))
    capsys.readouterr()
    main(["sweep", "report", "s"])
    out = capsys.readouterr().out
    c4, c8 = (next(line for line in out.splitlines() if f" {p} " in line) for p in ("C4_S20", "C8_S12"))
    assert c4.endswith("0.4000 ± 0.1414") and "partial" not in c4, c4
    assert "64 of 359" in c8 and "± 0.0000" not in out
    main(["sweep", "report", "s", "--json"])
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert [(r["point"], r["seeds"], r["test_error_std"], r["partial"]) for r in summary] == [
        ("C4_S20", 2, pytest.approx(0.1414, abs=1e-4), ""),
        ("C8_S12", 1, None, "seed 0: 64 of 359"),
    ]


SHORT = "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --trainer.limit_test_batches 2"


def test_parallel_points_log_to_their_own_files(capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """--parallel 2: the console has one line per start and per end of each point; each point's output is in
    s/logs/NAME.log."""
    monkeypatch.setenv("MIXER_ARGS", SHORT)
    main([*EMIT[:-2], "--run", "s", "--parallel", "2"])
    out, err = capfd.readouterr()
    lines = out.strip().splitlines()
    assert all(line.startswith("sweep") for line in lines), out
    for name, run_dir, other in ((NAME, RUN, OTHER_RUN), (OTHER, OTHER_RUN, RUN)):
        log = Path("s/logs", f"{name}.log").read_text()
        assert str(run_dir) in log and str(other) not in log
        assert any(line.startswith(f"sweep: {name}: done in ") and ", test/acc1 " in line for line in lines), lines
        assert run_state(run_dir) == TESTED


def _wait(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_stopped_parallel_sweep_stops_its_points(tmp_path: Path) -> None:
    """SIGTERM to `mixer sweep --run --parallel 2` alone while both points fit: the points get it too, save
    last.ckpt and stop, and the sweep ends with exit 143; no live writer is left, and the same command
    continues both points to the end."""
    hold = tmp_path / "hold"
    hold.write_text("")
    overlay = tmp_path / "hold.yaml"
    callback = {"class_path": "helpers.sweep_sleeper.HoldAfterFirstStep", "init_args": {"hold": str(hold)}}
    overlay.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    paths = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "MIXER_TRUSTED_MODULES": "helpers"}
    env.pop("MIXER_ARGS", None)
    command = [MIXER, *EMIT[:3], "--config", str(overlay), *EMIT[3:-2], "--run", "s", "--parallel", "2"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for run_dir in (RUN, OTHER_RUN):
            _wait(lambda r=run_dir: (r / "holding").exists() or process.poll() is not None, f"{run_dir} fits")
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        time.sleep(1)
    finally:
        hold.unlink()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 143, err[-3000:]
    for run_dir in (RUN, OTHER_RUN):
        _wait(lambda r=run_dir: not is_running(r), f"{run_dir} released")
        assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1
        assert run_state(run_dir) not in (FITTED, TESTED)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert run_state(RUN) == TESTED and run_state(OTHER_RUN) == TESTED
    assert f"sweep: {NAME}: resuming from {RUN}/checkpoints/last.ckpt" in Path("s/logs", f"{NAME}.log").read_text()
