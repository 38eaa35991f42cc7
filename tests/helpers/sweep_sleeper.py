"""A test callback that holds a fit after its first optimiser step while a marker file exists, so a
sweep's points can be caught mid-fit: it writes ``<run dir>/holding`` first, and sleeps in short
slices, so the signal handlers of the run (`ResumeCheckpoint`) run while it waits. The checkpoint
callback's hook of that step runs after this one's (Lightning puts checkpoint callbacks last): a stop
requested while holding is carried out at that step."""

from __future__ import annotations

import time
from pathlib import Path

from lightning.pytorch import Callback


class HoldAfterFirstStep(Callback):
    def __init__(self, hold: str):
        self.hold = Path(hold)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != 1 or not self.hold.exists():
            return
        Path(trainer.log_dir, "holding").write_text("holding\n")
        while self.hold.exists():
            time.sleep(0.05)
