"""SW-MLP memory and training speed: ``impl: dense`` (the paper's masked dense weights) against
``impl: sparse`` (CSR non-zeros), side by side in one process.

Setting: Hayase & Karakida 2024, Table S.3 (CIFAR): S = 64 patches (P = 4 on 32×32×3), C = 48, so
m = S·C = 3072; 3 MLP blocks, γ = 2; each sparse layer holds the connections of the matching
MLP-Mixer, Ω = γ(C²S + CS²)/2 = 344,064, i.e. p = Ω/(γm²) = (1/S + 1/C)/2 ≈ 0.0182.

Both models are built from the same seed (same masks, same initial weights; the benchmark checks
that their features agree). One training step = forward, cross-entropy, backward, AdamW step, on a
fixed random batch. The two models' steps alternate (``repeats`` times each, after ``warmup``
untimed steps) and the medians are compared. Bytes are those of the tensors each model holds:
parameters + buffers (masks, indices), their gradients, and AdamW's state after a step.

``wide`` adds a run at a width the dense form cannot hold (m = 65,536 at the same Ω): the sparse
model is built and trained for a few steps, and the dense model's bytes are computed, not allocated.

`table_s3` reproduces Table S.3 at its stated settings (``mixer bench --table_s3``): see its docstring.

    python -m mixer_lightning.benchmarks.sparse [--json] [--repeats 5] [--wide 65536]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixer_lightning.benchmarks.timing import compare
from mixer_lightning.errors import require
from mixer_lightning.models.layers import hidden_width
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.models.sw_mlp import SWMLP
from mixer_lightning.width import density as mixer_density
from mixer_lightning.width import omega as mixer_omega

TABLE_S3_CIFAR = dict(image_size=32, in_chans=3, patch_size=4, channels=48, num_blocks=3, gamma=2.0)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def model_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of parameters + buffers, of the gradients, and of the optimiser's state."""
    weights = tensor_bytes(model.parameters()) + tensor_bytes(model.buffers())
    grads = tensor_bytes(p.grad for p in model.parameters())
    state = 0
    if optimizer is not None:
        for per_param in optimizer.state.values():
            state += tensor_bytes(v for v in per_param.values() if torch.is_tensor(v))
    return {"params_buffers": weights, "grads": grads, "optimizer_state": state, "total": weights + grads + state}


def dense_bytes_estimate(model: SWMLP) -> dict[str, int]:
    """What ``impl: dense`` would hold at `model`'s size (float32 weights and AdamW state, bool masks)."""
    sparse_entries = sum(layer.in_features * layer.out_features for layer in model.sparse_layers())
    sparse_values = sum(layer.connections for layer in model.sparse_layers())
    shared = sum(p.numel() for p in model.parameters()) - sparse_values  # stem, norms, biases, head
    weights = 4 * (sparse_entries + shared) + sparse_entries  # float32 weights, bool masks
    grads = 4 * (sparse_entries + shared)
    state = 8 * (sparse_entries + shared)  # AdamW: exp_avg and exp_avg_sq
    return {"params_buffers": weights, "grads": grads, "optimizer_state": state, "total": weights + grads + state}


def _build(impl: str, seed: int, device: str = "cpu", **arch: Any) -> SWMLP:
    torch.manual_seed(seed)
    return SWMLP(impl=impl, **arch).to(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """One training step: (seconds, loss)."""
    _sync(x.device)
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=False)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    _sync(x.device)
    return time.perf_counter() - start, loss.item()


def _batch(batch_size: int, arch: dict, num_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    size = arch["image_size"]
    x = torch.randn(batch_size, arch["in_chans"], size, size, generator=generator)
    return x, torch.randint(num_classes, (batch_size,), generator=generator)


def sw_mlp_ratios(
    batch_size: int = 128,
    repeats: int = 5,
    warmup: int = 1,
    seed: int = 0,
    lr: float = 0.01,
    num_classes: int = 10,
    device: str = "cpu",
    **overrides: Any,
) -> dict[str, Any]:
    """Dense vs sparse SW-MLP at the Table S.3 CIFAR setting (or `overrides` of it): bytes, step
    times (medians of `repeats` interleaved steps) and their ratios sparse/dense."""
    arch = {**TABLE_S3_CIFAR, **overrides}
    num_patches = (arch["image_size"] // arch["patch_size"]) ** 2
    if "omega" not in arch and "density" not in arch:
        arch["omega"] = int(mixer_omega(num_patches, arch["channels"], arch["gamma"]))
    models = {impl: _build(impl, seed, device, num_classes=num_classes, **arch) for impl in ("dense", "sparse")}
    x, y = (t.to(device) for t in _batch(batch_size, arch, num_classes, seed))
    with torch.no_grad():  # same seed, same function (the head starts at zero, so compare features)
        difference = (models["dense"].forward_features(x) - models["sparse"].forward_features(x)).abs().max()
    optimizers = {impl: torch.optim.AdamW(m.parameters(), lr=lr) for impl, m in models.items()}
    times: dict[str, list[float]] = {"dense": [], "sparse": []}
    for r in range(warmup + repeats):
        for impl in ("dense", "sparse") if r % 2 == 0 else ("sparse", "dense"):
            elapsed, _ = _step(models[impl], optimizers[impl], x, y)
            if r >= warmup:
                times[impl].append(elapsed)
    memory = {impl: model_bytes(models[impl], optimizers[impl]) for impl in models}
    step = {impl: statistics.median(t) for impl, t in times.items()}
    reference = models["sparse"]
    return {
        "setting": {
            **{k: v for k, v in arch.items()},
            "width_m": reference.width,
            "density_p": reference.density,
            "omega_per_layer": reference.omega,
            "connections_per_layer": reference.connections(),
            "batch_size": batch_size,
            "repeats": repeats,
            "threads": torch.get_num_threads(),
            "device": str(x.device) if x.device.type == "cpu" else torch.cuda.get_device_name(x.device),
            "optimizer": "AdamW",
        },
        "features_max_abs_difference_at_init": float(difference),
        "bytes": memory,
        "step_seconds": {impl: step[impl] for impl in step},
        "step_seconds_all": times,
        "images_per_second": {impl: batch_size / step[impl] for impl in step},
        "ratios_sparse_over_dense": {
            "params_buffers_bytes": memory["sparse"]["params_buffers"] / memory["dense"]["params_buffers"],
            "params_buffers_optimizer_bytes": (
                (memory["sparse"]["params_buffers"] + memory["sparse"]["optimizer_state"])
                / (memory["dense"]["params_buffers"] + memory["dense"]["optimizer_state"])
            ),
            "total_bytes": memory["sparse"]["total"] / memory["dense"]["total"],
            "step_time": step["sparse"] / step["dense"],
        },
        "speedup_sparse_over_dense": step["dense"] / step["sparse"],
    }


def sw_mlp_wide(
    width: int = 65536,
    batch_size: int = 128,
    steps: int = 5,
    seed: int = 0,
    lr: float = 0.01,
    device: str = "cpu",
    **overrides: Any,
) -> dict[str, Any]:
    """The sparse SW-MLP at `width` with the Table S.3 connections per layer: its bytes and step time
    (median of `steps` AdamW steps on one fixed batch, whose loss must fall), and the bytes the
    dense form would need (computed, not allocated)."""
    arch = {**TABLE_S3_CIFAR, **overrides}
    num_patches = (arch["image_size"] // arch["patch_size"]) ** 2
    omega_ = int(mixer_omega(num_patches, arch.pop("channels"), arch["gamma"]))  # the Table S.3 connections
    model = _build("sparse", seed, device, num_classes=10, width=width, omega=omega_, **arch)
    x, y = (t.to(device) for t in _batch(batch_size, arch, 10, seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, times = [], []
    for _ in range(steps + 1):
        elapsed, loss = _step(model, optimizer, x, y)
        times.append(elapsed)
        losses.append(loss)
    return {
        "width_m": model.width,
        "channels": model.channels,
        "density_p": model.density,
        "omega_per_layer": model.omega,
        "connections_per_layer": model.connections(),
        "batch_size": batch_size,
        "sparse_bytes": model_bytes(model, optimizer),
        "dense_bytes_needed": dense_bytes_estimate(model),
        "step_seconds_median": statistics.median(times[1:]),
        "losses": losses,
    }


def _format(report: dict[str, Any]) -> str:
    s = report["setting"]
    mb = 1e6
    lines = [
        f"SW-MLP, Table S.3 CIFAR setting: m = {s['width_m']}, {s['num_blocks']} MLP blocks, gamma = {s['gamma']:g}, "
        f"p = {s['density_p']:.5f}, Omega = {s['omega_per_layer']:.0f} per layer; batch {s['batch_size']}, "
        f"{s['device']} ({s['threads']} CPU threads), AdamW, median of {s['repeats']} interleaved steps",
        f"{'':<8}{'params+buffers':>16}{'grads':>12}{'AdamW state':>14}{'total':>12}{'step (s)':>10}{'img/s':>10}",
    ]
    for impl in ("dense", "sparse"):
        b = report["bytes"][impl]
        lines.append(
            f"{impl:<8}{b['params_buffers'] / mb:>13.1f} MB{b['grads'] / mb:>9.1f} MB{b['optimizer_state'] / mb:>11.1f} MB"
            f"{b['total'] / mb:>9.1f} MB{report['step_seconds'][impl]:>10.3f}{report['images_per_second'][impl]:>10.0f}"
        )
    r = report["ratios_sparse_over_dense"]
    lines.append(
        f"sparse/dense: params+buffers {r['params_buffers_bytes']:.4f}, +AdamW state "
        f"{r['params_buffers_optimizer_bytes']:.4f}, all {r['total_bytes']:.4f}; step time {r['step_time']:.3f} "
        f"({report['speedup_sparse_over_dense']:.1f}x faster); features agree to "
        f"{report['features_max_abs_difference_at_init']:.1e}"
    )
    wide = report.get("wide")
    if wide:
        lines.append(
            f"wide: m = {wide['width_m']} (C = {wide['channels']}), p = {wide['density_p']:.3g}: sparse holds "
            f"{wide['sparse_bytes']['total'] / mb:.1f} MB, dense would need {wide['dense_bytes_needed']['total'] / 1e9:.0f} GB; "
            f"step {wide['step_seconds_median']:.3f} s, loss {wide['losses'][0]:.3f} -> {wide['losses'][-1]:.3f}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ Table S.3

# Table S.3's settings: "S = 256, C = 588, L = 8, γ = 4 for ImageNet and S = 64, C = 48, L = 3, γ = 2 for
# CIFAR"; the patch size makes S = S0 (P = 4 on 32 px, P = 14 on 224 px), so no SkipLayer.
TABLE_S3_SETTINGS = {
    "cifar": dict(
        image_size=32, in_chans=3, patch_size=4, tokens=64, channels=48, num_blocks=3, gamma=2.0, num_classes=10
    ),
    "imagenet": dict(
        image_size=224, in_chans=3, patch_size=14, tokens=256, channels=588, num_blocks=8, gamma=4.0, num_classes=1000
    ),
}
CIFAR_TRAIN_IMAGES = 50_000  # an epoch of CIFAR-10/100; App. C.3: batch 128, AdamW, float32, V100
# The paper's figures (memory in bytes, forward FLOPs per image, seconds per CIFAR epoch).
PAPER_TABLE_S3 = {
    "cifar": {
        "sw_mlp_dense": {"memory": 3.22e9, "flops": 805e6, "epoch_seconds": 28.2},
        "rp_mixer": {"memory": 3.94e6, "flops": 12.5e6, "epoch_seconds": 6.41},
        "mixer": {"memory": 3.93e6, "flops": 12.5e6, "epoch_seconds": 6.08},
    },
    "imagenet": {
        "sw_mlp_dense": {"memory": 23.2e12, "flops": 5.80e12},
        "rp_mixer": {"memory": 26.3e6, "flops": 4.06e9},
        "mixer": {"memory": 26.3e6, "flops": 4.06e9},
    },
}
TABLE_S3_MODELS = ("sw_mlp_dense", "rp_mixer", "mixer", "sw_mlp_sparse")


def table_s3_model(name: str, setting: dict) -> nn.Module:
    """A model of Table S.3 at `setting`. The SW-MLP replaces each of the Mixer's four FC layers per block
    (I_C⊗W1, I_C⊗W2, W3ᵀ⊗I_S, W4ᵀ⊗I_S) by M ⊙ A (App. C.1): 2L MLP blocks of width m = S·C, hidden γm,
    in the Mixer's MLP form, each layer with the Mixer's connections, p = (1/S + 1/C)/2. (The paper's
    SW-MLP figures are 4L layers of γm×m: 805M FLOPs = 2·4·3·2·4096² exactly, see `table_s3`.)"""
    base = {k: setting[k] for k in ("num_classes", "image_size", "in_chans", "patch_size", "num_blocks")}
    if name in ("mixer", "rp_mixer"):
        return MLPMixer(
            **base,
            tokens=setting["tokens"],
            channels=setting["channels"],
            gamma=setting["gamma"],
            permute=name == "rp_mixer",
            norm_eps=1e-5,
        )
    require(
        setting["tokens"] == (setting["image_size"] // setting["patch_size"]) ** 2,
        "tokens",
        "the SW-MLP of Table S.3 takes S = S0 patches",
    )
    return SWMLP(
        **{**base, "num_blocks": 2 * setting["num_blocks"]},
        channels=setting["channels"],
        gamma=setting["gamma"],
        density=mixer_density(setting["tokens"], setting["channels"]),
        out_act=False,
        impl="dense" if name == "sw_mlp_dense" else "sparse",
    )


def sw_mlp_dense_arithmetic(setting: dict) -> dict[str, float]:
    """The dense SW-MLP of `table_s3_model` by arithmetic (for sizes no machine holds): its dense weight
    entries (2L blocks × 2 layers of γm×m), parameters, bytes as we store them (float32 weights, bool
    masks), the paper's bytes (float32 weights and float32 masks: 8 per entry) and forward FLOPs per
    image (2 per multiply-add of the stem, the 4L layers and the head, as `FlopCounterMode` counts)."""
    s0, c, classes = setting["tokens"], setting["channels"], setting["num_classes"]
    c0 = setting["in_chans"] * setting["patch_size"] ** 2
    m = s0 * c
    hidden = hidden_width(setting["gamma"], m)
    blocks = 2 * setting["num_blocks"]
    entries = blocks * 2 * hidden * m
    params = entries + blocks * (hidden + m + 2 * m) + (c0 * c + c) + (m * classes + classes)
    return {
        "width_m": m,
        "entries": entries,
        "params": params,
        "bytes": 4 * params + entries,
        "paper_bytes": 8 * entries,
        "flops": 2 * (entries + s0 * c0 * c + m * classes),
        "train_bytes": 16 * params + entries,
    }


def forward_flops(model: nn.Module, setting: dict, device: str = "cpu") -> int:
    """Forward FLOPs per image (torch's FlopCounterMode: 2 per multiply-add of every matmul)."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(1, setting["in_chans"], setting["image_size"], setting["image_size"], device=device)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


def _adamw_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step, optimizer


def table_s3(
    settings: dict | None = None,
    batch_size: int = 128,
    repeats: int = 3,
    warmup: int = 1,
    device: str = "cpu",
    train_images: int = CIFAR_TRAIN_IMAGES,
    seed: int = 0,
) -> dict[str, Any]:
    """Table S.3 side by side: for the CIFAR setting the dense SW-MLP, the RP MLP-Mixer and the MLP-Mixer
    (and our sparse SW-MLP) are built, their bytes and FLOPs measured, and their AdamW training steps
    (batch `batch_size`, float32) timed interleaved in this process (`compare`, medians); an epoch is
    ⌈train_images / batch⌉ steps of that median (compute only, no data loading). For the ImageNet
    setting the Mixers are built on the meta device (bytes and FLOPs exact, nothing allocated) and the
    dense SW-MLP (2.9·10^12 weights) is `sw_mlp_dense_arithmetic`, as is the CIFAR one, as a check.

    Memory: ``params_bytes`` = parameters + buffers as held (masks, RP permutation indices);
    ``train_bytes`` = that + gradients + AdamW state (on a GPU: the peak allocated during a step).
    The paper does not define its memory; its SW-MLP figures are 8 bytes per dense weight entry at
    m = 4096 for CIFAR (S = C = 64, not the stated C = 48: 3.22 GB = 8·4L·γ·4096², 805M = 2·4L·γ·4096²)
    and at m = 150,528 for ImageNet (23.2 TB, 5.80 TFLOPs), so each figure is given beside ours with
    the ratio ours/paper, and the ratios between the models beside the paper's.
    """
    settings = {**TABLE_S3_SETTINGS, **(settings or {})}
    report: dict[str, Any] = {
        "settings": settings,
        "paper": PAPER_TABLE_S3,
        "device": device,
        "batch_size": batch_size,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
    }
    # ---- CIFAR: measured
    cifar = settings["cifar"]
    models = {}
    for name in TABLE_S3_MODELS:
        torch.manual_seed(seed)
        models[name] = table_s3_model(name, cifar).to(device)
    x, y = _batch(batch_size, cifar, cifar["num_classes"], seed)
    x, y = x.to(device), y.to(device)
    steps, optimizers = {}, {}
    for name, model in models.items():
        steps[name], optimizers[name] = _adamw_step(model, x, y)
    peaks = {}
    if torch.device(device).type == "cuda":
        for name in models:  # each alone, for its peak
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            steps[name]()
            torch.cuda.synchronize()
            peaks[name] = torch.cuda.max_memory_allocated()
    seconds = compare(steps, repeats=repeats, warmup=warmup, device=device)
    steps_per_epoch = math.ceil(train_images / batch_size)
    rows = {}
    for name, model in models.items():
        held = model_bytes(model, optimizers[name])
        rows[name] = {
            "params_bytes": held["params_buffers"],
            "train_bytes": peaks.get(name, held["total"]),
            "flops": forward_flops(model, cifar, device)
            if name != "sw_mlp_sparse"
            else sw_mlp_sparse_flops(model, cifar),
            "step_seconds": seconds[name],
            "epoch_seconds": seconds[name] * steps_per_epoch,
        }
    arithmetic = sw_mlp_dense_arithmetic(cifar)
    rows["sw_mlp_dense"]["paper_bytes"] = arithmetic["paper_bytes"]
    report["cifar"] = {
        "rows": rows,
        "steps_per_epoch": steps_per_epoch,
        "sw_mlp_dense_arithmetic": arithmetic,
        "width_m": models["sw_mlp_dense"].width,
        "density_p": models["sw_mlp_dense"].density,
    }
    del models, steps, optimizers
    # ---- ImageNet: Mixers on the meta device, the dense SW-MLP by arithmetic
    imagenet = settings["imagenet"]
    rows = {}
    arithmetic = sw_mlp_dense_arithmetic(imagenet)
    rows["sw_mlp_dense"] = {
        "params_bytes": arithmetic["bytes"],
        "train_bytes": arithmetic["train_bytes"],
        "flops": arithmetic["flops"],
        "paper_bytes": arithmetic["paper_bytes"],
    }
    for name in ("rp_mixer", "mixer"):
        with torch.device("meta"):
            model = table_s3_model(name, imagenet)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        buffers = sum(b.numel() * b.element_size() for b in model.buffers())
        rows[name] = {
            "params_bytes": params + buffers,
            "train_bytes": 4 * params + buffers,
            "flops": forward_flops(model, imagenet, "meta"),
        }
    report["imagenet"] = {"rows": rows, "sw_mlp_dense_arithmetic": arithmetic}
    # ---- ratios: ours/paper per cell, and between models, ours beside the paper's
    for key in ("cifar", "imagenet"):
        rows, paper = report[key]["rows"], PAPER_TABLE_S3[key]
        for name, row in rows.items():
            figures = paper.get(name, {})
            row["vs_paper"] = {
                "memory": (row.get("paper_bytes") or row["params_bytes"]) / figures["memory"]
                if "memory" in figures
                else None,
                "flops": row["flops"] / figures["flops"] if "flops" in figures else None,
                "epoch_seconds": row["epoch_seconds"] / figures["epoch_seconds"]
                if "epoch_seconds" in figures and "epoch_seconds" in row
                else None,
            }
        ratios = {}
        for a, b in (("sw_mlp_dense", "mixer"), ("rp_mixer", "mixer")):
            for measure, ours_key in (
                ("memory", "params_bytes"),
                ("flops", "flops"),
                ("epoch_seconds", "epoch_seconds"),
            ):
                if ours_key in rows[a] and ours_key in rows[b] and measure in paper[a]:
                    ratios[f"{a}/{b} {measure}"] = {
                        "ours": rows[a][ours_key] / rows[b][ours_key],
                        "paper": paper[a][measure] / paper[b][measure],
                    }
        report[key]["ratios"] = ratios
    return report


def sw_mlp_sparse_flops(model: SWMLP, setting: dict) -> int:
    """Forward FLOPs per image of the sparse SW-MLP: 2 per connection, stem and head."""
    c0 = setting["in_chans"] * setting["patch_size"] ** 2
    return 2 * (sum(model.connections()) + model.num_patches * c0 * model.channels + model.width * model.num_classes)


def _size(n: float, unit: str = "B") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def _ratio(value: float | None) -> str:
    return f"{value:.3g}" if value else "-"


def format_table_s3(report: dict[str, Any]) -> str:
    names = {
        "sw_mlp_dense": "SW-MLP (dense)",
        "rp_mixer": "RP MLP-Mixer",
        "mixer": "MLP-Mixer",
        "sw_mlp_sparse": "SW-MLP (sparse, ours)",
    }
    lines = []
    for key, title in (("cifar", "CIFAR"), ("imagenet", "ImageNet")):
        s = report["settings"][key]
        block = report[key]
        lines.append(
            f"Table S.3, {title}: S = {s['tokens']}, C = {s['channels']}, L = {s['num_blocks']}, "
            f"γ = {s['gamma']:g} (P = {s['patch_size']}, {s['image_size']} px)"
            + (
                f"; batch {report['batch_size']}, AdamW, float32, {report['device']} ({report['threads']} threads), "
                f"median of {report['repeats']} interleaved steps × {block['steps_per_epoch']} steps/epoch"
                if key == "cifar"
                else "; Mixers on the meta device, dense SW-MLP by arithmetic"
            )
        )
        lines.append(
            f"  {'model':<22}{'params+buffers':>15}{'(paper conv.)':>14}{'paper':>10}{'ours/paper':>11}"
            f"{'train mem':>11}{'FLOPs/img':>11}{'paper':>9}{'ours/paper':>11}"
            + (f"{'s/epoch':>9}{'paper':>7}{'ours/paper':>11}" if key == "cifar" else "")
        )
        paper = report["paper"][key]
        for name, row in block["rows"].items():
            figures, vs = paper.get(name, {}), row["vs_paper"]
            line = (
                f"  {names[name]:<22}{_size(row['params_bytes']):>15}"
                f"{_size(row['paper_bytes']) if 'paper_bytes' in row else '':>14}"
                f"{_size(figures['memory']) if 'memory' in figures else '-':>10}"
                f"{_ratio(vs['memory']):>11}{_size(row['train_bytes']):>11}"
                f"{_size(row['flops'], ''):>11}{_size(figures['flops'], '') if 'flops' in figures else '-':>9}"
                f"{_ratio(vs['flops']):>11}"
            )
            if key == "cifar":
                line += (
                    f"{row['epoch_seconds']:>9.1f}{figures.get('epoch_seconds', float('nan')):>7.2f}"
                    f"{_ratio(vs['epoch_seconds']):>11}"
                )
            lines.append(line)
        lines.append(
            "  ratios (ours | paper): "
            + "; ".join(f"{k} {v['ours']:.3g} | {v['paper']:.3g}" for k, v in block["ratios"].items())
        )
    a, s = report["cifar"]["sw_mlp_dense_arithmetic"], report["settings"]["cifar"]
    layers = 4 * s["num_blocks"] * s["gamma"]  # γm×m entries per m² of the 4L layers
    implied = math.sqrt(PAPER_TABLE_S3["cifar"]["sw_mlp_dense"]["flops"] / (2 * layers))
    power = 2 ** round(math.log2(implied))
    implied = power if abs(power / implied - 1) < 0.01 else round(implied)  # 805M is rounded: m = 4096 = 64·64
    lines.append(
        f"Paper convention for the dense SW-MLP: 8 bytes per weight entry (float32 weight and mask; ours keeps a "
        f"bool mask: 5). The paper's CIFAR 805M FLOPs = 2·4L·γ·m² give m = {implied}; the stated S·C is "
        f"{a['width_m']}, so ours/paper = ({a['width_m']}/{implied})² = {(a['width_m'] / implied) ** 2:.4g}."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mixer_lightning.benchmarks.sparse",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per model (default 5)")
    parser.add_argument("--batch-size", type=int, default=128, help="images per step (default 128, as App. C)")
    parser.add_argument("--wide", type=int, default=65536, help="width of the sparse-only run (0: skip)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args(argv)
    report = sw_mlp_ratios(batch_size=args.batch_size, repeats=args.repeats, device=args.device)
    if args.wide:
        report["wide"] = sw_mlp_wide(width=args.wide, batch_size=args.batch_size, device=args.device)
    print(json.dumps(report, indent=2) if args.json else _format(report))


if __name__ == "__main__":
    main()
