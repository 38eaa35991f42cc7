"""End-to-end ``mixer fit`` against the model's own training step (`fit_vs_step`; ``mixer bench --fit``,
the ``cifar_fit_*`` figures of ``mixer bench --json``): images/s of the Fig. 5 config (S-Mixer,
Ω = 2^18, C = S = 64) through the tensor path and through the PIL path, against the bare step, side by
side in one process. Each fit runs the ``mixer`` command itself (`mixer_lightning.run_mixer`), timed
by a callback (`FitTimer`). Data: as `mixer_lightning.benchmarks.data` reads it (`data_root`).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from lightning.pytorch import Callback

from mixer_lightning import run_mixer
from mixer_lightning.benchmarks.data import REPO, checkout_relative, data_root
from mixer_lightning.errors import require

FIG5_CONFIG = REPO / "configs" / "cifar10_fig5_s_mixer.yaml"
# Hayase & Karakida Fig. 5 at Ω = 2^18 with C = S = 64 (Ω = (C²S + CS²)/2): the point the issue times.
FIG5_OVERRIDES = ("--model.init_args.channels", "64")


def write_synthetic_cifar(root: Path, train: int = 4096, test: int = 512) -> Path:
    """A CIFAR-shaped Hugging Face dataset (32×32 RGB PNGs, 10 classes) in the hub's parquet layout."""
    import datasets
    import numpy as np
    from PIL import Image

    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    (root / "data").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, 32)[None, None, :, None]
    for split, n in (("train", train), ("test", test)):
        pixels = ((ramp * rng.uniform(0.3, 1, (n, 1, 1, 3)) + rng.integers(0, 64, (n, 32, 32, 3))) % 256).astype(
            np.uint8
        )
        table = datasets.Dataset.from_dict(
            {"img": [Image.fromarray(p) for p in pixels], "label": [i % 10 for i in range(n)]}, features=features
        )
        table.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def _bare_step(
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    label_smoothing: float,
    cast: bool,
) -> None:
    """The model's training step without Lightning: forward, the task's loss, backward, optimiser."""
    import torch.nn.functional as F

    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=cast):
        logits = net(x)
    F.cross_entropy(logits.float(), y, label_smoothing=label_smoothing).backward()
    optimizer.step()


class FitTimer(Callback):
    """Times a ``mixer fit`` over its training batches after the first `warmup`: each batch's cycle (end
    of the previous batch → end of this one: fetch, transfer, making the images on the tensor path,
    the step, Lightning's bookkeeping), and the part of it spent waiting for the batch (→ start of
    this batch). Keeps the module and its first batch.

    `paired`: after each batch, also run the bare training step (`_bare_step`) of a copy of the network
    with its own optimiser on that same batch, outside the cycle's timing: the step's time measured
    moments from the fit's own, so their ratio holds when the machine's load changes (only where
    nothing runs beside the main process: no loader workers, no asynchronous GPU work)."""

    runs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, warmup: int = 4, paired: bool = False):
        self.warmup, self.paired = warmup, paired
        self.cycles: list[float] = []
        self.waits: list[float] = []
        self.steps: list[float] = []
        self.resumed: float | None = None
        self.batch: Any = None
        self.twin: tuple[torch.nn.Module, torch.optim.Optimizer] | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.batch is None:
            self.batch = tuple(t.detach().clone() for t in batch)
        if batch_idx >= self.warmup and self.resumed is not None:
            self.waits.append(time.perf_counter() - self.resumed)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.perf_counter()
        if batch_idx >= self.warmup and self.resumed is not None:
            self.cycles.append(now - self.resumed)
        if self.paired:
            import copy

            if self.twin is None:  # copied together, the optimiser's parameters are the copy's
                self.twin = copy.deepcopy((pl_module.net, trainer.optimizers[0]))
            x, y = batch
            start = time.perf_counter()
            _bare_step(*self.twin, x, y, pl_module.label_smoothing, trainer.precision == "bf16-mixed")
            if batch_idx >= self.warmup:
                self.steps.append(time.perf_counter() - start)
        self.resumed = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        require(
            bool(self.cycles),
            "fit_batches",
            "the fit ended before the timed batches",
            "use fewer warm-up and timed batches, or more training images",
        )
        seconds = sum(self.cycles)
        FitTimer.runs.append(
            {
                "seconds": seconds,
                "batches": len(self.cycles),
                "waiting_share": sum(self.waits) / seconds,
                "paired_step_seconds": sum(self.steps) if self.steps else None,
                "module": pl_module,
                "batch": self.batch,
                "workers": trainer.train_dataloader.num_workers,
                "pipeline": trainer.datamodule.pipeline,
            }
        )


def _fit(
    config: Path,
    root: Path,
    pipeline: str,
    warmup: int,
    batches: int,
    workdir: Path,
    extra: Sequence[str] = (),
    paired: bool = False,
) -> dict[str, Any]:
    """One ``mixer fit`` of `warmup` + `batches` training batches (no validation), timed by `FitTimer`."""
    args = [
        "fit",
        "--config",
        str(config),
        *extra,
        "--data.dataset",
        "hf",
        "--data.root",
        str(root),
        "--data.pipeline",
        pipeline,
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        str(warmup + batches),
        "--trainer.limit_val_batches",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.logger.init_args.save_dir",
        str(workdir),
        "--trainer.logger.init_args.name",
        pipeline,
        "--trainer.callbacks+=mixer_lightning.benchmarks.fit.FitTimer",
        "--trainer.callbacks.warmup",
        str(warmup),
        "--trainer.callbacks.paired",
        str(paired).lower(),
        "--checkpoint.save_last",
        "false",
        "--checkpoint.save_top_k",
        "0",
    ]
    with contextlib.redirect_stdout(sys.stderr):  # Lightning's and the CLI's prints: not in --json output
        run_mixer(args)
    return FitTimer.runs.pop()


def _step(
    module: torch.nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    warmup: int,
    steps: int,
    precision: str = "32-true",
) -> float:
    """Seconds of `steps` bare training steps (`_bare_step`, the config's optimiser) on one real batch,
    after `warmup` steps: the model's own training-step time."""
    x, y = batch
    module.to(x.device).train()
    optimizer = module.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    cast = precision == "bf16-mixed"

    def sync() -> None:
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)

    for _ in range(warmup):
        _bare_step(module.net, optimizer, x, y, module.label_smoothing, cast)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        _bare_step(module.net, optimizer, x, y, module.label_smoothing, cast)
    sync()
    return time.perf_counter() - start


def fit_vs_step(
    config: str | Path = FIG5_CONFIG,
    root: str | Path | None = None,
    repeats: int = 5,
    warmup: int = 8,
    batches: int = 32,
    device: str = "cpu",
    precision: str = "32-true",
    log: Callable[..., None] = print,
) -> dict[str, Any]:
    """End-to-end ``mixer fit`` images/s of the Fig. 5 config through the tensor and the PIL path, and
    the model's own training-step images/s, side by side in one process:

    - ``cifar_fit_vs_step``: tensor-path fit images/s ÷ training-step images/s (1: the data path and
      Lightning cost nothing). On the CPU the step is timed paired with the fit (`FitTimer` `paired`:
      a copy of the network steps on each batch right after the fit's own step), because this shared
      machine's load changes within seconds; on a GPU, by separate step runs between the fits;
    - ``cifar_fit_speedup``: tensor-path fit images/s ÷ PIL-path fit images/s, the median over rounds
      of each round's ratio (the two fits of a round run one after the other; order alternates);
    - ``waiting_share``: the share of each fit's time spent waiting for its batches.

    Each fit trains `warmup` + `batches` batches and is timed over the last `batches` (validation off);
    the PIL path's workers (its default, min(8, CPUs)) can work ahead by their prefetch queue (4
    batches with 2 workers), which favours it in short fits. The tensor path runs with its default,
    no workers. Data: real CIFAR-10 (``<data_root()>/cifar10``, Hugging Face layout) when present, else
    a synthetic CIFAR-shaped set. Another `config` runs as it is (the C = 64 override is the Fig. 5
    config's); `device` ``cpu`` or ``cuda``; `precision` the trainer's (the bare step autocasts alike)."""
    config = Path(config)
    extra = [
        *(FIG5_OVERRIDES if config == FIG5_CONFIG else ()),
        "--trainer.accelerator",
        "gpu" if device.startswith("cuda") else "cpu",
        "--trainer.devices",
        "1",
        "--trainer.precision",
        precision,
    ]
    require(config.is_file(), "config", f"no {config}", "run from a checkout of mixer-lightning, or give --config")
    require(repeats > 0 and warmup > 0 and batches > 0, "repeats", "repeats, warmup and batches must be positive")
    paired = not device.startswith("cuda")
    with tempfile.TemporaryDirectory(prefix="mixer-fit-bench-") as tmp:
        workdir = Path(tmp)
        real = Path(root) if root is not None else data_root() / "cifar10"
        synthetic = not (real / "data").is_dir()
        if synthetic:
            log(f"no real CIFAR-10 at {real}: a synthetic CIFAR-shaped set")
            real = write_synthetic_cifar(workdir / "synthetic")
        log("end-to-end fit (tensor path, PIL path) and the training step, round by round ...")
        _fit(config, real, "tensor", 1, 1, workdir, extra)  # decode (or load) the cache, outside the timings
        rates: dict[str, list[float]] = {"tensor": [], "pil": [], "step": []}
        waiting: dict[str, list[float]] = {"tensor": [], "pil": []}
        facts: dict[str, Any] = {}
        for round_ in range(repeats):
            order = ["tensor", "pil"] if round_ % 2 == 0 else ["pil", "tensor"]
            for name in order:
                run = _fit(config, real, name, warmup, batches, workdir, extra, paired=paired and name == "tensor")
                require(
                    run["pipeline"] == name, "data.pipeline", f"the fit took the {run['pipeline']} path, not {name}"
                )
                images = run["batches"] * len(run["batch"][0])
                rates[name].append(images / run["seconds"])
                waiting[name].append(run["waiting_share"])
                facts[f"{name}_workers"], facts["batch_size"] = run["workers"], len(run["batch"][0])
                if name == "tensor":
                    if paired:
                        rates["step"].append(images / run["paired_step_seconds"])
                    else:
                        rates["step"].append(
                            batches
                            * len(run["batch"][0])
                            / _step(run["module"], run["batch"], warmup, batches, precision)
                        )
            log(f"round {round_ + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.1f} img/s" for k, v in rates.items()))
        median = {name: statistics.median(values) for name, values in rates.items()}
        vs_step = [fit / step for fit, step in zip(rates["tensor"], rates["step"], strict=True)]
        speedup = [t / p for t, p in zip(rates["tensor"], rates["pil"], strict=True)]
        pil_vs_step = [p / step for p, step in zip(rates["pil"], rates["step"], strict=True)]
    return {
        "cifar_fit_vs_step": statistics.median(vs_step) if paired else median["tensor"] / median["step"],
        "cifar_fit_speedup": statistics.median(speedup),
        # The PIL fit against the step of the tensor fit beside it (not paired: its workers run beside the step).
        "pil_fit_vs_step": statistics.median(pil_vs_step),
        "img_per_s": {"fit_tensor": median["tensor"], "fit_pil": median["pil"], "train_step": median["step"]},
        "rounds_img_per_s": rates,
        "rounds_ratios": {"cifar_fit_vs_step": vs_step, "cifar_fit_speedup": speedup, "pil_fit_vs_step": pil_vs_step},
        # The noise row of a benchmark without an identical twin: how far one round's ratio strays from another's
        "rounds_spread": {
            key: [min(values), max(values)]
            for key, values in (
                ("cifar_fit_vs_step", vs_step),
                ("cifar_fit_speedup", speedup),
                ("pil_fit_vs_step", pil_vs_step),
            )
        },
        "waiting_share": {name: statistics.median(values) for name, values in waiting.items()},
        "setting": {
            "config": checkout_relative(config),
            "overrides": " ".join(extra),
            "device": device,
            "step_timing": "paired with the tensor fit" if paired else "separate runs",
            "data": "synthetic CIFAR-shaped set" if synthetic else checkout_relative(real),
            "batch_size": facts["batch_size"],
            "warmup_batches": warmup,
            "timed_batches": batches,
            "repeats": repeats,
            "threads": torch.get_num_threads(),
            "workers": {"tensor": facts.get("tensor_workers"), "pil": facts.get("pil_workers")},
        },
    }
