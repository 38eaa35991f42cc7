"""What a run leaves in its run directory besides checkpoints and logs, for `mixer sweep report` and
scripts: ``fit_summary.json``, ``val_metrics.json``, ``test_metrics.json`` (atomically, by the first
process), and the file `mixer predict` writes its predictions to.

An evaluation's results name the checkpoint they are of (path, epoch, step, sha256) and the config it
saved, and never replace another checkpoint's: ``test_metrics.json`` is this checkpoint's or free, else
``test_metrics.<checkpoint stem>.json`` (`stage_file`). An evaluation cut by ``limit_*_batches`` never
replaces a whole-split one of the same checkpoint either."""

from __future__ import annotations

import hashlib
import json
from itertools import chain, count
from pathlib import Path
from typing import Any

from mixer_lightning.callbacks import PredictionWriter
from mixer_lightning.callbacks.throughput import SpeedMonitor
from mixer_lightning.cli.console import RunHeader, relative
from mixer_lightning.cli.rundirs import first_process
from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import write_text

RESULTS = {"validate": "val_metrics.json", "test": "test_metrics.json"}


def write_json(trainer: Any, name: str, content: dict, announce: str | None = None) -> None:
    """Write `content` to ``<run dir>/<name>``, atomically; with `announce`, say where
    (``Test metrics: runs/x/version_0/test_metrics.json``)."""
    log_dir = run_directory(trainer)  # a broadcast under DDP: every process must ask, not only rank 0
    if trainer.is_global_zero and not trainer.fast_dev_run and log_dir:
        write_text(Path(log_dir) / name, json.dumps(content, indent=2) + "\n", field=name)
        if announce:
            print(f"{announce}: {relative(Path(log_dir) / name)}", flush=True)


def stage_metrics(trainer: Any, stage: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(f"{stage}/")}


def write_fit_summary(trainer: Any) -> None:
    """``fit_summary.json``: epochs, steps, the last validation metrics, the throughput and the best checkpoint."""
    checkpoint = trainer.checkpoint_callback
    summary: dict = {"epochs": trainer.current_epoch, "steps": trainer.global_step}
    summary.update(stage_metrics(trainer, "val"))
    monitor = next((c for c in trainer.callbacks if isinstance(c, SpeedMonitor)), None)
    throughput = monitor.summary(trainer.world_size) if monitor is not None else None
    if throughput is not None:  # images/s, data wait, MFU over the fit (`mixer_lightning.callbacks.throughput`)
        summary["throughput"] = throughput
    log_dir = run_directory(trainer)  # a broadcast under DDP: every process must ask, not only rank 0
    if checkpoint is not None and checkpoint.best_model_path:
        summary.update(best_checkpoint=checkpoint.best_model_path, monitor=checkpoint.monitor)
        summary["best_score"] = float(checkpoint.best_model_score)
        if len(checkpoint.best_k_models) > 1:  # save_top_k > 1: every checkpoint kept, with its score
            summary["best_k"] = {path: float(score) for path, score in checkpoint.best_k_models.items()}
        if trainer.is_global_zero:
            print(f"Run directory: {log_dir}")
            print(f"Best checkpoint ({checkpoint.monitor} = {summary['best_score']:.4f}): {checkpoint.best_model_path}")
    write_json(trainer, "fit_summary.json", summary)


def checkpoint_record(path: Any, run_dir: Path | None, facts: dict) -> dict | None:
    """What identifies the checkpoint at `path`: its path (relative to `run_dir` when inside it), the
    epoch and step it was saved at (`facts`), and the sha256 of its bytes (read in 1 MiB blocks)."""
    if not path or not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    shown = Path(path).resolve()
    if run_dir is not None and Path(run_dir).resolve() in shown.parents:
        shown = shown.relative_to(Path(run_dir).resolve())
    return {
        "path": str(shown),
        "epoch": facts.get("epoch"),
        "global_step": facts.get("global_step"),
        "sha256": digest.hexdigest(),
    }


def _replaceable(path: Path, sha: str | None, limited: bool) -> bool:
    """Whether results of the checkpoint `sha` may replace those in `path`: they must be of the same
    checkpoint, and a `limited` evaluation (``limit_*_batches``) only replaces another partial one, so
    that ``mixer test --trainer.limit_test_batches 2`` never overwrites the whole split's figures."""
    try:
        content = json.loads(path.read_text())
        recorded = (content.get("checkpoint") or {}).get("sha256")
        partial = content.get("partial")
    except (OSError, ValueError, AttributeError):
        return False
    return sha is not None and recorded == sha and (not limited or partial is True)


def limited_evaluation(trainer: Any, command: str) -> bool:
    """Whether ``trainer.limit_val_batches``/``limit_test_batches`` may cut `command`'s split: anything but
    the float 1.0 (Lightning reads an int as a number of batches, so ``1`` is one batch)."""
    limit = getattr(trainer, "limit_val_batches" if command == "validate" else "limit_test_batches", 1.0)
    return not (isinstance(limit, float) and limit == 1.0)


def stage_file(run_dir: Path | None, command: str, record: dict | None, limited: bool = False) -> str:
    """The file name of `command`'s results in `run_dir`: ``test_metrics.json`` when it is free or holds
    the results of this same checkpoint (its sha256), else ``test_metrics.<stem>.json``, then
    ``test_metrics.<stem>.<n>.json`` (best.ckpt changes between fits): never another checkpoint's, and
    for a `limited` evaluation never a whole split's (`_replaceable`)."""
    base = RESULTS[command]
    if run_dir is None:
        return base
    sha = record["sha256"] if record else None
    stem = Path(record["path"]).stem if record else "nockpt"
    numbered = (f"{base[:-5]}.{stem}.{n}.json" for n in count(1))
    for name in chain([base, f"{base[:-5]}.{stem}.json"], numbered):
        path = Path(run_dir) / name
        if not path.exists() or _replaceable(path, sha, limited):
            return name
    raise AssertionError("unreachable")


def write_stage_metrics(
    trainer: Any, command: str, name: str | None = None, record: dict | None = None, config: str | None = None
) -> None:
    """``val_metrics.json`` (validate) or ``test_metrics.json`` (test), or the `name` `stage_file` chose:
    the flat metrics (what `mixer sweep report` reads), the images evaluated (``images`` of ``of``, and
    ``partial`` when ``trainer.limit_*_batches`` cut the split: counted by the `RunHeader`), the checkpoint
    `record` and the `config` saved."""
    stage = "val" if command == "validate" else command
    title = "Validation metrics" if command == "validate" else "Test metrics"
    content: dict[str, Any] = dict(stage_metrics(trainer, stage))
    header = next((c for c in trainer.callbacks if isinstance(c, RunHeader)), None)
    if header is not None and header.evaluated is not None:  # images, of, partial: a limit_*_batches run says so
        content.update(header.evaluated)
    content.update(checkpoint=record, config=config)
    write_json(trainer, name or RESULTS[command], content, title)


def choose_prediction_file(trainer: Any, datamodule: Any, run_dir: Path | None, header: RunHeader | None) -> None:
    """The file `mixer predict` writes (in the run directory, or Lightning's default_root_dir), told to
    the prediction writer and shown in the run header."""
    files = getattr(datamodule, "predict_root", None) is not None
    for callback in trainer.callbacks:
        if isinstance(callback, PredictionWriter) and first_process() and not trainer.fast_dev_run:
            folder = run_dir or Path(trainer.default_root_dir)
            callback.resolved = callback.target(str(folder), files)
            if header is not None:
                header.results = f"predictions: {callback.resolved.name}"
