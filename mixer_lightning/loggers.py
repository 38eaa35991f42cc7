"""Loggers in the run directories ``<save_dir>/<name>/version_N/`` of TensorBoard's (the default), where the
checkpoints, configs and summaries are: `CSVLogger` (``configs/logger/csv.yaml``) appends to a resumed run's
``metrics.csv``, which Lightning's deletes; `WandbLogger` (``configs/logger/wandb.yaml``)."""

from __future__ import annotations

import csv
import os
import re
import warnings
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger


class CSVLogger(LightningCSVLogger):
    """Lightning's `CSVLogger` (same arguments), keeping the rows of a resumed run's ``metrics.csv``."""

    appended = False

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self.appended:
            return super().experiment
        self.appended = True
        metrics = os.path.join(self.log_dir, "metrics.csv")
        kept = os.path.join(self.log_dir, ".metrics.csv.resumed")
        if os.path.isfile(metrics):  # set aside while Lightning's writer starts (it deletes the file)
            os.replace(metrics, kept)
        with warnings.catch_warnings():  # "Previous log files in this directory will be deleted": not here
            warnings.filterwarnings("ignore", message="Experiment logs directory")
            writer = super().experiment
        if os.path.isfile(kept):
            os.replace(kept, metrics)
            with open(metrics, newline="") as file:  # new metrics rewrite the header over old and new rows
                writer.metrics_keys = sorted(set(next(csv.reader(file), [])))
        return writer


class WandbLogger(LightningWandbLogger):
    """Weights & Biases with its files in the run directory ``save_dir/name/version_N`` (`version`: the next
    free one by default), the W&B run named ``name/version_N``; the other arguments are Lightning's
    `WandbLogger`'s (``id`` continues a W&B run; ``offline``, ``log_model``, ...)."""

    def __init__(self, save_dir: str = "runs", name: str = "mixer", version: int | str | None = None, **kwargs: Any):
        root = os.path.join(save_dir, name)
        if version is None:  # as TensorBoard: the next free version_N
            names = os.listdir(root) if os.path.isdir(root) else []
            version = max((int(m[1]) for d in names if (m := re.match(r"version_(\d+)$", d))), default=-1) + 1
        self.run_dir = os.path.join(root, version if isinstance(version, str) else f"version_{version}")
        run_name = os.path.join(name, os.path.basename(self.run_dir))
        super().__init__(name=run_name, save_dir=None, dir=self.run_dir, **kwargs)

    # Lightning puts a non-TensorBoard logger's files (config.yaml: `trainer.log_dir`) in its save_dir, and its
    # checkpoints in save_dir/name/version/checkpoints: both the run directory here.
    save_dir = property(lambda self: self.run_dir)
    name = property(lambda self: "")
    version = property(lambda self: "")
    log_dir = property(lambda self: self.run_dir)

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        os.makedirs(self.run_dir, exist_ok=True)  # W&B writes into a folder that exists, else into a temporary one
        return super().experiment


def run_directory(trainer: Any) -> str:
    """The run directory of `trainer`: ``trainer.log_dir``, which for loggers other than TensorBoard's and CSV's
    is their ``save_dir``. Call it on every process (a broadcast under DDP)."""
    if trainer.loggers and isinstance(trainer.loggers[0], WandbLogger):
        return trainer.strategy.broadcast(trainer.loggers[0].log_dir)
    return trainer.log_dir
