"""Throughput of ``mixer fit``: images per second, the model FLOP utilisation (MFU) where the device's peak
is known, and the share of the training loop's time spent waiting for data (`SpeedMonitor`, in every fit).

Every training batch is timed on the host, from the end of the previous batch (or the epoch's start) to its
own end; its data wait is the part before its ``on_train_batch_start`` (the DataLoader's ``next``, the copy
to the device, device-side batch work, the loop's bookkeeping). Intervals holding a checkpoint write or a
validation, and the first batches after a (re)start, are left out. images/s counts every process; MFU =
images/s per device × a training step's FLOPs per image (Lightning's `measure_flops`) ÷ the device's peak
(`mixer_lightning.models.flops.peak_flops`, or ``peak_flops``). Lightning's ``ThroughputMonitor`` has no data
wait, and its peak table lacks the H200 and lists sparse peaks for some devices.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning.models.flops import peak_flops as table_peak

WARMUP_BATCHES = 2


def device_name(device: torch.device) -> str | None:
    """The accelerator's name (``NVIDIA H100 80GB HBM3``), or None on the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def training_flops_per_image(pl_module: LightningModule) -> float | None:
    """FLOPs of a training step (forward + backward) per image of `pl_module`'s network, counted on one
    random image without touching the RNG streams or leaving gradients; None where they cannot be
    counted (a network torch's FLOP counter does not follow)."""
    net, hparams = getattr(pl_module, "net", None), getattr(pl_module, "hparams", {}) or {}
    image_size, in_chans = hparams.get("image_size"), hparams.get("in_chans")
    if not isinstance(net, torch.nn.Module) or not image_size or not in_chans:
        return None
    device = next(net.parameters()).device
    x = torch.randn(1, int(in_chans), int(image_size), int(image_size), device=device)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return float(measure_flops(net, lambda: net(x), torch.Tensor.sum))
    except Exception:  # noqa: BLE001 (a layer the counter cannot trace: no MFU, training goes on)
        return None
    finally:
        net.zero_grad(set_to_none=True)


class SpeedMonitor(Callback):
    """Images/s, MFU and the data-wait fraction of training (module docstring).

    Args:
        peak_flops: the device's dense peak FLOP/s at the run's precision, for MFU where the built-in table
            does not know the device (or to override it), e.g. ``989.4e12`` for an H100 SXM in bf16.
        every_n_steps: report every N optimiser steps (default: the trainer's ``log_every_n_steps``).
    """

    def __init__(self, peak_flops: PositiveFloat | None = None, every_n_steps: PositiveInt | None = None):
        self.peak_flops_given, self.every_n_steps = peak_flops, every_n_steps
        self.peak: float | None = None
        self.flops_per_image: float | None = None
        self.device: str | None = None
        self.precision: str | None = None
        self.totals = {"images": 0.0, "time": 0.0, "wait": 0.0}  # over the fit, warm-up left out
        self.snapshots: dict[Any, dict[str, float]] = {}  # the totals at each consumer's previous window
        self.previous_end: float | None = None
        self.batch_start: float | None = None
        self.interrupted = False  # a checkpoint write or a validation since the previous batch
        self.batches = 0
        self.last_logged_step = -1
        self.cuda = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.cuda = trainer.strategy.root_device.type == "cuda"
        self.device = device_name(trainer.strategy.root_device)
        self.precision = str(trainer.precision)
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        self.peak = self.peak_flops_given or table_peak(self.device, self.precision, tf32)
        if self.peak is not None and self.flops_per_image is None:
            self.flops_per_image = training_flops_per_image(pl_module)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.previous_end, self.interrupted = time.perf_counter(), False

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.batch_start = time.perf_counter()

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.interrupted = True

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        self.interrupted = True

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        now = time.perf_counter()
        previous, start, interrupted = self.previous_end, self.batch_start, self.interrupted
        self.previous_end, self.interrupted = now, False
        self.batches += 1
        inputs = batch[0] if isinstance(batch, (tuple, list)) else None
        if previous is None or start is None or interrupted or self.batches <= WARMUP_BATCHES:
            return
        if not hasattr(inputs, "shape"):
            return
        self.totals["images"] += int(inputs.shape[0])
        self.totals["time"] += now - previous
        self.totals["wait"] += max(0.0, start - previous)
        every = self.every_n_steps or trainer.log_every_n_steps or 50
        if trainer.global_step % every == 0 and trainer.global_step != self.last_logged_step:
            self.last_logged_step = trainer.global_step
            figures = self.window("loggers", trainer.world_size)
            if figures is not None and trainer.is_global_zero:
                for logger in trainer.loggers:
                    logger.log_metrics({f"throughput/{k}": v for k, v in figures.items()}, step=trainer.global_step)

    def figures(self, images: float, seconds: float, wait: float, world_size: int) -> dict[str, float]:
        figures = {"images_per_s": images * world_size / seconds, "data_wait": wait / seconds}
        if self.peak and self.flops_per_image:
            figures["mfu"] = images / seconds * self.flops_per_image / self.peak
        return figures

    def window(self, consumer: Any, world_size: int) -> dict[str, float] | None:
        """The figures since `consumer`'s previous call (each consumer keeps its own window)."""
        if self.cuda:  # the device has done what the host has launched
            torch.cuda.synchronize()
        last = self.snapshots.get(consumer, {"images": 0.0, "time": 0.0, "wait": 0.0})
        now = self.snapshots[consumer] = dict(self.totals)
        seconds = now["time"] - last["time"]
        if seconds <= 0 or now["images"] <= last["images"]:
            return None
        return self.figures(now["images"] - last["images"], seconds, now["wait"] - last["wait"], world_size)

    def progress_parts(self, consumer: Any, trainer: Trainer) -> list[str]:
        """``MFU 31.2%`` and ``data 4%`` for a progress line, over `consumer`'s window."""
        figures = self.window(consumer, trainer.world_size)
        if figures is None:
            return []
        parts = [f"MFU {figures['mfu']:.1%}"] if "mfu" in figures else []
        return [*parts, f"data {figures['data_wait']:.0%}"]

    def summary(self, world_size: int) -> dict[str, Any] | None:
        """The figures over the whole fit, for ``fit_summary.json`` (None before any timed batch)."""
        if self.totals["time"] <= 0:
            return None
        figures = self.figures(self.totals["images"], self.totals["time"], self.totals["wait"], world_size)
        return {
            "images_per_s": figures["images_per_s"],
            "data_wait_fraction": figures["data_wait"],
            "mfu": figures.get("mfu"),
            "flops_per_image": self.flops_per_image,
            "peak_flops": self.peak,
            "device": self.device or "cpu",
            "precision": self.precision,
            "processes": world_size,
        }
