"""What an in-process `mixer` run leaves alive after it returns, before and after 6365a82.

jsonargparse's `subclass_arg_context` sets a ContextVar to the subcommand's parser and never resets it;
through LightningCLI's instantiator that parser holds the CLI, its Trainer, LightningModule (weights,
gradients, optimizer state) and DataModule. `mixer_lightning.cli.entry.main` runs the Lightning
subcommand in a context of its own (`contextvars.copy_context().run`), so all of it goes when the call
returns. Who runs `mixer` in-process: `mixer sweep --run DIR` (every point's fit and test), `mixer bench
--fit`, notebooks, the tests.

In one process, for each of ROUNDS rounds and each way, in turn:
- **baseline**: `main` as before 6365a82, the subcommand in the caller's context (`copy_context`
  replaced by the caller's own context);
- **ours**: `main` as shipped;
a `mixer fit` of the quickstart config widened to a model worth measuring (C = 512, D_C = 2048, 8
blocks: 16.8 M parameters; AdamW; 2 training batches), then a `mixer test` of its checkpoint. After
each call and a `gc.collect()`: the bytes of the tensors that call left alive (created since it
began: weights, gradients, AdamW's moments, buffers), and its Trainer / LightningModule /
LightningDataModule / LightningCLI objects still alive.

    .venv/bin/python benchmarks/retained_memory.py [ROUNDS]

Prints one line per call and a table of the medians over rounds (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextvars
import gc
import os
import statistics
import sys
import tempfile
import warnings
import weakref
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FIT = ["fit", "--config", str(ROOT / "configs" / "quickstart.yaml")] + (
    "--model.init_args.channels 512 --model.init_args.num_blocks 8 --trainer.max_epochs 1 "
    "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --trainer.enable_progress_bar false"
).split()


class CallersContext:
    """`contextvars` as `main` saw it before 6365a82: `copy_context().run(f, *a)` is `f(*a)`, in the
    caller's context."""

    class _Same:
        @staticmethod
        def run(function, *args):
            return function(*args)

    @staticmethod
    def copy_context() -> _Same:
        return CallersContext._Same()


def live_tensors() -> dict[int, int]:
    """id → bytes of every tensor alive (after a collection)."""
    gc.collect()
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for o in gc.get_objects():
            if isinstance(o, torch.Tensor) and not isinstance(o, weakref.ProxyTypes):
                found[id(o)] = o.untyped_storage().nbytes() if o.device.type != "meta" else 0
    return found


def lightning_objects() -> list:
    from lightning.pytorch import LightningDataModule, LightningModule, Trainer
    from lightning.pytorch.cli import LightningCLI

    gc.collect()
    kinds = (Trainer, LightningModule, LightningDataModule, LightningCLI)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, kinds) and not isinstance(o, weakref.ProxyTypes)]


def call(argv: list[str], way: str) -> tuple[float, list[str]]:
    """Run `mixer argv` in-process `way`; the MB of the tensors it left alive and its Lightning objects."""
    from mixer_lightning.cli import entry

    tensors, objects = live_tensors(), weakref.WeakSet(lightning_objects())
    real = entry.contextvars
    entry.contextvars = CallersContext if way == "baseline" else contextvars
    try:
        entry.main(argv)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    finally:
        entry.contextvars = real
    left = sum(n for i, n in live_tensors().items() if i not in tensors) / 2**20  # MB: 2^20 bytes
    kept = sorted({type(o).__name__ for o in lightning_objects() if o not in objects})
    return left, kept


def main(rounds: int = 3) -> None:
    rows: dict[tuple[str, str], list[float]] = {}
    kept_by: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        for r in range(rounds):
            for way in ("baseline", "ours") if r % 2 == 0 else ("ours", "baseline"):
                name = f"{way}{r}"
                left, kept = call([*FIT, "--trainer.logger.init_args.name", name], way)
                rows.setdefault((way, "fit"), []).append(left)
                kept_by[(way, "fit")] = kept
                print(f"round {r} {way:8s} fit : {left:8.1f} MB of tensors left alive; objects: {kept}", flush=True)
                best = next(Path("runs", name).glob("version_*/checkpoints/best.ckpt"))
                left, kept = call(["test", "--ckpt_path", str(best)], way)
                rows.setdefault((way, "test"), []).append(left)
                kept_by[(way, "test")] = kept
                print(f"round {r} {way:8s} test: {left:8.1f} MB of tensors left alive; objects: {kept}", flush=True)
    print("\n| after | baseline (before 6365a82) | ours | ours ÷ baseline |\n|---|---|---|---|")
    for step in ("fit", "test"):
        base, ours = (statistics.median(rows[(w, step)]) for w in ("baseline", "ours"))
        print(
            f"| `mixer {step}` | {base:.1f} MB; {', '.join(kept_by[('baseline', step)]) or 'no object'} "
            f"| {ours:.1f} MB; {', '.join(kept_by[('ours', step)]) or 'no object'} | {ours / base:.3f} |"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
