"""`run_point`: the one place that decides what a run of a sweep still needs, used by ``mixer sweep --run``,
by its scripts (through ``mixer sweep point``) and so by a re-submitted SLURM array alike:

=========  =====================================  ===========================================
state      found in the run directory             what runs
=========  =====================================  ===========================================
tested     ``test_metrics.json``                  nothing
fitted     ``fit_summary.json``                   ``mixer test`` of its last.ckpt
partial    ``checkpoints/last.ckpt``              ``mixer fit --ckpt_path last`` (the run's own
                                                  checkpoint: logger name and version are pinned
                                                  per point and seed), then the test
fresh      none of these                          ``mixer fit``, then the test; what a run killed
                                                  before its first checkpoint left is moved aside
                                                  to ``<run>.aborted-N`` first
=========  =====================================  ===========================================

Each fit and test is the ``mixer`` command itself in a process of its own (`run_mixer`), started as the
console script starts: the command line sits above the sweep, which reaches it as a shell does, not by import.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

from filelock import Timeout

from mixer_lightning.commands.sweep.manifest import (
    FITTED,
    FRESH,
    METRICS,
    PARTIAL,
    TESTED,
    load_metrics,
    point_lock,
    run_state,
)
from mixer_lightning.errors import ConfigError, ResourceError
from mixer_lightning.hardware import mixer_command

EXTRA_ARGS_ENV = "MIXER_ARGS"  # flags for every fit and test of a sweep, e.g. a trainer overlay
# A point waits this long for its lock: a `sweep status` probing it at that moment lets go at once.
LOCK_WAIT_S = 2.0


# Passed on to the `mixer` child when sent to this process alone. A terminal's Ctrl+C and SLURM's signals reach
# the whole process group, the child included, directly; a stop signal twice is one stop (tests/test_signals.py).
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def run_mixer(arguments: list[str]) -> None:
    """``mixer ARGUMENTS`` as a process of its own in this one's process group, waited for; its failure ends
    this process with its exit status (its one-line error is already on stderr; 128 + N if signal N ended it)."""
    process = subprocess.Popen(mixer_command(arguments))
    handlers = {s: signal.signal(s, lambda signum, frame: process.send_signal(signum)) for s in FORWARDED}
    try:
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # Ctrl+C reached the child too: it stops (last.ckpt) and ends; wait for it
                continue
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if code:
        raise SystemExit(code if code > 0 else 128 - code)


def fit_arguments(entry: dict, state: str, extra: list[str] = ()) -> list[str] | None:
    """The ``mixer`` arguments of the fit a run in `state` needs (None: it needs none)."""
    if state in (TESTED, FITTED):
        return None
    return ["fit", "--config", entry["config"], *(("--ckpt_path", "last") if state == PARTIAL else ()), *extra]


def test_arguments(entry: dict, extra: list[str] = ()) -> list[str]:
    return [
        "test",
        "--config",
        entry["config"],
        "--ckpt_path",
        str(Path(entry["run_dir"], "checkpoints", "last.ckpt")),
        *extra,
    ]


def extra_arguments() -> list[str]:
    """Flags from ``$MIXER_ARGS`` for every fit and test (``MIXER_ARGS='--config configs/trainer/gpu.yaml'``)."""
    text = os.environ.get(EXTRA_ARGS_ENV, "")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise ConfigError(EXTRA_ARGS_ENV, f"cannot read {text!r} ({error})", "quote it as a shell would") from None


def _set_aside(run_dir: Path) -> Path:
    n = 1
    while run_dir.with_name(f"{run_dir.name}.aborted-{n}").exists():
        n += 1
    return run_dir.rename(run_dir.with_name(f"{run_dir.name}.aborted-{n}"))


def run_point(entry: dict, extra: list[str] | None = None, log=print) -> str:
    """Bring one run of a sweep to its end (module docstring), holding the point's lock throughout, so that
    a second process of the same point (two array tasks, a re-run while an orphan trains) is refused
    instead of fitting or testing it twice. Returns the state it found."""
    extra = extra_arguments() if extra is None else extra
    run_dir, name = Path(entry["run_dir"]), entry["name"]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = point_lock(run_dir, LOCK_WAIT_S)
    try:
        lock.acquire()
    except Timeout:
        raise ResourceError(
            "sweep point",
            f"{name} ({str(run_dir)!r}) is being run by another process",
            "wait for it to end (or stop it)",
        ) from None
    try:
        state = run_state(run_dir)
        if state == TESTED:
            log(f"sweep: {name}: done ({run_dir / METRICS})")
            return state
        damaged = load_metrics(run_dir)[1]
        if damaged is not None:
            log(f"sweep: {name}: {run_dir / METRICS} is damaged ({damaged}); it is tested again")
        if state == FRESH and run_dir.exists():
            log(f"sweep: {name}: no checkpoint in {run_dir} (killed before its first); moved to {_set_aside(run_dir)}")
        log(
            f"sweep: {name}: "
            + {PARTIAL: f"resuming from {run_dir / 'checkpoints' / 'last.ckpt'}", FITTED: "fitted; testing"}.get(
                state, "fitting"
            )
        )
        arguments = fit_arguments(entry, state, extra)
        if arguments is not None:
            run_mixer(arguments)
        run_mixer(test_arguments(entry, extra))
        return state
    finally:
        lock.release()
