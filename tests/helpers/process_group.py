"""A test callback that records, as its process exits, whether the torch.distributed process group is
still alive: every process of a DDP run writes ``<folder>/rank<R>.txt`` holding ``True`` or ``False``
(a deterministic stand-in for gloo's occasional "terminate called without an active exception" at exit).

Test configs name this class; the tests trust the package (``MIXER_TRUSTED_MODULES=helpers``).
"""

from __future__ import annotations

import atexit
from pathlib import Path

from lightning.pytorch import Callback


class ProcessGroupAtExit(Callback):
    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_fit_start(self, trainer, pl_module) -> None:  # the process group exists by now
        path = self.folder / f"rank{trainer.global_rank}.txt"

        def record() -> None:
            import torch.distributed as dist

            path.write_text(str(dist.is_initialized()))

        atexit.register(record)
