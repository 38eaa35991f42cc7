"""A test callback that writes, for every training image a process trains on, ``epoch:hash:label`` to
``<folder>/rank<r>.txt``: which augmented images each DDP rank saw (tests/test_data_tensor.py); and, to
``<folder>/workers<r>.txt``, how each epoch's training loader starts its workers (``none`` without workers,
``default`` as the platform does, else the start method asked for)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lightning.pytorch import Callback


class ImageRecorder(Callback):
    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        loader = trainer.train_dataloader
        context = loader.multiprocessing_context
        started = "none" if not loader.num_workers else "default" if context is None else context.get_start_method()
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"workers{trainer.global_rank}.txt", "a") as f:
            f.write(f"{started}\n")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        x, y = batch
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"rank{trainer.global_rank}.txt", "a") as f:
            for image, label in zip(x.cpu(), y.cpu().tolist(), strict=True):
                digest = hashlib.sha256(image.numpy().tobytes()).hexdigest()[:20]
                f.write(f"{trainer.current_epoch}:{digest}:{label}\n")


def record_one_and_two_processes(
    command: list[str], tmp_path: Path, env: dict, extra: tuple[list[str], list[str]] = ([], [])
) -> tuple[list[str], list[list[str]]]:
    """Run `command` (a ``mixer fit`` with `ImageRecorder` among its callbacks) on one CPU process, then with
    DDP on two (gloo), each with its `extra` arguments; return the lines that process and the two ranks wrote."""
    from helpers import run_with_stacks_on_timeout

    for name, devices, more in (("one", "1", extra[0]), ("two", "2", extra[1])):
        result = run_with_stacks_on_timeout(
            [
                *command,
                "--trainer.callbacks.folder",
                str(tmp_path / name),
                "--trainer.devices",
                devices,
                "--trainer.strategy",
                "ddp" if devices == "2" else "auto",
                "--trainer.logger.init_args.name",
                name,
                *more,
            ],
            timeout=600,
            env=env,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
    one = (tmp_path / "one" / "rank0.txt").read_text().split()
    ranks = [(tmp_path / "two" / f"rank{r}.txt").read_text().split() for r in (0, 1)]
    return one, ranks
