"""`ClassifierModule`: the training logic every architecture family shares, written once.

A family module (e.g. `MLPMixerModule`) only builds its network (``self.net``, a plain ``nn.Module``
from `mixer_lightning.models`); loss, metrics, optimiser and schedule live here.

Metrics are torchmetrics objects per stage, logged under ``/``-namespaced names: ``train/loss``,
``train/acc1``, ``val/loss``, ``val/acc1``, ``val/acc5``, ``test/loss``, ``test/acc1``, ``test/acc5``.
The optimiser and the schedule are callables (init arguments), called in `configure_optimizers`,
i.e. after a strategy such as FSDP has wrapped the model.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from mixer_lightning.errors import ConfigError, field_prefix, require
from mixer_lightning.models import get_entry
from mixer_lightning.optim import WarmupDecayLR, param_groups


def accuracy_metrics(num_classes: int, stage: str, top5: bool) -> MetricCollection:
    metrics = {"acc1": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if top5:
        metrics["acc5"] = MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro")
    return MetricCollection(metrics, prefix=f"{stage}/")


class ClassifierModule(LightningModule):
    """Image classification with any backbone of the project.

    Args:
        num_classes: classes of the dataset (linked from the data module by the CLI).
        image_size: image side in pixels (linked from the data module).
        in_chans: image channels (linked from the data module).
        optimizer: the optimiser, called with the parameter groups (no weight decay on biases and
            normalisation parameters).
        lr_scheduler: the learning-rate schedule, called with the optimiser; `WarmupDecayLR` is told
            the training length. None: constant learning rate.
        scheduler_interval: step the schedule every optimiser ``step`` or every ``epoch``.
        label_smoothing: label smoothing of the training cross-entropy.
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 32,
        in_chans: int = 3,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = WarmupDecayLR,
        scheduler_interval: Literal["step", "epoch"] = "step",
        label_smoothing: float = 0.0,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        with field_prefix("model"):
            require(num_classes > 1, "num_classes", f"must be at least 2, got {num_classes}")
            require(0.0 <= label_smoothing < 1.0, "label_smoothing", f"must be in [0, 1), got {label_smoothing}")
        self.num_classes = num_classes
        self.image_size = image_size
        self.in_chans = in_chans
        self.optimizer_factory = optimizer
        self.lr_scheduler_factory = lr_scheduler
        self.scheduler_interval = scheduler_interval
        self.label_smoothing = label_smoothing
        self.train_metrics = accuracy_metrics(num_classes, "train", top5=False)
        self.val_metrics = accuracy_metrics(num_classes, "val", top5=True)
        self.test_metrics = accuracy_metrics(num_classes, "test", top5=True)

    net: nn.Module  # set by the family module, with `build_network`

    def build_network(self, family: str, preset: str | None, **architecture: Any) -> nn.Module:
        """The network of `family`: the registered `preset` (or the family's generic constructor) with
        the dataset's num_classes, image_size and in_chans and every architecture argument not None."""
        with field_prefix("model"):
            entry = get_entry(preset or family, field="preset")
            require(
                entry.family == family,
                "preset",
                f"{entry.name!r} is a {entry.family} model, not {family}",
                "choose one of this family's presets (see `mixer models`)",
            )
            given = {name: value for name, value in architecture.items() if value is not None}
            return entry.build(
                num_classes=self.num_classes, image_size=self.image_size, in_chans=self.in_chans, **given
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(x))
        self.train_metrics(logits, y)
        self.log_dict(self.train_metrics, on_step=False, on_epoch=True, batch_size=len(x))
        return loss

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str, metrics: MetricCollection) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}/loss", F.cross_entropy(logits, y), prog_bar=True, batch_size=len(x))
        metrics(logits, y)
        self.log_dict(metrics, prog_bar=True, batch_size=len(x))

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        """Class probabilities (B, num_classes)."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).float().softmax(dim=-1)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(param_groups(self))
        if self.lr_scheduler_factory is None:
            return optimizer
        scheduler = self.lr_scheduler_factory(optimizer)
        if isinstance(scheduler, WarmupDecayLR):
            total = self.trainer.estimated_stepping_batches
            if not math.isfinite(total):
                raise ConfigError(
                    "trainer.max_epochs", "a decaying learning-rate schedule needs a finite training length",
                    "set trainer.max_epochs or trainer.max_steps",
                )  # fmt: skip
            batches = self.trainer.num_training_batches
            per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
            scheduler.set_training_length(int(total), max(1, int(per_epoch)))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval}}
