"""What ``mixer fit|validate|test|predict`` prints, in a terminal and in a batch log (SLURM, ``nohup``) alike.

- `RunHeader`: the first lines say what runs: the model and its widths (S, C, m, Ω, p: Hayase & Karakida
  Sec. 4.1), the data, its sizes and crops, whether validation is on the test split, the hardware, the run
  directory; an evaluation also counts the images it evaluated (``evaluated``: what the results file records).
- `LineProgress`: when stdout is not a terminal, a plain line every N optimiser steps, or sooner when a
  minute has passed since the last (a slow first epoch says how it goes: epoch, step/total, loss, accuracy,
  learning rate, images/s, ETA), and one per validation, instead of a progress bar.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.callbacks.progress import ProgressBar


def describe_model(module: LightningModule) -> str:
    """``SMixer, 7,674 parameters, S=16, C=16, m=256, Ω=4,096, p=0.0625``."""
    net = getattr(module, "net", module)
    count = sum(p.numel() for p in module.parameters())
    widths = module.architecture() if callable(getattr(module, "architecture", None)) else {}
    shown = "".join(f", {k}={v:,.0f}" if float(v).is_integer() else f", {k}={v:.4g}" for k, v in widths.items())
    return f"{type(net).__name__}, {count:,} parameters{shown}"


def describe_data(datamodule: Any, stage: str) -> str | None:
    """``cifar10 (10 classes, 32×32×3): 50,000 train, 10,000 val images, batch 128; crops: train random_crop,
    eval resize``."""
    if datamodule is None:
        return None
    facts = [f"{datamodule.num_classes} classes"] if getattr(datamodule, "num_classes", None) else []
    if getattr(datamodule, "image_size", None):
        facts.append(f"{datamodule.image_size}×{datamodule.image_size}×{getattr(datamodule, 'in_chans', '?')}")
    roles = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}[stage]
    sizes = [f"{len(s):,} {role}" for role in roles if (s := getattr(datamodule, f"{role}_set", None)) is not None]
    text = f"{getattr(datamodule, 'dataset', None) or type(datamodule).__name__}" + (
        f" ({', '.join(facts)})" * bool(facts)
    )
    text += f": {', '.join(sizes)} images" if sizes else ""
    text += f", batch {datamodule.batch_size}" if getattr(datamodule, "batch_size", None) else ""
    augmentation, eval_crop = getattr(datamodule, "augmentation", None), getattr(datamodule, "eval_crop", None)
    crops = [f"train {augmentation.train_crop}"] if augmentation is not None and stage == "fit" else []
    crops += [f"eval {eval_crop}"] if eval_crop else []
    return text + (f"; crops: {', '.join(crops)}" if crops else "")


class RunHeader(Callback):
    """Prints what runs, once, on the first process (module docstring); an evaluation's header waits for its
    loader, and the images it evaluated are counted over every process into `evaluated`."""

    def __init__(self, command: str, ckpt_path: str | None = None):
        self.command, self.ckpt_path = command, ckpt_path
        self.printed, self.counted = False, 0
        self.evaluated: dict[str, Any] | None = None

    def _print(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        log_dir = trainer.log_dir  # a broadcast under DDP: every process asks
        if self.printed or not trainer.is_global_zero:
            self.printed = True
            return
        self.printed = True
        lines = [f"model  {describe_model(pl_module)}"]
        if self.ckpt_path:
            lines.append(f"ckpt   {self.ckpt_path}")
        data = describe_data(trainer.datamodule, stage)
        lines += [f"data   {data}"] if data else []
        on_test = getattr(trainer.datamodule, "validates_on_test", None) if stage == "fit" else None
        if on_test:  # a best.ckpt chosen on the test images reports a figure selected on them
            lines.append(f"val    the test split ({on_test}): best.ckpt is chosen on test images; test last.ckpt")
        devices = trainer.num_devices * trainer.num_nodes
        kind = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
        seed = f", seed {os.environ.get('PL_GLOBAL_SEED', 'none')}" if stage == "fit" else ""
        lines.append(f"on     {kind}, {devices} device{'s' * (devices > 1)}, {trainer.precision} precision{seed}")
        lines += [f"run    {log_dir}"] if log_dir and not trainer.fast_dev_run else []
        print("\n".join(lines), flush=True)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage in ("fit", "predict"):
            self._print(trainer, pl_module, stage)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._print(trainer, pl_module, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._print(trainer, pl_module, "test")

    def _count(self, trainer: Trainer, batch: Any) -> None:
        if trainer.state.fn in ("validate", "test") and not trainer.sanity_checking:
            self.counted += len(batch[1] if isinstance(batch, (list, tuple)) else batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._count(trainer, batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._count(trainer, batch)

    def _finish(self, trainer: Trainer, loaders: Any) -> None:
        if trainer.state.fn not in ("validate", "test") or trainer.sanity_checking:
            return
        counted = int(
            trainer.strategy.reduce(torch.tensor(self.counted, device=trainer.strategy.root_device), reduce_op="sum")
        )
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        try:
            total = len(loaders[0].dataset) if len(loaders) == 1 else None
        except TypeError:  # a streamed split has no length
            total = None
        self.evaluated = {"images": counted, "of": total, "partial": None if total is None else counted < total}

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer, trainer.val_dataloaders)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer, trainer.test_dataloaders)


def line_progress(settings: Any) -> list[Callback]:
    """`LineProgress` where plain lines are asked for (``progress.mode``: ``lines``, or ``auto`` off a terminal);
    otherwise Lightning's progress bar (nothing to add)."""
    mode = settings.get("mode") if settings is not None else "auto"
    lines = mode == "lines" or (mode == "auto" and not sys.stdout.isatty())
    every = (settings.get("every_n_steps") or 50, settings.get("every_n_seconds") or 60.0) if settings else (50, 60.0)
    return [LineProgress(*every)] if lines else []


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress(ProgressBar):
    """A plain line every `every_n_steps` optimiser steps, or at the first step `every_n_seconds` after the last
    line, and one per validation; nothing is overwritten.

    ``epoch 3/30  step 60/600  loss 1.234  acc 0.612  lr 2.95e-03  812 img/s  ETA 0:41``: the mean training loss
    since the last line, the epoch's running training accuracy, images/s over all processes since the last line.
    A line due to time alone is the first process's (the others may not be there yet): it shows no accuracy
    under several processes, whose sum over them would wait for all.
    """

    def __init__(self, every_n_steps: int = 50, every_n_seconds: float = 60.0):
        super().__init__()
        self.every_n_steps, self.every_n_seconds = every_n_steps, every_n_seconds
        self.enabled, self.last_step = True, -1
        self.start: float | None = None
        self.start_step, self.total = 0, math.inf
        self._reset()

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    @property
    def is_enabled(self) -> bool:
        return self.enabled

    def _reset(self) -> None:
        self.window_start, self.images, self.loss_sum, self.losses = time.perf_counter(), 0, 0.0, 0

    def _say(self, text: str) -> None:
        if self.enabled and self.trainer.is_global_zero:
            print(text, flush=True)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start, self.start_step, self.total = (
            time.perf_counter(),
            trainer.global_step,
            float(trainer.estimated_stepping_batches),
        )
        self._reset()
        plan = f"{int(self.total)} steps" if math.isfinite(self.total) else "? steps"
        if trainer.max_epochs and trainer.max_epochs > 0 and math.isfinite(self.total_train_batches):
            plan += f" ({trainer.max_epochs} epochs × {int(self.total_train_batches)} batches)"
        resumed = f", resumed at step {trainer.global_step}" if trainer.global_step else ""
        every = f"a line every {self.every_n_steps} steps or {self.every_n_seconds:g} s"
        self._say(f"train  {plan}{resumed}; {every}")

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if isinstance(batch, (list, tuple)) and hasattr(batch[0], "shape"):
            self.images += int(batch[0].shape[0])
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "detach"):
            self.loss_sum, self.losses = loss.detach().float() + self.loss_sum, self.losses + 1  # read once a line
        step = trainer.global_step
        if step == self.last_step or step == 0:
            return
        if step % self.every_n_steps == 0 or step >= self.total:
            self.last_step = step
            self._report(trainer, pl_module, step, every_process=True)
        elif trainer.is_global_zero and time.perf_counter() - self.window_start >= self.every_n_seconds:
            self.last_step = step
            self._report(trainer, pl_module, step, every_process=trainer.world_size == 1)

    def _report(self, trainer: Trainer, pl_module: LightningModule, step: int, every_process: bool) -> None:
        now = time.perf_counter()
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        parts = [f"epoch {trainer.current_epoch + 1}{epochs}"]
        parts.append(f"step {step}/{int(self.total)}" if math.isfinite(self.total) else f"step {step}")
        if self.losses:
            parts.append(f"loss {float(self.loss_sum) / self.losses:.4f}")
        metrics = getattr(pl_module, "train_metrics", None)
        if metrics is not None and every_process:  # torchmetrics sums its state over the processes
            with warnings.catch_warnings():  # right after a validation nothing is accumulated yet
                warnings.simplefilter("ignore")
                accuracy = next((v for k, v in metrics.compute().items() if k.endswith("acc1")), None)
            parts += [f"acc {float(accuracy):.3f}"] if accuracy is not None else []
        if trainer.optimizers:
            parts.append(f"lr {trainer.optimizers[0].param_groups[0]['lr']:.3g}")
        if self.images:
            parts.append(f"{self.images * trainer.world_size / max(now - self.window_start, 1e-9):,.0f} img/s")
        monitor = next((c for c in trainer.callbacks if hasattr(c, "progress_parts")), None)
        parts += monitor.progress_parts(self, trainer) if monitor is not None else []  # MFU, data wait
        if self.start is not None and math.isfinite(self.total) and step > self.start_step:
            parts.append(f"ETA {_duration((now - self.start) / (step - self.start_step) * (self.total - step))}")
        self._say("  ".join(parts))
        self._reset()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        best, monitor = trainer.checkpoint_callback, getattr(trainer.checkpoint_callback, "monitor", None)
        suffix = ""
        if metrics and monitor in metrics:  # the best so far, this validation included
            scores = [metrics[monitor], *([float(best.best_model_score)] if best.best_model_score is not None else [])]
            suffix = f"  (best {monitor} {(max if best.mode == 'max' else min)(scores):.4f})"
        if metrics:
            self._say(
                f"epoch {trainer.current_epoch + 1} validation  "
                + "  ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
                + suffix
            )
