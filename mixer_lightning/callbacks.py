"""Lightning callbacks of the project."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info


class PredictionWriter(BasePredictionWriter):
    """Writes what ``mixer predict`` computes (class probabilities, N × num_classes, in dataset
    order) to ``output`` (default ``<run dir>/predictions.pt``), one file per process under DDP."""

    def __init__(self, output: str | None = None):
        super().__init__(write_interval="epoch")
        self.output = output

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        if predictions and isinstance(predictions[0], list):  # several dataloaders: keep the first
            predictions = predictions[0]
        if not predictions:
            return
        probabilities = torch.cat([p.cpu() for p in predictions])
        path = Path(self.output or os.path.join(trainer.log_dir or ".", "predictions.pt"))
        if trainer.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"probabilities": probabilities}, path)
        rank_zero_info(f"Predictions ({tuple(probabilities.shape)}) written to {path}")
