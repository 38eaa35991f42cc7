"""Checkpoints a run can trust: atomic writes, resuming the last run, and checks of ``--ckpt_path``.

- `AtomicCheckpointIO` writes a checkpoint to a temporary file beside its target, flushes it to disk
  and renames it over the target: a process killed mid-write leaves the previous checkpoint intact
  (Lightning's own save stages the file in the system temp folder and moves it, which is a copy,
  not a rename, when that folder is on another filesystem).
- `find_last_run` finds the most recent ``last.ckpt`` of an experiment, for ``--ckpt_path last``.
- `check_checkpoint` tells, in one line, why a checkpoint cannot be used with the configured model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from mixer_lightning.errors import ConfigError
from mixer_lightning.tasks.loading import describe_mismatch, read_checkpoint

# Lightning's special values of ckpt_path, resolved by Lightning itself.
SPECIAL_CKPT_PATHS = ("best", "hpc", "registry")
# Module state that is not the network: metric accumulators, filled in when absent (`ClassifierModule`).
NON_NETWORK_PREFIXES = ("train_metrics.", "train_loss.")


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local writes are atomic (temporary file, fsync, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: fsspec's own transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            with open(temporary, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, target)  # atomic on POSIX: readers see the old file or the new one
        finally:
            temporary.unlink(missing_ok=True)
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # make the rename itself durable
        finally:
            os.close(directory)


def find_last_run(experiment_dir: Path) -> Path | None:
    """The ``checkpoints/last.ckpt`` written most recently under ``experiment_dir/*/``, if any."""
    candidates = [p for p in experiment_dir.glob("*/checkpoints/last.ckpt") if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def check_checkpoint(path: str, model: torch.nn.Module, field: str = "ckpt_path") -> None:
    """A `ConfigError` naming what is wrong if the checkpoint at `path` cannot load into `model`."""
    checkpoint = read_checkpoint(path, field)
    hparams = checkpoint.get("hyper_parameters") or {}
    saved_class = str(hparams.get("_class_path", "")).rsplit(".", 1)[-1]
    if saved_class and saved_class != type(model).__name__:
        raise ConfigError(
            field,
            f"{path!r} holds a {saved_class}, but the config builds a {type(model).__name__}",
            "use the run's own config.yaml (or set model.class_path to match)",
        )
    state = checkpoint["state_dict"]
    own = model.state_dict()
    head = [k for k in own if k.startswith("net.head.")]
    if head and all(k in state for k in head) and any(state[k].shape != own[k].shape for k in head):
        if describe_mismatch(model, state, ignore=(*NON_NETWORK_PREFIXES, "net.head.")) is None:
            trained, wanted = state["net.head.weight"].shape[0], own["net.head.weight"].shape[0]
            raise ConfigError(
                field,
                f"{path!r} was trained for {trained} classes, the data has {wanted}",
                "evaluate it on its own dataset, or fine-tune it here with model.init_from (a new head)",
            )
    problem = describe_mismatch(model, state, ignore=NON_NETWORK_PREFIXES)
    if problem:
        raise ConfigError(
            field,
            f"{path!r} does not fit the configured {type(model).__name__} ({problem})",
            "use the config.yaml of the run that wrote it",
        )
