"""`GlobalBatchSize`: keep a recipe's global batch whatever hardware overlay runs it.

The papers' ImageNet recipes fix the batch per optimiser step (4096: Tolstikhin et al.; Hayase &
Karakida C.5, 128 GPUs × 32), while ``data.batch_size`` is per device. A config states the global
batch once, and the gradient accumulation follows the hardware:
``accumulate_grad_batches = global / (data.batch_size × devices × nodes)``. The learning-rate
schedule sees optimiser steps, so it is the same on every machine.
"""

from __future__ import annotations

from jsonargparse.typing import PositiveInt
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from mixer_lightning.errors import require


class GlobalBatchSize(Callback):
    """Set ``trainer.accumulate_grad_batches`` so that every optimiser step sees `batch_size` images.

    Args:
        batch_size: images per optimiser step, summed over devices, nodes and accumulated batches.
    """

    def __init__(self, batch_size: PositiveInt):
        self.batch_size = int(batch_size)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        per_device, processes = trainer.datamodule.batch_size, trainer.world_size
        accumulate, remainder = divmod(self.batch_size, per_device * processes)
        require(
            accumulate >= 1 and remainder == 0,
            "data.batch_size",
            f"{per_device} per device × {processes} devices does not divide the global batch {self.batch_size}",
        )
        require(
            trainer.accumulate_grad_batches in (1, accumulate),
            "trainer.accumulate_grad_batches",
            f"is {trainer.accumulate_grad_batches}, but the global batch {self.batch_size} needs {accumulate}",
            "leave it unset: GlobalBatchSize sets it",
        )
        trainer.accumulate_grad_batches = accumulate
        rank_zero_info(
            f"Global batch {self.batch_size} = {per_device} per device × {processes} devices × "
            f"{accumulate} accumulated batches"
        )
