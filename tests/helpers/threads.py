"""A test callback that appends, when a fit or test starts, the intra-op threads torch has and
``$OMP_NUM_THREADS`` to ``threads.txt`` in the working directory (tests/test_threads.py)."""

from __future__ import annotations

import os

import torch
from lightning.pytorch import Callback


class ThreadCount(Callback):
    def on_fit_start(self, trainer, pl_module) -> None:
        self.write("fit")

    def on_test_start(self, trainer, pl_module) -> None:
        self.write("test")

    @staticmethod
    def write(stage: str) -> None:
        with open("threads.txt", "a") as f:
            f.write(f"{stage} {torch.get_num_threads()} {os.environ.get('OMP_NUM_THREADS')}\n")
