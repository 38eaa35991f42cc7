"""A test callback that writes, for every training image a process trains on, ``epoch:hash:label`` to
``<folder>/rank<r>.txt``: which augmented images each DDP rank saw (tests/test_data_tensor.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lightning.pytorch import Callback


class ImageRecorder(Callback):
    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        x, y = batch
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"rank{trainer.global_rank}.txt", "a") as f:
            for image, label in zip(x.cpu(), y.cpu().tolist(), strict=True):
                digest = hashlib.sha256(image.numpy().tobytes()).hexdigest()[:20]
                f.write(f"{trainer.current_epoch}:{digest}:{label}\n")
