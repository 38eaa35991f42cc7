"""Loggers of the project: Lightning's, in the project's run directories, keeping what a run wrote.

TensorBoard is the default (``lightning.pytorch.loggers.TensorBoardLogger``); the overlays in
``configs/logger/`` switch to `CSVLogger` (``csv.yaml``) or `WandbLogger` (``wandb.yaml``, the
``wandb`` extra). All keep the run directory ``<save_dir>/<name>/version_N/`` of the TensorBoard
logger, so ``--ckpt_path last``, ``config.yaml``, the checkpoints and the json summaries are where they
always are.

- `CSVLogger` is Lightning's, except that a resumed run appends to its ``metrics.csv``: Lightning's
  writer deletes a ``metrics.csv`` it finds in the run directory ("Previous log files in this
  directory will be deleted"), which would lose the history of every run resumed with ``--ckpt_path
  last``.
- `WandbLogger` is Lightning's, with TensorBoard's directory arguments: ``name`` is the experiment's
  folder, ``version`` the run's (``version_N``, the next free one by default), ``project`` the W&B
  project and ``id`` a W&B run to continue. W&B writes its files into the run directory.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from mixer_lightning.errors import ConfigError

WANDB_EXTRA = "pip install 'mixer-lightning[wandb]'"


class AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer that keeps an existing ``metrics.csv`` and appends to it (its columns are
    read first, so rows with new metrics rewrite the header over the old rows and the new)."""

    def _check_log_dir_exists(self) -> None:  # Lightning's deletes metrics.csv here
        if not self._fs.isfile(self.metrics_file_path):
            if self._fs.exists(self.metrics_file_path):  # a folder (or a FIFO) where the run's rows go
                raise ConfigError(
                    "trainer.logger",
                    f"{self.metrics_file_path!r} is not a file, so the run's metrics cannot be appended to it",
                    "move it away (the rows logged so far are lost), or resume into a copy of the run",
                )
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            header = next(csv.reader(file), [])
        self.metrics_keys = sorted(set(header))


class CSVLogger(LightningCSVLogger):
    """``metrics.csv`` and ``hparams.yaml`` in the run directory (Lightning's `CSVLogger`, appending
    when a run is resumed: module docstring). Same arguments as Lightning's."""

    @property
    @rank_zero_experiment
    def experiment(self) -> AppendingWriter:
        if self._experiment is not None:
            return self._experiment
        self._fs.makedirs(self.root_dir, exist_ok=True)
        self._experiment = AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def _wandb_missing(class_path: str) -> ConfigError:
    return ConfigError(
        "trainer.logger",
        f"{class_path} needs the wandb package, which is not installed",
        f"{WANDB_EXTRA} (or use configs/logger/tensorboard.yaml or csv.yaml)",
    )


class WandbLogger(LightningWandbLogger):
    """Weights & Biases in the project's run directory (module docstring).

    Args:
        save_dir: the folder of the experiments (as TensorBoard's).
        name: the experiment's folder under it; the W&B run is named ``NAME/version_N``.
        version: the run's version (``version_N``; default: the next free one).
        project: the W&B project.
        id: a W&B run id to continue (W&B's ``resume="allow"``).
        kwargs: Lightning's `WandbLogger` arguments (``offline``, ``log_model``, ``entity``, ``tags``, ...).
    """

    def __init__(
        self,
        save_dir: str = "runs",
        name: str = "mixer",
        version: int | str | None = None,
        project: str = "mixer-lightning",
        id: str | None = None,
        **kwargs: Any,
    ):
        from lightning.pytorch.loggers import wandb as lightning_wandb

        if not lightning_wandb._WANDB_AVAILABLE:
            raise _wandb_missing("mixer_lightning.loggers.WandbLogger")
        super().__init__(name=kwargs.pop("run_name", None), save_dir=save_dir, project=project, id=id, **kwargs)
        self._folder = str(name or "")
        self._version = version

    @property
    def name(self) -> str:
        return self._folder

    @property
    def version(self) -> int | str:
        if self._version is None:  # as TensorBoard: the next free version_N
            root = self.root_dir
            taken = [
                int(m.group(1))
                for d in (os.listdir(root) if os.path.isdir(root) else [])
                if (m := re.match(r"^version_(\d+)$", d))
            ]
            self._version = max(taken, default=-1) + 1
        return self._version

    @property
    def root_dir(self) -> str:
        return os.path.join(self.save_dir or ".", self._folder)

    @property
    def log_dir(self) -> str:
        version = self.version
        return os.path.join(self.root_dir, version if isinstance(version, str) else f"version_{version}")

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is None:
            os.makedirs(self.log_dir, exist_ok=True)
            self._wandb_init["dir"] = self.log_dir
            if self._wandb_init.get("name") is None:
                self._wandb_init["name"] = os.path.join(self._folder, os.path.basename(self.log_dir))
        return LightningWandbLogger.experiment.fget.__wrapped__(self)


def run_directory(trainer: Any) -> str | None:
    """The run directory of `trainer` (Lightning's ``trainer.log_dir``, which for loggers other than
    TensorBoard's and CSV's is their save_dir: here `WandbLogger`'s run directory). Call it on every
    process (a broadcast under DDP)."""
    if trainer.loggers and isinstance(trainer.loggers[0], WandbLogger):
        return trainer.strategy.broadcast(trainer.loggers[0].log_dir)
    return trainer.log_dir


def check_logger_available(logger: Any) -> None:
    """A one-line `ConfigError` naming the extra to install when the configured logger's package is
    missing (W&B: ``wandb``), before anything is written."""
    loggers = logger if isinstance(logger, list) else [logger]
    for entry in loggers:
        class_path = str(
            getattr(entry, "class_path", "") or (entry.get("class_path", "") if isinstance(entry, dict) else "")
        )
        if class_path.rsplit(".", 1)[-1] != "WandbLogger":
            continue
        from lightning.pytorch.loggers import wandb as lightning_wandb

        if not lightning_wandb._WANDB_AVAILABLE:
            raise _wandb_missing(class_path)
