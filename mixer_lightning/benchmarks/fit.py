"""End-to-end ``mixer fit`` against the model's own training step (`fit_vs_step`; ``mixer bench --fit`` and
the ``cifar_fit_*`` figures of ``mixer bench --json``): images/s of the Fig. 5 config (S-Mixer, Ω = 2^18,
C = S = 64) through the tensor path and the PIL path, beside the bare step. Each fit runs the ``mixer`` command
itself in a process of its own (`hardware.mixer_command`), timed by a callback (`FitTimer`) that writes its
figures to a file."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback

from mixer_lightning.benchmarks.data import REPO, checkout_relative, data_root
from mixer_lightning.errors import require
from mixer_lightning.hardware import mixer_command

FIG5_CONFIG = REPO / "configs" / "cifar10_fig5_s_mixer.yaml"
# Hayase & Karakida Fig. 5 at Ω = 2^18 with C = S = 64 (Ω = (C²S + CS²)/2): the point the issue times.
FIG5_OVERRIDES = ("--model.net.channels", "64")


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
        pixels = (ramp * rng.uniform(0.3, 1, (n, 1, 1, 3)) + rng.integers(0, 64, (n, 32, 32, 3))) % 256
        images = [Image.fromarray(p) for p in pixels.astype(np.uint8)]
        table = datasets.Dataset.from_dict({"img": images, "label": [i % 10 for i in range(n)]}, features=features)
        table.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def _bare_step(net, optimizer, x: torch.Tensor, y: torch.Tensor, label_smoothing: float, cast: bool) -> None:
    """The model's training step without Lightning: forward, the task's loss, backward, optimiser."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=cast):
        logits = net(x)
    torch.nn.functional.cross_entropy(logits.float(), y, label_smoothing=label_smoothing).backward()
    optimizer.step()


class FitTimer(Callback):
    """Times a ``mixer fit`` over its batches after the first `warmup`: each batch's cycle (fetch, transfer,
    the step, Lightning's bookkeeping) and the part spent waiting for the batch, written as JSON to `record`.
    `paired`: after each batch, the bare step of a copy of the network on that batch, outside the cycle's
    timing, so that the two are measured moments apart whatever the machine's load (only where nothing runs
    beside the main process: no loader workers, no asynchronous GPU work); else `step_batches` > 0: that many
    bare steps on the first batch after the fit (`_step`)."""

    def __init__(self, record: str, warmup: int = 4, paired: bool = False, step_batches: int = 0):
        self.record, self.warmup, self.paired, self.step_batches = Path(record), warmup, paired, step_batches
        self.cycles, self.waits, self.steps = [], [], []
        self.resumed = self.batch = self.twin = None

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
        require(bool(self.cycles), "fit_batches", "the fit ended before the timed batches", "time fewer batches")
        seconds = sum(self.cycles)
        run = {"seconds": seconds, "batches": len(self.cycles), "waiting_share": sum(self.waits) / seconds}
        run |= {"paired_step_seconds": sum(self.steps) if self.steps else None, "batch_size": len(self.batch[0])}
        run |= {"workers": trainer.train_dataloader.num_workers, "pipeline": trainer.datamodule.pipeline}
        if self.step_batches and not self.paired:
            batch = tuple(t.to(pl_module.device) for t in self.batch)
            run["step_seconds"] = _step(pl_module, batch, self.warmup, self.step_batches, trainer.precision)
        self.record.write_text(json.dumps(run))


def _fit(config: Path, root: Path, pipeline: str, warmup: int, batches: int, workdir: Path, extra=(), paired=False):
    """One ``mixer fit`` of `warmup` + `batches` training batches (no validation, no checkpoints), timed by
    `FitTimer`; its output goes to stderr (not into --json output)."""
    record = workdir / "fit_timer.json"
    flags = {
        "--data.dataset": "hf",
        "--data.root": root,
        "--data.pipeline": pipeline,
        "--trainer.max_epochs": 1,
        "--trainer.limit_train_batches": warmup + batches,
        "--trainer.limit_val_batches": 0,
        "--trainer.enable_progress_bar": "false",
        "--trainer.enable_model_summary": "false",
        "--trainer.logger.init_args.save_dir": workdir,
        "--trainer.logger.init_args.name": pipeline,
        "--trainer.callbacks+": "mixer_lightning.benchmarks.fit.FitTimer",
        "--trainer.callbacks.record": record,
        "--trainer.callbacks.warmup": warmup,
        "--trainer.callbacks.paired": str(paired).lower(),
        "--trainer.callbacks.step_batches": 0 if paired else batches,
        "--checkpoint.save_last": "false",
        "--checkpoint.save_top_k": 0,
    }
    args = ["fit", "--config", str(config), *extra, *(f"{k}={v}" for k, v in flags.items())]
    done = subprocess.run(mixer_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, end="", file=sys.stderr)
    if done.returncode:
        raise SystemExit(done.returncode)
    return json.loads(record.read_text())


def _step(module, batch: tuple[torch.Tensor, torch.Tensor], warmup: int, steps: int, precision: str) -> float:
    """Seconds of `steps` bare training steps (`_bare_step`, the config's optimiser) on one real batch, after
    `warmup` steps: the model's own training-step time."""
    x, y = batch
    module.to(x.device).train()
    optimizer = module.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    sync = torch.cuda.synchronize if x.device.type == "cuda" else lambda: None
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            start = time.perf_counter()
        _bare_step(module.net, optimizer, x, y, module.label_smoothing, precision == "bf16-mixed")
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
    """End-to-end ``mixer fit`` images/s through the tensor and the PIL path, and the model's own step, side by
    side: ``cifar_fit_vs_step`` (tensor-path fit ÷ step; 1: the data path and Lightning cost nothing; on the
    CPU the step is timed paired with the fit, as a shared machine's load changes within seconds, on a GPU by
    separate runs), ``cifar_fit_speedup`` (tensor ÷ PIL, the median of each round's ratio, the order
    alternating) and ``waiting_share``. Each fit trains `warmup` + `batches` batches, timed over the last
    `batches` (the PIL path's workers work ahead by their prefetch queue: favoured in short fits). Data: real
    CIFAR-10 under `data_root` when present, else a synthetic CIFAR-shaped set."""
    config = Path(config)
    flags = {"--trainer.accelerator": "gpu" if device.startswith("cuda") else "cpu", "--trainer.devices": 1}
    extra = [*(FIG5_OVERRIDES if config == FIG5_CONFIG else ()), *(f"{k}={v}" for k, v in flags.items())]
    extra.append(f"--trainer.precision={precision}")
    paired = not device.startswith("cuda")
    rates: dict[str, list[float]] = {"tensor": [], "pil": [], "step": []}
    waiting: dict[str, list[float]] = {"tensor": [], "pil": []}
    workers: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="mixer-fit-bench-") as tmp:
        real = Path(root) if root is not None else data_root() / "cifar10"
        synthetic = not (real / "data").is_dir()
        if synthetic:
            log(f"no real CIFAR-10 at {real}: a synthetic CIFAR-shaped set")
            real = write_synthetic_cifar(Path(tmp) / "synthetic")
        log("end-to-end fit (tensor path, PIL path) and the training step, round by round ...")
        _fit(config, real, "tensor", 1, 1, Path(tmp), extra)  # decode (or load) the cache, outside the timings
        for round_ in range(repeats):
            for name in ("tensor", "pil") if round_ % 2 == 0 else ("pil", "tensor"):
                run = _fit(config, real, name, warmup, batches, Path(tmp), extra, paired and name == "tensor")
                require(run["pipeline"] == name, "data.pipeline", f"the fit took the {run['pipeline']} path")
                batch_size = run["batch_size"]
                rates[name].append(run["batches"] * batch_size / run["seconds"])
                waiting[name].append(run["waiting_share"])
                workers[name] = run["workers"]
                if name == "tensor":
                    seconds = run["paired_step_seconds"] if paired else run["step_seconds"]
                    rates["step"].append(batches * batch_size / seconds)
            log(f"round {round_ + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.1f} img/s" for k, v in rates.items()))
    median = {name: statistics.median(values) for name, values in rates.items()}
    ratios = {
        "cifar_fit_vs_step": [f / s for f, s in zip(rates["tensor"], rates["step"], strict=True)],
        "cifar_fit_speedup": [t / p for t, p in zip(rates["tensor"], rates["pil"], strict=True)],
        # the PIL fit against the step of the tensor fit beside it (not paired: its workers run beside the step)
        "pil_fit_vs_step": [p / s for p, s in zip(rates["pil"], rates["step"], strict=True)],
    }
    return {
        "cifar_fit_vs_step": statistics.median(ratios["cifar_fit_vs_step"])
        if paired
        else median["tensor"] / median["step"],
        "cifar_fit_speedup": statistics.median(ratios["cifar_fit_speedup"]),
        "pil_fit_vs_step": statistics.median(ratios["pil_fit_vs_step"]),
        "img_per_s": {"fit_tensor": median["tensor"], "fit_pil": median["pil"], "train_step": median["step"]},
        "rounds_img_per_s": rates,
        "rounds_ratios": ratios,
        # the noise row of a benchmark without an identical twin: how far one round's ratio strays from another's
        "rounds_spread": {key: [min(values), max(values)] for key, values in ratios.items()},
        "waiting_share": {name: statistics.median(values) for name, values in waiting.items()},
        "setting": {
            "config": checkout_relative(config),
            "overrides": " ".join(extra),
            "device": device,
            "step_timing": "paired with the tensor fit" if paired else "separate runs",
            "data": "synthetic CIFAR-shaped set" if synthetic else checkout_relative(real),
            "batch_size": batch_size,
            "warmup_batches": warmup,
            "timed_batches": batches,
            "repeats": repeats,
            "threads": torch.get_num_threads(),
            "workers": {"tensor": workers.get("tensor"), "pil": workers.get("pil")},
        },
    }
