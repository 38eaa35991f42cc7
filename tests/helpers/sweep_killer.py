"""A test callback that SIGKILLs its own process at a given optimiser step, once: the first run of a
sweep point dies there (no cleanup, no exception handlers, as a pre-empted job), the resumed run of the
same config goes on (a marker file records the kill)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from lightning.pytorch import Callback


class KillOnceAtStep(Callback):
    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, Path(marker)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Before ModelCheckpoint's hook (Lightning puts checkpoint callbacks last): this step's
        # checkpoint is never written.
        if trainer.global_step == self.step and not self.marker.exists():
            self.marker.write_text("killed\n")
            os.kill(os.getpid(), signal.SIGKILL)
