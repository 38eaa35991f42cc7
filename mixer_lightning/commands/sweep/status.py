"""``mixer sweep status``: where each run of a sweep stands, and what is left (a sweep that spans
sessions, or a SLURM array, is otherwise read from its run directories by hand).

For every run of the manifest: its state as `run_point` sees it (``tested``, ``fitted``: the test is
next, ``partial``: stopped, it resumes from its last.ckpt, ``fresh``: not started), ``running`` when a
live process holds the point's lock (`PointLock`) or the run's own (`RunLock`: a ``mixer fit`` of it
started by hand), the epochs its logs reached of ``trainer.max_epochs`` (as the run was last started), its last
validation error (``val/acc1``; the paper configs validate on the test split), its test error, the
seconds an epoch took (the median over its last epochs, from the TensorBoard event times, so the gap of
an interruption does not count) and the time it has left at that pace. A run without a pace of its own
(not started, or one epoch in) is priced at the median pace of its point's other seeds, which train the same
model; where none has one, at the median pace of the sweep's runs, which at a fixed Ω cost about the same
(H&K 2024, App. C), but not across the grid of a sweep over depth or Ω (Fig. 7: an epoch at L = 16 takes
twice one at L = 8).

It only reads: no lock is taken (a probe of a lock could refuse a point starting at that moment) and
nothing is written. A lock held on another host cannot be checked from here: it is shown as running
there, with its process and start time.
"""

from __future__ import annotations

import json
import socket
import statistics
import time
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_log, has_logs
from mixer_lightning.commands.sweep.manifest import read_manifest
from mixer_lightning.commands.sweep.runs import FITTED, FRESH, PARTIAL, TESTED, PointLock, load_metrics, run_state
from mixer_lightning.safety.atomic import holder_alive
from mixer_lightning.safety.config_files import load_configs
from mixer_lightning.safety.rundir import LOCK_NAME

METRIC = "val/acc1"
PACE_EPOCHS = 20  # the pace is the median epoch time over a run's last epochs
STATE_WORDS = {TESTED: "tested", FITTED: "fitted, test next", PARTIAL: "stopped", FRESH: "not started"}
PHASES = ("tested", "running", "fitted", "stopped", "not started")  # a run's phase: its state, or running


def add_status_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="sweep directories")
    parser.add_argument("--json", action="store_true", help="print every run's status as JSON")


def lock_holder(path: Path) -> dict | None:
    """Who holds the lock file `path` (``PID HOST TIME``, as `RunLock` writes it): None when there is no
    file, or when its process is gone from this host (a killed holder's file holds no lock; a later process
    given its PID is not it); on another host the process cannot be checked, and the holder is given as
    written."""
    try:
        pid, host, started = (path.read_text().split() + ["", "", ""])[:3]
    except OSError:
        return None
    if not pid.isdigit():
        return None
    here = host == socket.gethostname()
    since = float(started) if started.replace(".", "", 1).isdigit() else None
    if here and not holder_alive(int(pid), since):
        return None
    return {"pid": int(pid), "host": host, "since": since, "checked": here}


def _max_epochs(entry: dict) -> int | None:
    """``trainer.max_epochs`` as the run was last started with: the newest config the run saved
    (``config.yaml``, then ``config.resumeN.yaml``: flags such as ``$MIXER_ARGS`` included), else the
    sweep's config of the run."""
    run_dir = Path(entry["run_dir"])
    saved = {0: run_dir / "config.yaml"} if (run_dir / "config.yaml").is_file() else {}
    for path in run_dir.glob("config.resume*.yaml"):
        number = path.name.removeprefix("config.resume").removesuffix(".yaml")
        if number.isdigit():
            saved[int(number)] = path
    config = saved[max(saved)] if saved else entry["config"]
    try:
        trainer = load_configs([str(config)], "config").get("trainer") or {}
    except Exception:  # a config that no longer reads: the run's own commands say why
        return None
    epochs = trainer.get("max_epochs") if isinstance(trainer, dict) else None
    return epochs if isinstance(epochs, int) and epochs > 0 else None


def _pace(times: dict[int, float]) -> float | None:
    """Seconds an epoch, the median over the last `PACE_EPOCHS` pairs of consecutive epochs."""
    gaps = [times[e] - times[e - 1] for e in sorted(times) if e - 1 in times and times[e] > times[e - 1]]
    return statistics.median(gaps[-PACE_EPOCHS:]) if gaps else None


def run_status(entry: dict) -> dict:
    """One run's status (module docstring)."""
    run_dir = Path(entry["run_dir"])
    state = run_state(run_dir)
    holder = None
    if state != TESTED:
        holder = lock_holder(PointLock(run_dir, entry["name"]).path) or lock_holder(run_dir / LOCK_NAME)
    log = epoch_log(run_dir, METRIC) if has_logs(run_dir) else {}
    metrics = load_metrics(run_dir)[0]
    last = max(log) if log else None
    phase = "tested" if state == TESTED else "running" if holder else STATE_WORDS[state].split(",")[0]
    return {
        "name": entry["name"],
        "point": entry.get("point"),
        "seed": entry.get("seed"),
        "state": state,
        "phase": phase,
        "running": holder,
        "epochs": 0 if last is None else last + 1,
        "max_epochs": _max_epochs(entry),
        "val_error": None if last is None else 1.0 - log[last][1],
        "test_error": None if metrics is None else 1.0 - metrics["test/acc1"],
        "seconds_per_epoch": _pace({e: when for e, (when, _) in log.items() if when is not None}),
    }


def sweep_status(directory: str) -> dict:
    """The status of every run of a sweep, each with the seconds it has left (``left_s``; ``left_estimated``
    where the pace is its point's or the sweep's median, not the run's own), and the sweep's counts and
    total."""
    runs = [run_status(entry) for entry in read_manifest(directory, "directories")["runs"]]
    paces = [r["seconds_per_epoch"] for r in runs if r["seconds_per_epoch"]]
    typical = statistics.median(paces) if paces else None
    by_point: dict[str, list[float]] = {}
    for r in runs:
        if r["seconds_per_epoch"] and r["point"] is not None:
            by_point.setdefault(r["point"], []).append(r["seconds_per_epoch"])
    for r in runs:
        r["left_s"], r["left_estimated"] = None, False
        if r["state"] in (TESTED, FITTED):
            r["left_s"] = 0.0
        elif r["max_epochs"] is not None:
            same_point = by_point.get(r["point"])
            pace = r["seconds_per_epoch"] or (statistics.median(same_point) if same_point else typical)
            r["left_estimated"] = r["seconds_per_epoch"] is None
            r["left_s"] = None if pace is None else max(r["max_epochs"] - r["epochs"], 0) * pace
    counts = {phase: sum(r["phase"] == phase for r in runs) for phase in PHASES}
    unknown = [r["name"] for r in runs if r["left_s"] is None]
    total = None if unknown else sum(r["left_s"] for r in runs)
    return {
        "directory": directory,
        "runs": runs,
        "counts": counts,
        "left_s": total,
        "pace_s": typical,
        "unknown": unknown,
    }


def _duration(seconds: float | None, estimated: bool = False) -> str:
    if seconds is None:
        return "?"
    if seconds == 0:
        return "–"
    text = f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{max(seconds / 60, 1):.0f} min"
    return ("~" if estimated else "") + text


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f} %"


def _state_text(r: dict) -> str:
    holder = r["running"]
    if holder is None:
        return STATE_WORDS[r["state"]]
    where = "" if holder["checked"] else f" on {holder['host']}"
    since = f", since {time.strftime('%H:%M', time.localtime(holder['since']))}" if holder["since"] else ""
    return f"running (process {holder['pid']}{where}{since})"


def _print(status: dict) -> None:
    counts = ", ".join(f"{n} {what}" for what, n in status["counts"].items() if n)
    left = status["left_s"]
    if left is None and status["pace_s"] is None:
        tail = "time left unknown (no run has logged an epoch time yet)"
    elif left is None:
        names = ", ".join(status["unknown"][:3]) + (", …" if len(status["unknown"]) > 3 else "")
        tail = f"time left unknown (no trainer.max_epochs in the config of {names})"
    elif left == 0:
        tail = "nothing left"
    else:
        tail = f"about {_duration(left)} of runs left, one at a time (--parallel N: about 1/N of it)"
    runs = status["runs"]
    print(f"sweep {status['directory']}: {len(runs)} run{'' if len(runs) == 1 else 's'}: {counts}; {tail}")
    states = [_state_text(r) for r in runs]
    width, state_width = max([3, *(len(r["name"]) for r in runs)]), max([5, *map(len, states)])
    print(
        f"  {'run':<{width}}  {'state':<{state_width}}  {'epochs':>9} {'val error':>10} {'test error':>10} "
        f"{'s/epoch':>8} {'left':>9}"
    )
    for r, state in zip(runs, states, strict=True):
        epochs = f"{r['epochs']}/{r['max_epochs'] or '?'}"
        pace = "–" if r["seconds_per_epoch"] is None else f"{r['seconds_per_epoch']:.1f}"
        print(
            f"  {r['name']:<{width}}  {state:<{state_width}}  {epochs:>9} {_percent(r['val_error']):>10} "
            f"{_percent(r['test_error']):>10} {pace:>8} {_duration(r['left_s'], r['left_estimated']):>9}"
        )


def run_status_command(args) -> None:
    """Where each run of the sweeps stands: tested, fitted (the test is next), running (which process),
    stopped (resumes from its last.ckpt) or not started; epochs reached of max_epochs, the last
    validation error, the test error, seconds an epoch and the time left; per sweep the counts and the
    time left. Reads only.

    Example:
        mixer sweep status sweeps/fig5_c10 sweeps/fig5_c10_rp
    """
    statuses = [sweep_status(directory) for directory in args.directories]
    if args.json:
        print(json.dumps({"sweeps": statuses}, indent=2))
        return
    for status in statuses:
        _print(status)
