"""What ``mixer fit|validate|test|predict`` prints: a terminal and a batch log (SLURM, ``nohup``, CI) alike.

- `quiet_libraries`: Lightning's and torch's chatter is dropped from the default output: the
  "GPU available: False" / "TPU available" lines, the LitLogger / LitModels advertising, "Seed set to",
  the checkpoint-restoring lines (the header says which checkpoint) and third-party deprecation
  warnings that a user cannot act on (``LeafSpec``). Warnings that ask for an action ("GPU available
  but not used") stay.
- `RunHeader`: the first lines of a run say what runs: the model and its parameter count, the data
  and its sizes, the hardware, and the run directory (where the results go).
- `LineProgress`: when stdout is not a terminal, a plain-text line every N optimiser steps (epoch,
  step/total, loss, accuracy, learning rate, images/s, ETA) and one per validation, instead of tqdm's
  carriage returns; in a terminal Lightning's progress bar stays (`progress_callback`).
"""

from __future__ import annotations

import logging
import math
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.callbacks.progress import ProgressBar

from mixer_lightning.loggers import run_directory

ProgressMode = Literal["auto", "bar", "lines"]

# Messages of Lightning's info loggers that say nothing a user acts on (the header says what runs).
_CHATTER = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip:",
    "Seed set to",
    "Restoring states from the checkpoint path",
    "Restored all states from the checkpoint",
    "Loaded model weights from the checkpoint",
    "SLURM auto-requeueing enabled",  # the project's own line replaces it (`mixer_lightning.safety.slurm`)
)
_CHATTY_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
    "lightning.pytorch.utilities.seed",
    "lightning.pytorch.trainer.connectors.signal_connector",
)
# Deprecation warnings raised inside libraries about their own use of another library.
_LIBRARY_WARNINGS = (r".*isinstance\(treespec, LeafSpec\).*", r".*LeafSpec.*is deprecated.*")
# Hyper-parameters that are not the architecture (the header lists the architecture only).
_NOT_ARCHITECTURE = {
    "num_classes",
    "image_size",
    "in_chans",
    "optimizer",
    "lr_scheduler",
    "init_from",
    "compile",
    "label_smoothing",
    "drop_rate",
    "drop_path",
    "scheduler_interval",
}


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = re.sub(r"^\s*\[rank: \d+\]\s*", "", record.getMessage())  # Lightning's prefix under DDP/SLURM
        return not message.lstrip().startswith(_CHATTER)


_FILTER = _DropChatter()


def quiet_libraries() -> None:
    """Drop the libraries' chatter (module docstring) from this process's output. Idempotent."""
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for pattern in _LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def progress_callback(mode: ProgressMode, every_n_steps: int) -> Callback | None:
    """The progress display for `mode`: ``bar`` (Lightning's tqdm bar: None, Lightning adds it),
    ``lines`` (`LineProgress`), ``auto`` (the bar in a terminal, lines otherwise)."""
    if mode == "bar" or (mode == "auto" and is_terminal()):
        return None
    return LineProgress(every_n_steps)


def _number(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    return f"{value:.2e}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _size(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def describe_model(module: LightningModule) -> str:
    """``MLPMixerModule (patch_size=2, tokens=16, ...), 142,410 parameters``."""
    hparams = dict(getattr(module, "hparams", {}) or {})
    shown = [
        f"{key}={value}"
        for key, value in hparams.items()
        if not key.startswith("_")
        and key not in _NOT_ARCHITECTURE
        and value is not None
        and isinstance(value, (int, float, str, bool))
    ]
    count = sum(p.numel() for p in module.parameters())
    architecture = f" ({', '.join(shown)})" if shown else ""
    # The widths the network resolved (S from Ω, m = S·C, p): what `mixer width` would say of it.
    widths = module.architecture() if callable(getattr(module, "architecture", None)) else {}
    resolved = "".join(
        f", {key}={value:,.0f}" if float(value).is_integer() else f", {key}={value:.4g}"
        for key, value in widths.items()
    )
    return f"{type(module).__name__}{architecture}, {count:,} parameters{resolved}"


def describe_data(datamodule: Any, stage: str) -> str | None:
    """``digits (10 classes, 8×8×1): 1,293 train, 144 val images, batch 64``, from what the data module
    exposes (`ImageDataModule`, `PredictionData`)."""
    if datamodule is None:
        return None
    name = getattr(datamodule, "dataset", None) or type(datamodule).__name__
    facts = []
    if getattr(datamodule, "num_classes", None):
        facts.append(f"{datamodule.num_classes} classes")
    if getattr(datamodule, "image_size", None):
        chans = getattr(datamodule, "in_chans", None)
        facts.append(f"{datamodule.image_size}×{datamodule.image_size}" + (f"×{chans}" if chans else ""))
    roles = {
        "fit": ("train_set", "val_set"),
        "validate": ("val_set",),
        "test": ("test_set",),
        "predict": ("predict_set", "test_set"),
    }.get(stage, ())
    sizes = []
    for role in roles:
        size = _size(getattr(datamodule, role, None)) if getattr(datamodule, role, None) is not None else None
        if size is not None:
            sizes.append(f"{size:,} {role.removesuffix('_set')}")
            if stage == "predict":
                break
    text = f"{name} ({', '.join(facts)})" if facts else str(name)
    if sizes:
        text += f": {', '.join(sizes)} images"
    batch = getattr(datamodule, "batch_size", None)
    if batch:
        text += f", batch {batch}"
    return text


class RunHeader(Callback):
    """Prints what runs (module docstring) once the data is set up, on the first process only.

    `run_dir` and `results` are what the CLI decided (`mixer_lightning.cli.lightning.MixerCLI`); the
    checkpoint `ckpt_path` is named when one is evaluated or resumed."""

    def __init__(self, command: str, ckpt_path: str | None = None, results: str | None = None):
        self.command, self.ckpt_path, self.results = command, ckpt_path, results
        self._printed = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._printed:
            return
        log_dir = run_directory(trainer)  # a broadcast under DDP: every process asks
        self._printed = True
        if not trainer.is_global_zero:
            return
        lines = [f"model  {describe_model(pl_module)}"]
        if self.ckpt_path:
            lines.append(f"ckpt   {self.ckpt_path}")
        data = describe_data(trainer.datamodule, stage)
        if data:
            lines.append(f"data   {data}")
        devices = trainer.num_devices * trainer.num_nodes
        where = f"{type(trainer.accelerator).__name__.removesuffix('Accelerator').lower()}"
        precision = getattr(trainer.precision_plugin, "precision", None) or trainer.precision
        hardware = f"{where}, {devices} device{'s' if devices > 1 else ''}, {precision} precision"
        if stage == "fit":
            hardware += f", seed {_seed()}"
        lines.append(f"on     {hardware}")
        if log_dir and not trainer.fast_dev_run:
            lines.append(f"run    {log_dir}" + (f" ({self.results})" if self.results else ""))
        print("\n".join(lines), flush=True)


def _seed() -> str:
    import os

    return os.environ.get("PL_GLOBAL_SEED", "none")


class LineProgress(ProgressBar):
    """Plain-text progress for logs: a line every `every_n_steps` optimiser steps and at the end of
    every epoch, one line per validation; nothing is overwritten (no carriage returns).

    ``epoch 3/30  step 60/600  loss 1.234  acc 0.612  lr 2.95e-03  812 img/s  ETA 0:41``

    loss: the mean training loss of the steps since the last line; acc: the running training accuracy
    of the epoch (the module's ``train_metrics``); img/s over all processes since the last line.
    """

    def __init__(self, every_n_steps: int = 50):
        super().__init__()
        if every_n_steps < 1:
            from mixer_lightning.errors import ConfigError

            raise ConfigError("progress.every_n_steps", f"must be >= 1, got {every_n_steps}", "give e.g. 50")
        self.every_n_steps = every_n_steps
        self._enabled = True
        self._reset_window()
        self._start: float | None = None
        self._start_step = 0
        self._last_step = -1
        self._total = math.inf

    # ProgressBar's interface
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def _reset_window(self) -> None:
        self._window_start = time.perf_counter()
        self._images = 0
        self._loss_sum = 0.0
        self._loss_count = 0

    def _print(self, text: str) -> None:
        if self._enabled and self.trainer.is_global_zero:
            print(text, flush=True)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start, self._start_step = time.perf_counter(), trainer.global_step
        self._reset_window()
        total = self._total = float(trainer.estimated_stepping_batches)
        epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        batches = self.total_train_batches
        plan = f"{_number(total) if math.isfinite(total) else '?'} steps"
        if epochs and math.isfinite(batches):
            plan += f" ({epochs} epochs × {int(batches)} batches)"
        resumed = f", resumed at step {trainer.global_step}" if trainer.global_step else ""
        self._print(f"train  {plan}{resumed}; a line every {self.every_n_steps} steps")

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        inputs = batch[0] if isinstance(batch, (tuple, list)) else None
        if inputs is not None and hasattr(inputs, "shape"):
            self._images += int(inputs.shape[0])
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "item"):
            # Summed on the loss's device and read once per line: `.item()` every step would be a host
            # sync per step on a GPU, in exactly the batch jobs these lines are for.
            self._loss_sum = loss.detach().float() + self._loss_sum
            self._loss_count += 1
        step = trainer.global_step
        last_step = step >= self._total
        if step != self._last_step and step > 0 and (step % self.every_n_steps == 0 or last_step):
            self._last_step = step
            self._report(trainer, pl_module, step)

    def _training_accuracy(self, pl_module: LightningModule) -> float | None:
        metrics = getattr(pl_module, "train_metrics", None)
        if metrics is None:
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = metrics.compute()  # every process runs this hook at the same step (DDP syncs here)
        except Exception:  # nothing accumulated yet (the epoch's first step after a validation)
            return None
        value = next((v for k, v in values.items() if k.endswith("acc1")), None)
        return float(value) if value is not None else None

    def _report(self, trainer: Trainer, pl_module: LightningModule, step: int) -> None:
        accuracy = self._training_accuracy(pl_module)
        now = time.perf_counter()
        elapsed = max(now - self._window_start, 1e-9)
        parts = []
        if trainer.max_epochs and trainer.max_epochs > 0:
            parts.append(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}")
        else:
            parts.append(f"epoch {trainer.current_epoch + 1}")
        total = self._total
        parts.append(f"step {step}/{int(total)}" if math.isfinite(total) else f"step {step}")
        if self._loss_count:
            parts.append(f"loss {float(self._loss_sum) / self._loss_count:.4f}")
        if accuracy is not None:
            parts.append(f"acc {accuracy:.3f}")
        if trainer.optimizers:
            parts.append(f"lr {trainer.optimizers[0].param_groups[0]['lr']:.3g}")
        if self._images:
            parts.append(f"{self._images * trainer.world_size / elapsed:,.0f} img/s")
        monitor = next((c for c in getattr(trainer, "callbacks", ()) if hasattr(c, "progress_parts")), None)
        if monitor is not None:  # MFU and the data-wait fraction (`mixer_lightning.callbacks.throughput`)
            parts.extend(monitor.progress_parts(self, trainer))
        if self._start is not None and math.isfinite(total) and step > self._start_step:
            per_step = (now - self._start) / (step - self._start_step)
            parts.append(f"ETA {_duration(per_step * (total - step))}")
        self._print("  ".join(parts))
        self._reset_window()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if not metrics:
            return
        text = "  ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
        # The best so far, this validation included (ModelCheckpoint, the last callback, updates it after us).
        checkpoint = trainer.checkpoint_callback
        monitor = getattr(checkpoint, "monitor", None)
        suffix = ""
        if monitor in metrics:
            best = getattr(checkpoint, "best_model_score", None)
            scores = [metrics[monitor]] + ([float(best)] if best is not None else [])
            suffix = f"  (best {monitor} {(max if checkpoint.mode == 'max' else min)(scores):.4f})"
        self._print(f"epoch {trainer.current_epoch + 1} validation  {text}{suffix}")

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pass  # Lightning prints the test metrics' table

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pass


def relative(path: str | Path) -> str:
    """`path` as the user would type it: relative to the working directory when under it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
