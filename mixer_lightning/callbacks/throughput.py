"""Throughput of ``mixer fit``: images per second, the model FLOP utilisation (MFU) where the device's
peak is known, and the share of the training loop's time spent waiting for data.

`ThroughputMonitor` (the CLI adds it to every fit; ``--throughput.peak_flops`` for a GPU the table of
`mixer_lightning.models.flops` does not know) times every training batch on the host:

- a batch's interval runs from the end of the previous batch (or the start of the epoch) to its own end;
- its data wait is the part before its ``on_train_batch_start``: the DataLoader's ``next`` (decoding and
  augmentation not done ahead by the workers), the copy to the device and the device-side batch work
  (the tensor path's crops, mixup), and the loop's own bookkeeping between batches;
- intervals holding a checkpoint write or a validation, and the first batches after the (re)start
  (warm-up: workers starting, kernels compiling) are left out.

images/s = images ÷ time (× processes; each process measures its own, the first one reports), MFU =
images/s per device × FLOPs of a training step per image (forward + backward, counted once with torch's
FLOP counter on the network, `mixer_lightning.models.flops.flops_per_image`) ÷ the peak. On a GPU
the host runs ahead of the device by at most its launch queue; the device is synchronised at every
logged figure, so figures over windows of many steps are right.

Reported every ``trainer.log_every_n_steps`` optimiser steps to the loggers (``throughput/images_per_s``,
``throughput/mfu``, ``throughput/data_wait``), in the progress lines (``812 img/s  MFU 31.2%  data 4%``)
and, over the whole fit, in ``fit_summary.json`` under ``throughput``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning.errors import ConfigError
from mixer_lightning.models.flops import flops_per_image
from mixer_lightning.models.flops import peak_flops as table_peak

WARMUP_BATCHES = 2


def device_name(device: torch.device) -> str | None:
    """The accelerator's name (``NVIDIA H100 80GB HBM3``), or None on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return None


def training_flops_per_image(pl_module: LightningModule) -> float | None:
    """FLOPs of a training step (forward + backward) per image of `pl_module`'s network, counted on the CPU
    on two random images, without touching the RNG streams or leaving gradients; None where they cannot be
    counted (a network the counter does not follow)."""
    net = getattr(pl_module, "net", None)
    hparams = getattr(pl_module, "hparams", {}) or {}
    image_size, in_chans = hparams.get("image_size"), hparams.get("in_chans")
    if net is None or not image_size or not in_chans:
        return None
    device = next(net.parameters()).device
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            flops = flops_per_image(net, int(image_size), int(in_chans), device, "32-true")
    except Exception:  # noqa: BLE001 (a layer FlopCounterMode cannot trace: no MFU, training goes on)
        return None
    finally:
        net.zero_grad(set_to_none=True)
    return float(flops["train"])


class ThroughputMonitor(Callback):
    """Images/s, MFU and the data-wait fraction of training (module docstring).

    Args:
        peak_flops: the device's dense peak FLOP/s at the run's precision, for MFU where the built-in table
            does not know the device (or to override it), e.g. ``989.4e12`` for an H100 SXM in bf16.
        every_n_steps: report every N optimiser steps (default: the trainer's ``log_every_n_steps``).
    """

    def __init__(self, peak_flops: float | None = None, every_n_steps: int | None = None):
        if peak_flops is not None and not peak_flops > 0:
            raise ConfigError("throughput.peak_flops", f"must be positive, got {peak_flops}", "give e.g. 989.4e12")
        if every_n_steps is not None and every_n_steps < 1:
            raise ConfigError("throughput.every_n_steps", f"must be >= 1, got {every_n_steps}", "give e.g. 50")
        self.peak_flops_given, self.every_n_steps = peak_flops, every_n_steps
        self.peak: float | None = None
        self.flops_per_image: float | None = None
        self.device: str | None = None
        self.precision: str | None = None
        self.totals = {"images": 0.0, "time": 0.0, "wait": 0.0}  # over the fit (warm-up left out)
        self._snapshots: dict[Any, dict[str, float]] = {}
        self._previous_end: float | None = None
        self._batch_start: float | None = None
        self._interrupted = False  # a checkpoint write or a validation since the previous batch
        self._batches = 0
        self._last_logged_step = -1
        self._cuda = False

    # ------------------------------------------------------------------------------ set-up

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._cuda = trainer.strategy.root_device.type == "cuda"
        self.device = device_name(trainer.strategy.root_device)
        self.precision = str(trainer.precision)
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        self.peak = self.peak_flops_given or table_peak(self.device, self.precision, tf32)
        if self.peak is not None and self.flops_per_image is None:
            self.flops_per_image = training_flops_per_image(pl_module)

    # ------------------------------------------------------------------------------ timing

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._previous_end, self._interrupted = time.perf_counter(), False

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._interrupted = True

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        self._interrupted = True

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        previous, start, interrupted = self._previous_end, self._batch_start, self._interrupted
        self._previous_end, self._interrupted = now, False
        self._batches += 1
        inputs = batch[0] if isinstance(batch, (tuple, list)) else None
        if previous is None or start is None or interrupted or self._batches <= WARMUP_BATCHES:
            return
        if inputs is None or not hasattr(inputs, "shape"):
            return
        self.totals["images"] += int(inputs.shape[0])
        self.totals["time"] += now - previous
        self.totals["wait"] += max(0.0, start - previous)
        every = self.every_n_steps or trainer.log_every_n_steps or 50
        step = trainer.global_step
        if step % every == 0 and step != self._last_logged_step:
            self._last_logged_step = step
            self._log(trainer)

    # ------------------------------------------------------------------------------ figures

    def _figures(self, images: float, seconds: float, wait: float, world_size: int) -> dict[str, float]:
        figures = {"images_per_s": images * world_size / seconds, "data_wait": wait / seconds}
        if self.peak and self.flops_per_image:
            figures["mfu"] = images / seconds * self.flops_per_image / self.peak
        return figures

    def window(self, consumer: Any, world_size: int) -> dict[str, float] | None:
        """The figures since `consumer`'s previous call (each consumer keeps its own window)."""
        if self._cuda:  # the device has done what the host has launched
            torch.cuda.synchronize()
        last = self._snapshots.get(consumer, {"images": 0.0, "time": 0.0, "wait": 0.0})
        now = dict(self.totals)
        self._snapshots[consumer] = now
        seconds = now["time"] - last["time"]
        if seconds <= 0 or now["images"] <= last["images"]:
            return None
        return self._figures(now["images"] - last["images"], seconds, now["wait"] - last["wait"], world_size)

    def _log(self, trainer: Trainer) -> None:
        figures = self.window("loggers", trainer.world_size)
        if figures is None or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            logger.log_metrics({f"throughput/{k}": v for k, v in figures.items()}, step=trainer.global_step)

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
        figures = self._figures(self.totals["images"], self.totals["time"], self.totals["wait"], world_size)
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
