"""What ``mixer fit|validate|test|predict`` prints: a terminal and a batch log (SLURM, ``nohup``, CI) alike.

- `quiet_libraries` (`mixer_lightning.commands.quiet`, where the project's commands that run a
  Trainer reach it too): Lightning's and torch's chatter is dropped from the default output.
- `RunHeader`: the first lines of a run say what runs: the model and its parameter count, the data
  and its sizes, the hardware, and the run directory (where the results go).
- `LineProgress`: when stdout is not a terminal, a plain-text line every N optimiser steps (epoch,
  step/total, loss, accuracy, learning rate, images/s, ETA) and one per validation, instead of tqdm's
  carriage returns; in a terminal Lightning's progress bar stays (`progress_callback`).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.callbacks.progress import ProgressBar

from mixer_lightning.commands.quiet import quiet_libraries as quiet_libraries  # what the CLI calls
from mixer_lightning.loggers import run_directory

ProgressMode = Literal["auto", "bar", "lines"]

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


def evaluation_plan(trainer: Trainer, stage: str) -> tuple[int, int | None, str] | None:
    """(images that will be evaluated, images of the split, the limit that cuts them: "" or
    ``limit_test_batches 10``) of the validation or test (`stage`) about to run, from the loader Lightning
    built and the number of batches it will take (``trainer.limit_*_batches`` applied); None when unknown."""
    loaders = trainer.test_dataloaders if stage == "test" else trainer.val_dataloaders
    batches = trainer.num_test_batches if stage == "test" else trainer.num_val_batches
    loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
    if len(loaders) != 1 or len(batches) != 1 or loaders[0] is None:
        return None
    loader, taken = loaders[0], batches[0]
    total, per_process = _size(getattr(loader, "dataset", None)), _size(getattr(loader, "sampler", None))
    batch_size = getattr(loader, "batch_size", None)
    if per_process is None or not batch_size or not math.isfinite(taken):
        return None
    planned = min(per_process, int(taken) * batch_size) * trainer.world_size
    limit_name = "limit_test_batches" if stage == "test" else "limit_val_batches"
    limit = getattr(trainer, limit_name, None)
    cut = taken < math.ceil(per_process / batch_size)
    return planned, total, f"{limit_name} {_number(limit) if isinstance(limit, float) else limit}" if cut else ""


class RunHeader(Callback):
    """Prints what runs (module docstring) once the data is set up, on the first process only; a
    validation or test prints it when its loader is built, to say how many images it evaluates (all of
    the split, or ``1,280 of 10,000 test images (limit_test_batches 10)``), and counts the images it
    evaluated (`evaluated`: ``images``, ``of``, ``partial``, what `mixer_lightning.cli.results` records).

    `run_dir` and `results` are what the CLI decided (`mixer_lightning.cli.lightning.MixerCLI`); the
    checkpoint `ckpt_path` is named when one is evaluated or resumed."""

    def __init__(self, command: str, ckpt_path: str | None = None, results: str | None = None):
        self.command, self.ckpt_path, self.results = command, ckpt_path, results
        self._printed = False
        self._log_dir: str | None = None
        self._waiting: str | None = None  # the evaluation whose loader the header waits for
        self._counted = 0
        self.evaluated: dict[str, Any] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._printed or self._waiting:
            return
        self._log_dir = run_directory(trainer)  # a broadcast under DDP: every process asks
        if stage in ("validate", "test"):
            self._waiting = stage  # printed by on_validation_start / on_test_start, once the loader is built
            return
        self._print(trainer, pl_module, stage)

    def _print(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._printed = True
        if not trainer.is_global_zero:
            return
        lines = [f"model  {describe_model(pl_module)}"]
        if self.ckpt_path:
            lines.append(f"ckpt   {self.ckpt_path}")
        data = describe_data(trainer.datamodule, stage)
        if stage == "fit":
            data = _with_fit_limits(data, trainer)
        plan = evaluation_plan(trainer, stage) if stage in ("validate", "test") else None
        if plan is not None:
            data = _with_plan(data, plan, stage)
        if data:
            lines.append(f"data   {data}")
        devices = trainer.num_devices * trainer.num_nodes
        where = f"{type(trainer.accelerator).__name__.removesuffix('Accelerator').lower()}"
        precision = getattr(trainer.precision_plugin, "precision", None) or trainer.precision
        hardware = f"{where}, {devices} device{'s' if devices > 1 else ''}, {precision} precision"
        if stage == "fit":
            hardware += f", seed {_seed()}"
        lines.append(f"on     {hardware}")
        if self._log_dir and not trainer.fast_dev_run:
            lines.append(f"run    {self._log_dir}" + (f" ({self.results})" if self.results else ""))
        print("\n".join(lines), flush=True)

    def _start(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._waiting == stage and trainer.state.fn == ("test" if stage == "test" else "validate"):
            self._waiting = None
            self._counted = 0
            self._print(trainer, pl_module, stage)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start(trainer, pl_module, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start(trainer, pl_module, "test")

    def _count(self, trainer: Trainer, batch: Any) -> None:
        if trainer.state.fn in ("validate", "test") and not trainer.sanity_checking:
            self._counted += _batch_length(batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._count(trainer, batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._count(trainer, batch)

    def _finish(self, trainer: Trainer, stage: str) -> None:
        """`evaluated`: the images of every process together (a sum over processes: every one calls it)."""
        if trainer.state.fn != ("test" if stage == "test" else "validate") or trainer.sanity_checking:
            return
        import torch

        counted = torch.tensor(self._counted, device=trainer.strategy.root_device)
        counted = int(trainer.strategy.reduce(counted, reduce_op="sum"))
        loaders = trainer.test_dataloaders if stage == "test" else trainer.val_dataloaders
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        total = _size(getattr(loaders[0], "dataset", None)) if len(loaders) == 1 and loaders[0] is not None else None
        self.evaluated = {"images": counted, "of": total, "partial": None if total is None else counted < total}

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer, "validate")

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer, "test")

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._waiting:  # no loader was run (e.g. limit_val_batches 0): still say what ran
            self._waiting = None
            self._print(trainer, pl_module, stage)


def _with_plan(data: str | None, plan: tuple[int, int | None, str], stage: str) -> str | None:
    """`describe_data`'s line with the images the evaluation takes: ``1,280 of 10,000 test images
    (limit_test_batches 10)`` in place of ``10,000 test images`` when a limit cuts the split."""
    planned, total, limit = plan
    if data is None or not limit or total is None or planned >= total:
        return data
    role = "test" if stage == "test" else "val"
    return data.replace(f"{total:,} {role} images", f"{planned:,} of {total:,} {role} images ({limit})")


def _with_fit_limits(data: str | None, trainer: Trainer) -> str | None:
    """`describe_data`'s fit line with the images an epoch takes where ``limit_train_batches`` /
    ``limit_val_batches`` (or ``fast_dev_run``) cut them: ``128 of 1,294 train (limit_train_batches 4),
    64 of 144 val images (limit_val_batches 2)``. Printed before the loaders exist, so counted as Lightning
    will: an int is batches, a float a fraction of a full epoch's batches; training drops its last
    partial batch, evaluation keeps it."""
    datamodule = trainer.datamodule
    batch = getattr(datamodule, "batch_size", None)
    if data is None or not batch:
        return data
    world = max(trainer.world_size, 1)
    for role, limit_name in (("train", "limit_train_batches"), ("val", "limit_val_batches")):
        dataset = getattr(datamodule, f"{role}_set", None)
        size = _size(dataset) if dataset is not None else None
        limit = getattr(trainer, limit_name)
        if not size or (isinstance(limit, float) and limit == 1.0):
            continue
        per_process = math.ceil(size / world)
        if role == "train":
            step = batch
            full = per_process // batch if per_process > batch else 1
        else:
            sizer = getattr(datamodule, "evaluation_batch_size", None)
            step = sizer(dataset) if callable(sizer) else batch
            full = math.ceil(per_process / step)
        taken = min(full, int(limit)) if isinstance(limit, int) else int(full * limit)
        if taken >= full or taken <= 0:
            continue
        planned = min(per_process, taken * step) * world
        name = (
            "fast_dev_run"
            if trainer.fast_dev_run
            else f"{limit_name} {_number(limit) if isinstance(limit, float) else limit}"
        )
        counted = f"{size:,} {role}" + (" images" if role == "val" else "")  # "1,294 train, 144 val images"
        data = data.replace(counted, f"{planned:,} of {counted} ({name})", 1)
    return data


def _batch_length(batch: Any) -> int:
    """The number of images in `batch`: the length of its first tensor (images, or labels)."""
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_length(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_length(next(iter(batch.values())))
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 0


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
