"""``mixer sweep status``: where each run of a sweep stands and what is left, read from the run directories.

Per run: its state as `run_point` sees it (tested; fitted: the test is next; stopped: it resumes from its
last.ckpt; not started), or running when a live process holds the point's lock; the epochs its logs reached
of ``trainer.max_epochs`` (of the config it was last started with), its last validation error (the paper
configs validate on the test split), its test error, the seconds an epoch took (the median over its last
epochs, from the TensorBoard event times, so that an interruption does not count) and the time left at that
pace. A run without a pace of its own is priced at its point's other seeds (the same model), else at the
sweep's median: at a fixed Ω the points cost about the same (App. C), across depths they do not (Fig. 7).
Nothing is written; a lock is only probed (taken and let go at once when free)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_log, has_logs
from mixer_lightning.commands.sweep.manifest import (
    FITTED,
    FRESH,
    PARTIAL,
    TESTED,
    is_running,
    load_metrics,
    read_manifest,
    run_state,
)
from mixer_lightning.safety.config_files import load_configs

PACE_EPOCHS = 20  # the pace is the median epoch time over a run's last epochs
STATE_WORDS = {TESTED: "tested", FITTED: "fitted, test next", PARTIAL: "stopped", FRESH: "not started"}
PHASES = ("tested", "running", "fitted", "stopped", "not started")


def add_status_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="sweep directories")
    parser.add_argument("--json", action="store_true", help="print every run's status as JSON")


def max_epochs_of(entry: dict) -> int | None:
    """``trainer.max_epochs`` of the newest config the run saved (``config.yaml``, ``config.resumeN.yaml``:
    flags such as ``$MIXER_ARGS`` included), else of the sweep's config of the run."""
    run_dir = Path(entry["run_dir"])
    saved = sorted(run_dir.glob("config*.yaml"), key=lambda p: int("0" + "".join(filter(str.isdigit, p.name))))
    try:
        epochs = (
            load_configs([str(saved[-1] if saved else entry["config"])], "config", imported=False).get("trainer") or {}
        ).get("max_epochs")
    except Exception:  # a config that no longer reads: its run's own commands say why
        return None
    return epochs if isinstance(epochs, int) and epochs > 0 else None


def run_status(entry: dict) -> dict:
    run_dir = Path(entry["run_dir"])
    state = run_state(run_dir)
    running = state != TESTED and is_running(run_dir)
    log = epoch_log(run_dir, "val/acc1") if has_logs(run_dir) else {}
    times = {e: when for e, (when, _) in log.items() if when is not None}
    gaps = [times[e] - times[e - 1] for e in sorted(times) if e - 1 in times and times[e] > times[e - 1]]
    metrics = load_metrics(run_dir)[0]
    last = max(log) if log else None
    return {
        "name": entry["name"],
        "point": entry.get("point"),
        "seed": entry.get("seed"),
        "state": state,
        "phase": "running" if running else STATE_WORDS[state].split(",")[0],
        "running": running,
        "epochs": 0 if last is None else last + 1,
        "max_epochs": max_epochs_of(entry),
        "val_error": None if last is None else 1.0 - log[last][1],
        "test_error": None if metrics is None else 1.0 - metrics["test/acc1"],
        "seconds_per_epoch": statistics.median(gaps[-PACE_EPOCHS:]) if gaps else None,
    }


def sweep_status(directory: str) -> dict:
    """Every run's status with the seconds it has left (``left_s``; ``left_estimated`` where the pace is not
    its own), and the sweep's counts and total."""
    runs = [run_status(entry) for entry in read_manifest(directory)["runs"]]
    paces = [r["seconds_per_epoch"] for r in runs if r["seconds_per_epoch"]]
    typical = statistics.median(paces) if paces else None
    by_point: dict[str, list[float]] = {}
    for r in runs:
        if r["seconds_per_epoch"]:
            by_point.setdefault(r["point"], []).append(r["seconds_per_epoch"])
    for r in runs:
        r["left_s"], r["left_estimated"] = None, r["seconds_per_epoch"] is None
        if r["state"] in (TESTED, FITTED):
            r["left_s"], r["left_estimated"] = 0.0, False
        elif r["max_epochs"] is not None:
            pace = r["seconds_per_epoch"] or (
                statistics.median(by_point[r["point"]]) if r["point"] in by_point else typical
            )
            r["left_s"] = None if pace is None else max(r["max_epochs"] - r["epochs"], 0) * pace
    unknown = [r["name"] for r in runs if r["left_s"] is None]
    return {
        "directory": directory,
        "runs": runs,
        "counts": {phase: sum(r["phase"] == phase for r in runs) for phase in PHASES},
        "left_s": None if unknown else sum(r["left_s"] for r in runs),
        "pace_s": typical,
        "unknown": unknown,
    }


def _duration(seconds: float | None, estimated: bool = False) -> str:
    if not seconds:
        return "?" if seconds is None else "–"
    return ("~" if estimated else "") + (
        f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{max(seconds / 60, 1):.0f} min"
    )


def _print(status: dict) -> None:
    counts = ", ".join(f"{n} {what}" for what, n in status["counts"].items() if n)
    left, runs = status["left_s"], status["runs"]
    if left is None and status["pace_s"] is None:
        tail = "time left unknown (no run has logged an epoch time yet)"
    elif left is None:
        tail = f"time left unknown (no trainer.max_epochs in the config of {', '.join(status['unknown'][:3])})"
    else:
        tail = (
            "nothing left"
            if left == 0
            else f"about {_duration(left)} of runs left, one at a time (--parallel N: about 1/N of it)"
        )
    print(f"sweep {status['directory']}: {len(runs)} run{'' if len(runs) == 1 else 's'}: {counts}; {tail}")
    width = max([3, *(len(r["name"]) for r in runs)])
    print(
        f"  {'run':<{width}}  {'state':<17}  {'epochs':>9} {'val error':>10} {'test error':>10} {'s/epoch':>8} {'left':>9}"
    )
    for r in runs:
        state = "running" if r["running"] else STATE_WORDS[r["state"]]
        errors = ["–" if e is None else f"{e:.4f}" for e in (r["val_error"], r["test_error"])]
        pace = "–" if r["seconds_per_epoch"] is None else f"{r['seconds_per_epoch']:.1f}"
        print(
            f"  {r['name']:<{width}}  {state:<17}  {r['epochs']:>4}/{r['max_epochs'] or '?':<4} {errors[0]:>10} "
            f"{errors[1]:>10} {pace:>8} {_duration(r['left_s'], r['left_estimated']):>9}"
        )


def run_status_command(args) -> None:
    """Where each run of the sweeps stands: tested, fitted (the test is next), running, stopped (resumes from
    its last.ckpt) or not started; epochs reached of max_epochs, the last validation error, the test error,
    seconds an epoch and the time left; per sweep the counts and the time left.

    Example:
        mixer sweep status sweeps/fig5_c10 sweeps/fig5_c10_rp
    """
    statuses = [sweep_status(directory) for directory in args.directories]
    if args.json:
        print(json.dumps({"sweeps": statuses}, indent=2))
        return
    for status in statuses:
        _print(status)
