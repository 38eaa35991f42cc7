"""`GlobalBatchSize`: keep a recipe's global batch whatever hardware overlay runs it.

The papers' ImageNet recipes fix the batch per optimiser step (4096: Tolstikhin et al.; Hayase &
Karakida C.5, 128 GPUs × 32), while ``data.batch_size`` is per device. With this callback a config
states the global batch once, and the gradient accumulation follows the hardware:
``accumulate_grad_batches = global / (data.batch_size × devices × nodes)``; 1 GPU with batch 128
accumulates 32 batches, 8 GPUs 4, 32 GPUs 1. The learning-rate schedule sees optimiser steps, so it is
the same on every machine.
"""

from __future__ import annotations

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from mixer_lightning.errors import ConfigError, require


class GlobalBatchSize(Callback):
    """Set ``trainer.accumulate_grad_batches`` so that every optimiser step sees `batch_size` images.

    Args:
        batch_size: images per optimiser step, summed over devices, nodes and accumulated batches.
    """

    def __init__(self, batch_size: int):
        require(batch_size > 0, "batch_size", f"must be positive, got {batch_size}")
        self.batch_size = batch_size

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        data = trainer.datamodule
        per_step = getattr(data, "batch_size", None)
        if per_step is None:
            raise ConfigError("trainer.callbacks", "GlobalBatchSize needs a data module with a batch_size")
        processes = trainer.world_size
        per_step *= processes
        accumulate, remainder = divmod(self.batch_size, per_step)
        require(
            accumulate >= 1 and remainder == 0,
            "data.batch_size",
            f"{data.batch_size} per device × {processes} devices does not divide the global batch {self.batch_size}",
            f"choose a data.batch_size dividing {self.batch_size // processes}",
        )
        if trainer.accumulate_grad_batches not in (1, accumulate):
            raise ConfigError(
                "trainer.accumulate_grad_batches",
                f"is {trainer.accumulate_grad_batches}, but the global batch {self.batch_size} needs {accumulate}",
                "leave it unset: GlobalBatchSize sets it",
            )
        trainer.accumulate_grad_batches = accumulate
        rank_zero_info(
            f"Global batch {self.batch_size} = {data.batch_size} per device × {processes} devices × "
            f"{accumulate} accumulated batches"
        )
