"""Sweeps that fight over a run, and sweep files that lie (issue 25, RC1-RC3; issue 26, T9):

- a live run is never moved aside, and a point runs in one process at a time (`sweep point` locks);
- a ``--parallel`` sweep forwards SIGTERM/SIGINT/SIGHUP to its points and waits for them, and its points
  die with it (their own process group, PR_SET_PDEATHSIG); each point logs to its own file;
- ``sweep.json`` entries are checked and confined to the sweep directory, and a damaged
  ``test_metrics.json`` is one line in reports and tested again by ``sweep point``.

Fast tests record the fits and tests a point would run instead of running them (``mixer_lightning.cli.main``
is what `run_mixer` calls, looked up by name)."""

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

from helpers import TEST_CONFIGS
from mixer_lightning.cli import main
from mixer_lightning.commands.sweep.runs import FITTED, TESTED, run_state
from mixer_lightning.safety.rundir import RunLock

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))
EMIT = ["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--emit", "s"]
NAME, OTHER = "C4_S20_seed0", "C8_S12_seed0"
RUN, OTHER_RUN = Path("s/runs/C4_S20/seed0"), Path("s/runs/C8_S12/seed0")


def one_line(capsys: pytest.CaptureFixture, args: list[str], code: int = 2) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mixer: error: "), err
    return err[0]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The `mixer` commands a sweep point runs, recorded; a test writes the run's test_metrics.json as
    the real one would."""
    import mixer_lightning.cli

    calls: list[list[str]] = []

    def record(arguments: list[str]) -> None:
        calls.append(arguments)
        if arguments[0] == "test":
            run_dir = Path(arguments[arguments.index("--ckpt_path") + 1]).parent.parent
            run_dir.mkdir(parents=True, exist_ok=True)
            run_dir.joinpath("test_metrics.json").write_text('{"test/acc1": 0.75}\n')

    monkeypatch.setattr(mixer_lightning.cli, "main", record)
    monkeypatch.delenv("MIXER_ARGS", raising=False)
    return calls


def fitted(run_dir: Path) -> None:
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (run_dir / "fit_summary.json").write_text("{}\n")


# ----------------------------------------------------------------------------- RC1: live runs


def test_sweep_point_never_moves_a_live_run_aside(capsys: pytest.CaptureFixture, recorded: list) -> None:
    """A fit of the point still before its first checkpoint (it holds the run's .mixer.lock; here this
    process holds it) is not renamed to .aborted-N under its feet: one line, exit 1, nothing touched."""
    main(EMIT)
    RUN.mkdir(parents=True)
    (RUN / "config.yaml").write_text("live\n")
    lock = RunLock(RUN).acquire()
    try:
        before = snapshot(Path("s"))
        err = one_line(capsys, ["sweep", "point", "s", NAME], code=1)
        assert snapshot(Path("s")) == before
    finally:
        lock.release()
    assert "sweep point: the run 's/runs/C4_S20/seed0' is being written by process" in err
    assert not Path(f"{RUN}.aborted-1").exists() and recorded == []
    main(["sweep", "point", "s", NAME])  # once the fit is gone, its leftovers are moved aside as before
    assert Path(f"{RUN}.aborted-1", "config.yaml").read_text() == "live\n"
    assert [c[0] for c in recorded] == ["fit", "test"]


def test_without_flock_a_lock_file_whose_pid_a_later_process_got_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem without flock the lock file is the lock, taken over once its PID is gone; a PID the
    system gave again to a later process (here this one: it started after the file's time) is gone too."""
    import fcntl
    import socket

    from mixer_lightning.errors import ResourceError
    from mixer_lightning.safety.atomic import process_started

    def no_flock(fd: int, operation: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    started = process_started(os.getpid())
    if started is None:
        pytest.skip("no process start times here (/proc)")
    lock = tmp_path / "run" / ".mixer.lock"
    lock.parent.mkdir()
    lock.write_text(f"{os.getpid()} {socket.gethostname()} {time.time():.0f}\n")  # this process's own: live
    with pytest.raises(ResourceError, match="is being written by process"):
        RunLock(lock.parent).acquire()
    lock.write_text(f"{os.getpid()} {socket.gethostname()} {started - 60:.0f}\n")  # before this process began
    RunLock(lock.parent).acquire().release()


def test_a_point_runs_in_one_process_at_a_time(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second `sweep point` of a point while the first tests it (two array tasks of one index, a re-run
    while an orphan works) is refused in one line: the point is not tested (or fitted) twice."""
    import mixer_lightning.cli

    main(EMIT)
    fitted(RUN)
    calls, nested = [], []

    def record(arguments: list[str]) -> None:
        calls.append(arguments)
        if len(calls) == 1:  # while the first process tests the point, a second one starts
            with pytest.raises(SystemExit) as exit_info:
                main(["sweep", "point", "s", NAME])
            nested.append((exit_info.value.code, capsys.readouterr().err.strip().splitlines()))

    monkeypatch.setattr(mixer_lightning.cli, "main", record)
    main(["sweep", "point", "s", NAME])
    assert [c[0] for c in calls] == ["test"]
    ((code, err),) = nested
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"mixer: error: sweep point: {NAME} ('s/runs/C4_S20/seed0') is being run by process")
    assert not Path("s/runs/C4_S20/.seed0.point.lock").exists()  # released after the point
    assert run_state(RUN) == FITTED


# -------------------------------------------------------------------- RC3: sweep files that lie


def _emitted_with_runs(runs) -> None:
    main(EMIT)
    manifest = json.loads(Path("s/sweep.json").read_text())
    Path("s/sweep.json").write_text(json.dumps({**manifest, "runs": runs}))


GOOD = {"name": NAME, "seed": 0, "config": "s/configs/C4_S20_seed0.yaml", "run_dir": "s/runs/C4_S20/seed0"}
DAMAGED_MANIFESTS = {
    "no run_dir": ([{"name": NAME, "seed": 0, "config": GOOD["config"]}], f"run 0 ('{NAME}'): run_dir is missing"),
    "a string": (["a"], "run 0 is a JSON str, not an object"),
    "null": ([None], "run 0 is a JSON NoneType, not an object"),
    "run_dir 7": ([{**GOOD, "run_dir": 7}], f"run 0 ('{NAME}'): run_dir is 7, not a path"),
    "seed '0'": ([{**GOOD, "seed": "0"}], f"run 0 ('{NAME}'): seed is '0', not an integer"),
    "C 'x'": ([{**GOOD, "C": "x"}], f"run 0 ('{NAME}'): C is 'x', not a number"),
    "twice": ([GOOD, GOOD], f"run 1 ('{NAME}') repeats the name or run_dir of another run"),
}
DAMAGED_TEXTS = {
    "empty": ("", "(empty)"),
    "truncated": ('{"runs": [{"name": "a"', "(not JSON: "),
    "not UTF-8": (b'\xff\xfe{"runs": []}', "(not UTF-8 text)"),
    "deep": ("[" * 100_000, "(nested too deeply)"),
    "deep runs": ('{"runs": ' + "[" * 100_000, "(nested too deeply)"),
}


@pytest.mark.parametrize("command", ["point", "report", "curves"])
@pytest.mark.parametrize("case", [*DAMAGED_MANIFESTS, *DAMAGED_TEXTS])
def test_a_damaged_sweep_file_is_one_line(case: str, command: str, capsys: pytest.CaptureFixture, recorded) -> None:
    if case in DAMAGED_MANIFESTS:
        runs, message = DAMAGED_MANIFESTS[case]
        _emitted_with_runs(runs)
    else:
        text, message = DAMAGED_TEXTS[case]
        main(EMIT)
        Path("s/sweep.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    capsys.readouterr()
    args = {
        "point": ["sweep", "point", "s", NAME],
        "report": ["sweep", "report", "s"],
        "curves": ["sweep", "curves", "s"],
    }
    err = one_line(capsys, args[command])
    assert "'s/sweep.json' is damaged" in err and message in err, err
    assert recorded == [] and not Path("s/runs").exists()


@pytest.mark.parametrize("where", ["outside", "dot", "dotdot", "symlink", "config"])
def test_a_run_outside_the_sweep_is_refused_and_never_moved(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture, recorded
) -> None:
    """A hand-edited run_dir (an absolute folder of the user's, ".", "s/runs/../../x", a run directory that
    is a symbolic link out of the sweep) or a config outside the sweep's configs/ is one line; the folder
    it names is left as it was (before: renamed to <folder>.aborted-1)."""
    outside = tmp_path / "thesis"
    outside.mkdir()
    (outside / "chapter1.tex").write_text("precious\n")
    entry = dict(GOOD)
    if where == "outside":
        entry["run_dir"] = str(outside)
    elif where == "dot":
        entry["run_dir"] = "."
    elif where == "dotdot":
        entry["run_dir"] = "s/runs/../../thesis"
    elif where == "config":
        entry["config"] = TINY_S_MIXER
    _emitted_with_runs([entry])
    if where == "symlink":
        RUN.parent.mkdir(parents=True)
        RUN.symlink_to(outside)
    before = snapshot(tmp_path)
    err = one_line(capsys, ["sweep", "point", "s", NAME])
    key = "config" if where == "config" else "run_dir"
    assert f"'s/sweep.json': run 0 ('{NAME}'): {key} " in err and "is not inside" in err, err
    assert snapshot(tmp_path) == before and recorded == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("thesis")) == ["thesis"]
    assert "is not inside" in one_line(capsys, ["sweep", "report", "s"])


DAMAGED_METRICS = {
    "truncated": ('{"test/acc1": 0.8', "not JSON"),
    "empty": ("", "empty"),
    "a list": ("[1, 2]", "a JSON list, not an object"),
    "a string value": ('{"test/acc1": "0.9"}', "test/acc1 is '0.9', not a number in [0, 1]"),
    "not UTF-8": (b'\xff\xfe{"test/acc1": 0.9}', "not UTF-8 text"),
    "no accuracy": ("{}", "no test/acc1"),
    "deep": ("[" * 100_000, "nested too deeply"),
}


@pytest.mark.parametrize("case", DAMAGED_METRICS)
def test_a_damaged_test_result_is_one_line_in_the_report_and_tested_again(
    case: str, capsys: pytest.CaptureFixture, recorded
) -> None:
    main(EMIT)
    fitted(RUN)
    fitted(OTHER_RUN)
    OTHER_RUN.joinpath("test_metrics.json").write_text('{"test/acc1": 0.5}\n')
    text, message = DAMAGED_METRICS[case]
    RUN.joinpath("test_metrics.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    err = one_line(capsys, ["sweep", "report", "s"])
    assert f"directories: 's/runs/C4_S20/seed0/test_metrics.json' is damaged ({message}" in err, err
    assert f"run `mixer sweep point s {NAME}` to test that run again" in err
    assert run_state(RUN) == FITTED and run_state(OTHER_RUN) == TESTED
    # `sweep --run` (and `sweep point`) test it again, then the final report reads the new result.
    main([*EMIT[:-2], "--run", "s"])
    out = capsys.readouterr().out
    assert f"sweep: {NAME}: s/runs/C4_S20/seed0/test_metrics.json is damaged ({message}" in out
    assert [c[0] for c in recorded] == ["test"] and f"sweep: {OTHER}: done" in out
    assert run_state(RUN) == TESTED and "sweep s: 2 runs done" in out


def test_the_report_marks_one_seed_and_a_partial_test(capsys: pytest.CaptureFixture) -> None:
    """Issue 26, T8 (the report's part): a point with one seed has no spread ("–" and null, not ± 0.0000);
    a result of part of the test split (`mixer test --trainer.limit_test_batches`, which records
    ``partial``, ``images`` and ``of``) is flagged on its row and in summary.csv."""
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
    assert c8.endswith("0.4000 –  (partial test: seed 0: 64 of 359)"), c8
    assert "± 0.0000" not in out
    main(["sweep", "report", "s", "--json"])
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert [(r["point"], r["seeds"], r["test_error_std"], r["partial"]) for r in summary] == [
        ("C4_S20", 2, pytest.approx(0.1414, abs=1e-4), ""),
        ("C8_S12", 1, None, "seed 0: 64 of 359"),
    ]


# --------------------------------------------------------------- RC2, T9: --parallel side by side


SHORT = "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --trainer.limit_test_batches 2"


def test_parallel_points_log_to_their_own_files(capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """--parallel 2: the console has one line per start and per end of each point (not their interleaved
    output); each point's output is in s/logs/NAME.log."""
    monkeypatch.setenv("MIXER_ARGS", SHORT)
    main([*EMIT[:-2], "--run", "s", "--parallel", "2"])
    out, err = capfd.readouterr()
    lines = out.strip().splitlines()
    assert all(line.startswith("sweep") for line in lines), out
    assert "Run directory" not in out + err and "Test metric" not in out + err
    for name, run_dir, other in ((NAME, RUN, OTHER_RUN), (OTHER, OTHER_RUN, RUN)):
        log = Path("s/logs", f"{name}.log").read_text()
        assert f"Run directory: {run_dir}" in log and str(other) not in log
        assert f"sweep: {name}: started (log: s/logs/{name}.log)" in lines
        assert any(line.startswith(f"sweep: {name}: done in ") and ", test/acc1 " in line for line in lines), lines
        assert run_state(run_dir) == TESTED


def _wait(condition, process: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stopped_parallel_sweep_stops_its_points(how: str, tmp_path: Path) -> None:
    """SIGTERM to `mixer sweep --run --parallel 2` while both points fit: the points get it too, save
    last.ckpt and stop, and the sweep ends with one line and exit 143 (before: it exited at once and its
    points trained on as orphans). SIGKILL: the points get SIGTERM from the kernel and stop the same way.
    Either way no live writer is left, and the same command continues both points to the end."""
    hold = tmp_path / "hold"
    hold.write_text("")
    overlay = tmp_path / "hold.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "callbacks": [
                        {"class_path": "helpers.sweep_sleeper.HoldAfterFirstStep", "init_args": {"hold": str(hold)}}
                    ]
                }
            }
        )
    )
    paths = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "MIXER_TRUSTED_MODULES": "helpers"}
    env.pop("MIXER_ARGS", None)
    command = [MIXER, *EMIT[:3], "--config", str(overlay), *EMIT[3:-2], "--run", "s", "--parallel", "2"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for run_dir in (RUN, OTHER_RUN):
            _wait(lambda r=run_dir: (r / "holding").exists() or process.poll() is not None, process, f"{run_dir} fits")
        assert process.poll() is None, process.communicate()
        process.send_signal(getattr(signal, how))
        for name in (NAME, OTHER):  # the point saw the signal (its log says so): it stops at its next step
            log = Path("s/logs", f"{name}.log")
            _wait(lambda g=log: g.exists() and "SIGTERM received" in g.read_text(), process, f"{name} signalled")
    finally:
        hold.unlink()  # the points go on (and stop, or on the code before: train to the end)
    out, err = process.communicate(timeout=300)
    if how == "SIGTERM":
        assert process.returncode == 143, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith("mixer: sweep s: stopped by SIGTERM: 2 runs stopped"), err[-3000:]
        assert "0 not started; run the same command again to continue" in last
    else:
        assert process.returncode == -signal.SIGKILL
    for run_dir in (RUN, OTHER_RUN):  # no process writes the run any more: its lock is free
        _wait(lambda r=run_dir: _lock_free(r), process, f"{run_dir} released")
        assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1
        assert run_state(run_dir) not in (FITTED, TESTED)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert run_state(RUN) == TESTED and run_state(OTHER_RUN) == TESTED
    assert f"sweep: {NAME}: resuming from {RUN}/checkpoints/last.ckpt" in Path("s/logs", f"{NAME}.log").read_text()


def _lock_free(run_dir: Path) -> bool:
    from mixer_lightning.errors import ResourceError

    try:
        RunLock(run_dir).acquire().release()
    except ResourceError:
        return False
    return True
