"""SW-MLP memory and training speed: ``impl: dense`` (the paper's masked dense weights) against ``impl: sparse``
(CSR non-zeros), side by side in one process (`sw_mlp_ratios`).

Setting: Hayase & Karakida 2024, Table S.3 (CIFAR): S = 64 patches (P = 4 on 32×32×3), C = 48, m = S·C =
3072; 3 MLP blocks, γ = 2; each sparse layer holds the connections of the matching MLP-Mixer, Ω = γ(C²S +
CS²)/2 = 344,064, p = (1/S + 1/C)/2 ≈ 0.0182. Both models come from one seed (same masks and weights; their
features are compared); their AdamW steps on one fixed batch alternate, medians compared. Bytes: parameters
+ buffers (masks, indices), gradients, AdamW's state. `sw_mlp_wide`: the sparse model at a width the dense
form cannot hold (m = 65,536 at the same Ω), the dense bytes computed, not allocated. Table S.3 at its
stated settings is `table_s3`.

    python -m mixer_lightning.benchmarks.sparse [--json] [--repeats 5] [--wide 65536] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixer_lightning.models.sw_mlp import SWMLP
from mixer_lightning.width import omega as mixer_omega

TABLE_S3_CIFAR = dict(image_size=32, in_chans=3, patch_size=4, channels=48, num_blocks=3, gamma=2.0)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def model_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of parameters + buffers, of the gradients, and of the optimiser's state."""
    weights = tensor_bytes(model.parameters()) + tensor_bytes(model.buffers())
    grads = tensor_bytes(p.grad for p in model.parameters())
    states = optimizer.state.values() if optimizer is not None else ()
    state = sum(tensor_bytes(v for v in s.values() if torch.is_tensor(v)) for s in states)
    return {"params_buffers": weights, "grads": grads, "optimizer_state": state, "total": weights + grads + state}


def dense_bytes_estimate(model: SWMLP) -> dict[str, int]:
    """What ``impl: dense`` would hold at `model`'s size (float32 weights and AdamW state, bool masks)."""
    entries = sum(layer.in_features * layer.out_features for layer in model.sparse_layers())
    shared = sum(p.numel() for p in model.parameters()) - sum(layer.connections for layer in model.sparse_layers())
    weights, grads, state = 4 * (entries + shared) + entries, 4 * (entries + shared), 8 * (entries + shared)
    return {"params_buffers": weights, "grads": grads, "optimizer_state": state, "total": weights + grads + state}


def _step(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """One training step: (seconds, loss)."""
    sync = torch.cuda.synchronize if x.device.type == "cuda" else lambda: None
    sync()
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=False)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    sync()
    return time.perf_counter() - start, loss.item()


def random_batch(batch_size: int, arch: dict, num_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch_size, arch["in_chans"], arch["image_size"], arch["image_size"], generator=generator)
    return x, torch.randint(num_classes, (batch_size,), generator=generator)


def _arch(overrides: dict) -> dict:
    """The Table S.3 CIFAR setting with `overrides`, the connections per layer those of the matching Mixer."""
    arch = {**TABLE_S3_CIFAR, **overrides}
    if "omega" not in arch and "density" not in arch:
        arch["omega"] = int(
            mixer_omega((arch["image_size"] // arch["patch_size"]) ** 2, arch["channels"], arch["gamma"])
        )
    return arch


def sw_mlp_ratios(
    batch_size=128, repeats=5, warmup=1, seed=0, lr=0.01, num_classes=10, device="cpu", **overrides
) -> dict[str, Any]:
    """Dense vs sparse SW-MLP at the Table S.3 CIFAR setting (or `overrides` of it): bytes, step times (medians
    of `repeats` interleaved steps) and their ratios sparse/dense."""
    arch = _arch(overrides)
    models = {}
    for impl in ("dense", "sparse"):
        torch.manual_seed(seed)
        models[impl] = SWMLP(impl=impl, num_classes=num_classes, **arch).to(device)
    x, y = (t.to(device) for t in random_batch(batch_size, arch, num_classes, seed))
    with torch.no_grad():  # same seed, same function (the head starts at zero: compare features)
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
    sparse, dense = memory["sparse"], memory["dense"]
    model = models["sparse"]
    where = str(x.device) if x.device.type == "cpu" else torch.cuda.get_device_name(x.device)
    return {
        "setting": arch
        | {"width_m": model.width, "density_p": model.density, "omega_per_layer": model.omega}
        | {"connections_per_layer": model.connections(), "batch_size": batch_size, "repeats": repeats}
        | {"threads": torch.get_num_threads(), "device": where, "optimizer": "AdamW"},
        "features_max_abs_difference_at_init": float(difference),
        "bytes": memory,
        "step_seconds": step,
        "step_seconds_all": times,
        "images_per_second": {impl: batch_size / step[impl] for impl in step},
        "ratios_sparse_over_dense": {
            "params_buffers_bytes": sparse["params_buffers"] / dense["params_buffers"],
            "params_buffers_optimizer_bytes": (sparse["params_buffers"] + sparse["optimizer_state"])
            / (dense["params_buffers"] + dense["optimizer_state"]),
            "total_bytes": sparse["total"] / dense["total"],
            "step_time": step["sparse"] / step["dense"],
        },
        "speedup_sparse_over_dense": step["dense"] / step["sparse"],
    }


def sw_mlp_wide(width=65536, batch_size=128, steps=5, seed=0, lr=0.01, device="cpu", **overrides) -> dict[str, Any]:
    """The sparse SW-MLP at `width` with the Table S.3 connections per layer: its bytes and step time (median
    of `steps` AdamW steps on one batch, whose loss must fall), and the bytes the dense form would need."""
    arch = _arch(overrides)
    arch.pop("channels")
    torch.manual_seed(seed)
    model = SWMLP(impl="sparse", num_classes=10, width=width, **arch).to(device)
    x, y = (t.to(device) for t in random_batch(batch_size, arch, 10, seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    times, losses = zip(*(_step(model, optimizer, x, y) for _ in range(steps + 1)), strict=True)
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
        "losses": list(losses),
    }


def _format(report: dict[str, Any]) -> str:
    s, r, mb = report["setting"], report["ratios_sparse_over_dense"], 1e6
    lines = [
        f"SW-MLP, Table S.3 CIFAR setting: m = {s['width_m']}, {s['num_blocks']} MLP blocks, gamma = {s['gamma']:g}, "
        f"p = {s['density_p']:.5f}, Omega = {s['omega_per_layer']:.0f} per layer; batch {s['batch_size']}, "
        f"{s['device']} ({s['threads']} CPU threads), AdamW, median of {s['repeats']} interleaved steps",
        f"{'':<8}{'params+buffers':>16}{'grads':>12}{'AdamW state':>14}{'total':>12}{'step (s)':>10}{'img/s':>10}",
    ]
    for impl in ("dense", "sparse"):
        b = {k: f"{v / mb:.1f} MB" for k, v in report["bytes"][impl].items()}
        lines.append(
            f"{impl:<8}{b['params_buffers']:>16}{b['grads']:>12}{b['optimizer_state']:>14}{b['total']:>12}"
            f"{report['step_seconds'][impl]:>10.3f}{report['images_per_second'][impl]:>10.0f}"
        )
    lines.append(
        f"sparse/dense: params+buffers {r['params_buffers_bytes']:.4f}, +AdamW state {r['params_buffers_optimizer_bytes']:.4f}, "
        f"all {r['total_bytes']:.4f}; step time {r['step_time']:.3f} ({report['speedup_sparse_over_dense']:.1f}x faster); "
        f"features agree to {report['features_max_abs_difference_at_init']:.1e}"
    )
    if wide := report.get("wide"):
        lines.append(
            f"wide: m = {wide['width_m']} (C = {wide['channels']}), p = {wide['density_p']:.3g}: sparse holds "
            f"{wide['sparse_bytes']['total'] / mb:.1f} MB, dense would need {wide['dense_bytes_needed']['total'] / 1e9:.0f} GB; "
            f"step {wide['step_seconds_median']:.3f} s, loss {wide['losses'][0]:.3f} -> {wide['losses'][-1]:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per model (default 5)")
    parser.add_argument("--batch-size", type=int, default=128, help="images per step (default 128, as App. C)")
    parser.add_argument("--wide", type=int, default=65536, help="width of the sparse-only run (0: skip)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    report = sw_mlp_ratios(batch_size=args.batch_size, repeats=args.repeats, device=args.device)
    if args.wide:
        report["wide"] = sw_mlp_wide(width=args.wide, batch_size=args.batch_size, device=args.device)
    print(json.dumps(report, indent=2) if args.json else _format(report))
