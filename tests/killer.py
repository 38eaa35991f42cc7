"""A test callback that SIGKILLs its own process at a given optimiser step: the realistic end of a
pre-empted or OOM-killed run (no cleanup, no exception handlers), at a reproducible moment."""

from __future__ import annotations

import os
import signal

from lightning.pytorch import Callback


class KillAtStep(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Runs before ModelCheckpoint's hook (Lightning puts checkpoint callbacks last): the checkpoint
        # of this step is never written.
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
