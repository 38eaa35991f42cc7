"""Training curves of a run from its logs, and their spread across seeds (Hayase & Karakida 2024,
App. D.7, Figs. S.6-S.8: test and train loss curves, mean over five seeds with the min–max range).

A run directory's scalars are read from its TensorBoard event files (the default logger) or from a
CSVLogger's ``metrics.csv``. A resumed run has several event files, and the killed process may have
logged past its last checkpoint: for every step the value written last (by wall time) wins, so the
curve is the one the finished run stands for. Lightning logs ``epoch`` beside every metric, so each
value is placed at its epoch. A metric logged per step has an epoch figure beside it (``train/loss`` and
``train/loss_epoch``, the mean over every batch of the epoch): that is the one read, not the few steps the
logger sampled (every ``log_every_n_steps``); a metric logged per step only is averaged over its steps.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from pathlib import Path

from mixer_lightning.errors import require


def _tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, tuple[float, float]]]:
    """tag -> step -> (wall time, value), the latest write of each step over all event files."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    scalars: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 0})
        accumulator.Reload()
        for tag in accumulator.Tags().get("scalars", []):
            for event in accumulator.Scalars(tag):
                known = scalars[tag].get(event.step)
                if known is None or event.wall_time >= known[0]:
                    scalars[tag][event.step] = (event.wall_time, float(event.value))
    return scalars


def _csv_scalars(path: Path) -> dict[str, dict[int, tuple[float, float]]]:
    scalars: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    with open(path, newline="") as f:
        for order, row in enumerate(csv.DictReader(f)):
            step = int(float(row.get("step") or 0))
            for tag, value in row.items():
                if tag != "step" and value not in (None, ""):
                    scalars[tag][step] = (float(order), float(value))
    return scalars


def has_logs(run_dir: str | Path) -> bool:
    run_dir = Path(run_dir)
    return any(run_dir.glob("events.out.tfevents.*")) or (run_dir / "metrics.csv").is_file()


def _scalars(run_dir: Path) -> tuple[dict[str, dict[int, tuple[float, float]]], bool]:
    """A run's scalars, and whether their first field is a wall time (TensorBoard) or an order (CSV)."""
    if (run_dir / "metrics.csv").is_file():
        return _csv_scalars(run_dir / "metrics.csv"), False
    return _tensorboard_scalars(run_dir), True


def _epochs(scalars: dict[str, dict[int, tuple[float, float]]]) -> dict[int, int]:
    """step -> the epoch Lightning logged beside it."""
    return {step: int(round(value)) for step, (_, value) in scalars.get("epoch", {}).items()}


def epoch_log(run_dir: str | Path, metric: str) -> dict[int, tuple[float | None, float]]:
    """epoch -> (when it was logged, value) of a metric logged once an epoch (``val/acc1``), the write
    that counts (module docstring) at each epoch; the time (seconds since 1970) from TensorBoard's event
    files, None from a metrics.csv, which keeps no times."""
    scalars, timed = _scalars(Path(run_dir))
    epoch_of = _epochs(scalars)
    log: dict[int, tuple[float | None, float]] = {}
    for step, (when, value) in sorted(scalars.get(metric, {}).items()):
        if step in epoch_of and math.isfinite(value):
            log[epoch_of[step]] = (when if timed else None, value)
    return dict(sorted(log.items()))


def epoch_curves(run_dir: str | Path, metrics: list[str]) -> dict[str, dict[int, float]]:
    """metric -> epoch -> value for one run (an empty curve where the metric was never logged); a metric with
    an epoch figure (``train/loss``: ``train/loss_epoch``) is read from it (module docstring)."""
    scalars, _ = _scalars(Path(run_dir))
    epoch_of = _epochs(scalars)
    curves: dict[str, dict[int, float]] = {}
    for metric in metrics:
        per_epoch: dict[int, list[float]] = defaultdict(list)
        for step, (_, value) in sorted(scalars.get(f"{metric}_epoch", scalars.get(metric, {})).items()):
            if step in epoch_of and math.isfinite(value):
                per_epoch[epoch_of[step]].append(value)
        curves[metric] = {epoch: statistics.fmean(values) for epoch, values in sorted(per_epoch.items())}
    return curves


def spread(curves: list[dict[int, float]]) -> list[dict]:
    """Mean, min and max over runs at every epoch all of them reached (their common epochs), the epochs counted
    from 1 as the progress lines and the stop message count them (Lightning logs them from 0)."""
    require(bool(curves), "curves", "no runs to average")
    epochs = set(curves[0])
    for curve in curves[1:]:
        epochs &= set(curve)
    rows = []
    for epoch in sorted(epochs):
        values = [curve[epoch] for curve in curves]
        rows.append(
            {
                "epoch": epoch + 1,
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
                "runs": len(values),
            }
        )
    return rows
