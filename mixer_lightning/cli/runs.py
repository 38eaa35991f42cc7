"""Run directories, ``<save_dir>/<name>/version_N/``: which one a command writes and what it leaves there.

- ``--ckpt_path last`` is the last.ckpt of the pinned version, else of the highest version_N (`find_last_run`);
- one writer per run: ``mixer fit`` holds ``<run>/.mixer.lock`` while it runs (`lock_run`);
- validate/test/predict of a checkpoint inside a run write into that run: their config as
  ``config.<command>N.yaml`` and their results naming the checkpoint they are of (path, epoch, step,
  sha256), never in place of another checkpoint's (`results_name`); a fit writes ``fit_summary.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from itertools import chain, count
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mixer_lightning.errors import ConfigError, ResourceError
from mixer_lightning.safety.atomic import sha256_file, write_text

LOCK_NAME = ".mixer.lock"
RESULTS = {"validate": "val_metrics.json", "test": "test_metrics.json"}


def run_dir_of_checkpoint(path: Any) -> Path | None:
    """The run a checkpoint lies in (``RUN/checkpoints/NAME.ckpt`` beside ``RUN/config.yaml``), or None."""
    path = Path(str(path))
    run = path.parent.parent
    return run if path.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def version_number(name: str) -> int | None:
    found = re.fullmatch(r"version_(\d+)", name)
    return int(found.group(1)) if found else None


def find_last_run(experiment: Path, version: str | None = None) -> Path:
    """The ``checkpoints/last.ckpt`` that ``--ckpt_path last`` means: the pinned `version`'s, else that of the
    run with the highest version_N (runs are numbered in the order they started)."""
    if version is not None:
        last = experiment / version / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise ConfigError(
                "ckpt_path", f"'last': {str(last)!r} does not exist", "drop --ckpt_path to start this run"
            )
        return last
    runs = [p.parent.parent for p in experiment.glob("*/checkpoints/last.ckpt")]
    numbered = [run for run in runs if version_number(run.name) is not None]
    if not runs or len(numbered) < len(runs) and len(runs) > 1:
        problem = "no run" if not runs else "several runs with names of their own"
        raise ConfigError(
            "ckpt_path",
            f"'last': {problem} under {str(experiment)!r} with a checkpoints/last.ckpt",
            "give the checkpoint's path, or pin the run with --trainer.logger.init_args.version",
        )
    return max(runs, key=lambda run: version_number(run.name) or 0) / "checkpoints" / "last.ckpt"


def config_name(run_dir: Path, command: str) -> str:
    """The file the config of `command` is saved as in `run_dir`: config.yaml for a new run, else
    ``config.resume<N>.yaml`` (fit) or ``config.<command><N>.yaml``, never replacing one."""
    if not (run_dir / "config.yaml").exists():
        return "config.yaml"
    stem = "resume" if command == "fit" else command
    return next(name for n in count(1) if not (run_dir / (name := f"config.{stem}{n}.yaml")).exists())


def lock_run(run_dir: Path) -> FileLock:
    """Hold ``<run_dir>/.mixer.lock``: a second process writing the same run is refused in one line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / LOCK_NAME)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ResourceError(
            "trainer.logger", f"the run {str(run_dir)!r} is being written by another process", "wait for it to end"
        ) from None
    return lock


def checkpoint_record(path: str, run_dir: Path | None) -> dict:
    """What identifies the checkpoint at `path`: its path (relative to `run_dir` when inside it), the epoch and
    step it was saved at, and the sha256 of its bytes."""
    import torch

    saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    shown = Path(path).resolve()
    if run_dir is not None and run_dir.resolve() in shown.parents:
        shown = shown.relative_to(run_dir.resolve())
    return {
        "path": str(shown),
        "epoch": saved.get("epoch"),
        "global_step": saved.get("global_step"),
        "sha256": sha256_file(path),
    }


def results_name(run_dir: Path, command: str, record: dict | None, limited: bool) -> str:
    """``test_metrics.json`` when free or holding this checkpoint's results (and, for a `limited` evaluation,
    only partial ones), else ``test_metrics.<checkpoint stem>[.<n>].json``."""
    base = RESULTS[command][: -len(".json")]
    stem = Path(record["path"]).stem if record else "nockpt"
    for name in chain([f"{base}.json", f"{base}.{stem}.json"], (f"{base}.{stem}.{n}.json" for n in count(1))):
        path = run_dir / name
        if not path.exists():
            return name
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        same = record is not None and (held.get("checkpoint") or {}).get("sha256") == record["sha256"]
        if same and (not limited or held.get("partial") is True):
            return name
    raise AssertionError("unreachable")


def write_json(path: Path, content: dict) -> None:
    write_text(path, json.dumps(content, indent=2) + "\n", field=path.name)


class NewRun:
    """A run directory `mixer fit` is about to create. Released at the end of the command: removed (with the
    folders made for it) if it never got its ``config.yaml``, which Lightning saves before training starts; such
    a run failed while its data or model were set up, and holds only the logger's empty event stream."""

    def __init__(self, path: Path):
        self.path, self.made = path, [p for p in (path, *path.parents) if not p.exists()]

    def release(self) -> None:
        if self.path.is_dir() and not (self.path / "config.yaml").exists() and not any(self.path.rglob("*.ckpt")):
            shutil.rmtree(self.path)
            for folder in self.made[1:]:  # the experiment folder made for it, if nothing else went there
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()


def fit_summary(trainer: Any, val_metrics: dict[str, float], run: Path) -> dict[str, Any]:
    """``fit_summary.json``: the run's length and last validation figures, its throughput, the best checkpoint,
    and the checkpoint whose test is the run's figure (relative to the run, as test_metrics.json names its own):
    last.ckpt where best.ckpt was chosen on the test images (`validated_on`: test), else best.ckpt."""
    from mixer_lightning.callbacks.checkpoints import ResumeCheckpoint
    from mixer_lightning.callbacks.throughput import SpeedMonitor

    best = trainer.checkpoint_callback
    summary = {"epochs": trainer.current_epoch, "steps": trainer.global_step, **val_metrics}
    summary["parameters"] = sum(p.numel() for p in trainer.lightning_module.parameters())  # as the run header
    throughput = next((c for c in trainer.callbacks if isinstance(c, SpeedMonitor)), None)
    if throughput is not None and throughput.summary(trainer.world_size) is not None:
        summary["throughput"] = throughput.summary(trainer.world_size)
    if best is not None and best.best_model_path:
        summary.update(
            best_checkpoint=best.best_model_path, monitor=best.monitor, best_score=float(best.best_model_score)
        )
        if len(best.best_k_models) > 1:
            summary["best_k"] = {path: float(score) for path, score in best.best_k_models.items()}
    on_test = bool(getattr(trainer.datamodule, "validates_on_test", None))
    last = next((c.last_model_path for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), "")
    tested = last if on_test else summary.get("best_checkpoint")
    summary.update({"test_checkpoint": os.path.relpath(tested, run)} if tested else {})
    summary["validated_on"] = "test" if on_test else "val"
    return summary
