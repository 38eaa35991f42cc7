"""Table S.3 of Hayase & Karakida 2024 at its stated settings (``mixer bench --table_s3``): memory,
forward FLOPs and seconds per CIFAR epoch of the dense SW-MLP, the RP Mixer and the Mixer (and our
sparse SW-MLP), measured side by side beside the paper's figures (`table_s3`)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixer_lightning.benchmarks.sparse import model_bytes, random_batch, tensor_bytes
from mixer_lightning.benchmarks.timing import compare
from mixer_lightning.models.layers import hidden_width
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.models.sw_mlp import SWMLP
from mixer_lightning.width import density as mixer_density

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
    (I_C⊗W1, I_C⊗W2, W3ᵀ⊗I_S, W4ᵀ⊗I_S) by M ⊙ A (App. C.1): 2L MLP blocks of width m = S·C, hidden γm, each
    layer with the Mixer's connections, p = (1/S + 1/C)/2."""
    base = {k: setting[k] for k in ("num_classes", "image_size", "in_chans", "patch_size", "num_blocks")}
    if name in ("mixer", "rp_mixer"):
        arch = {k: setting[k] for k in ("tokens", "channels", "gamma")}
        return MLPMixer(**base, **arch, permute=name == "rp_mixer", norm_eps=1e-5)
    assert setting["tokens"] == (setting["image_size"] // setting["patch_size"]) ** 2, "the SW-MLP takes S = S0"
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
    flops = 2 * (entries + s0 * c0 * c + m * classes)
    sizes = {
        "bytes": 4 * params + entries,
        "paper_bytes": 8 * entries,
        "flops": flops,
        "train_bytes": 16 * params + entries,
    }
    return {"width_m": m, "entries": entries, "params": params, **sizes}


def forward_flops(model: nn.Module, setting: dict, device: str | None = None) -> int:
    """Forward FLOPs per image (torch's FlopCounterMode: 2 per multiply-add of every matmul)."""
    from torch.utils.flop_counter import FlopCounterMode

    device = device or next(model.parameters()).device
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


def _measured_cifar(
    setting: dict, batch_size: int, repeats: int, warmup: int, device: str, train_images: int, seed: int
) -> dict:
    """The CIFAR rows: the models built, their bytes and FLOPs measured, their AdamW steps timed interleaved
    (`compare`); an epoch is ⌈train_images / batch⌉ steps of that median (compute only)."""
    models = {}
    for name in TABLE_S3_MODELS:
        torch.manual_seed(seed)
        models[name] = table_s3_model(name, setting).to(device)
    x, y = (t.to(device) for t in random_batch(batch_size, setting, setting["num_classes"], seed))
    steps, optimizers = {}, {}
    for name, model in models.items():
        steps[name], optimizers[name] = _adamw_step(model, x, y)
    peaks = {}
    for name in models if torch.device(device).type == "cuda" else ():  # each alone, for its peak
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        steps[name]()
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated()
    seconds = compare(steps, repeats=repeats, warmup=warmup, device=device)
    per_epoch = math.ceil(train_images / batch_size)
    rows = {}
    for name, model in models.items():
        held = model_bytes(model, optimizers[name])
        flops = sw_mlp_sparse_flops(model, setting) if name == "sw_mlp_sparse" else forward_flops(model, setting)
        rows[name] = {"params_bytes": held["params_buffers"], "train_bytes": peaks.get(name, held["total"])}
        rows[name] |= {"flops": flops, "step_seconds": seconds[name], "epoch_seconds": seconds[name] * per_epoch}
    arithmetic = sw_mlp_dense_arithmetic(setting)
    rows["sw_mlp_dense"]["paper_bytes"] = arithmetic["paper_bytes"]
    dense = models["sw_mlp_dense"]
    result = {"rows": rows, "steps_per_epoch": per_epoch, "sw_mlp_dense_arithmetic": arithmetic}
    return result | {"width_m": dense.width, "density_p": dense.density}


def _imagenet(setting: dict) -> dict:
    """The ImageNet rows: the Mixers on the meta device (bytes and FLOPs exact, nothing allocated), the dense
    SW-MLP (2.9·10^12 weights) by arithmetic."""
    arithmetic = sw_mlp_dense_arithmetic(setting)
    rows = {"sw_mlp_dense": {"params_bytes": arithmetic["bytes"], "train_bytes": arithmetic["train_bytes"]}}
    rows["sw_mlp_dense"] |= {"flops": arithmetic["flops"], "paper_bytes": arithmetic["paper_bytes"]}
    for name in ("rp_mixer", "mixer"):
        with torch.device("meta"):
            model = table_s3_model(name, setting)
        params, buffers = tensor_bytes(model.parameters()), tensor_bytes(model.buffers())
        rows[name] = {"params_bytes": params + buffers, "train_bytes": 4 * params + buffers}
        rows[name]["flops"] = forward_flops(model, setting)
    return {"rows": rows, "sw_mlp_dense_arithmetic": arithmetic}


def table_s3(
    settings=None, batch_size=128, repeats=3, warmup=1, device="cpu", train_images=CIFAR_TRAIN_IMAGES, seed=0
) -> dict[str, Any]:
    """Table S.3 side by side: the CIFAR setting measured (`_measured_cifar`), the ImageNet one computed
    (`_imagenet`), each figure beside the paper's with the ratio ours/paper, and the ratios between the
    models beside the paper's. ``params_bytes``: parameters + buffers as held (masks, RP permutation indices);
    ``train_bytes``: that + gradients + AdamW state (on a GPU the peak allocated during a step). The paper
    does not define its memory; its SW-MLP figures are 8 bytes per dense weight entry at m = 4096 for CIFAR
    (S = C = 64, not the stated C = 48: 3.22 GB = 8·4L·γ·4096², 805M = 2·4L·γ·4096²) and at m = 150,528 for
    ImageNet (23.2 TB, 5.80 TFLOPs)."""
    settings = {**TABLE_S3_SETTINGS, **(settings or {})}
    report: dict[str, Any] = {"settings": settings, "paper": PAPER_TABLE_S3, "device": device, "batch_size": batch_size}
    report |= {"repeats": repeats, "threads": torch.get_num_threads()}
    report["cifar"] = _measured_cifar(settings["cifar"], batch_size, repeats, warmup, device, train_images, seed)
    report["imagenet"] = _imagenet(settings["imagenet"])
    measures = {"memory": "params_bytes", "flops": "flops", "epoch_seconds": "epoch_seconds"}
    for key in ("cifar", "imagenet"):
        rows, paper = report[key]["rows"], PAPER_TABLE_S3[key]
        for name, row in rows.items():
            ours = {"memory": row.get("paper_bytes") or row["params_bytes"], "flops": row["flops"]}
            ours["epoch_seconds"] = row.get("epoch_seconds")
            known = {m: theirs for m, theirs in paper.get(name, {}).items() if ours[m] is not None}
            row["vs_paper"] = {m: ours[m] / known[m] if m in known else None for m in measures}
        ratios = {}
        for a, b in (("sw_mlp_dense", "mixer"), ("rp_mixer", "mixer")):
            for measure, ours_key in measures.items():
                if ours_key in rows[a] and ours_key in rows[b] and measure in paper[a]:
                    ours, theirs = rows[a][ours_key] / rows[b][ours_key], paper[a][measure] / paper[b][measure]
                    ratios[f"{a}/{b} {measure}"] = {"ours": ours, "paper": theirs}
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
    names = ("SW-MLP (dense)", "RP MLP-Mixer", "MLP-Mixer", "SW-MLP (sparse, ours)")
    names = dict(zip(TABLE_S3_MODELS, names, strict=True))
    lines = []
    for key, title in (("cifar", "CIFAR"), ("imagenet", "ImageNet")):
        s, block = report["settings"][key], report[key]
        how = "; Mixers on the meta device, dense SW-MLP by arithmetic"
        if key == "cifar":
            how = f"; batch {report['batch_size']}, AdamW, float32, {report['device']} ({report['threads']} threads), "
            how += f"median of {report['repeats']} interleaved steps × {block['steps_per_epoch']} steps/epoch"
        size = f"S = {s['tokens']}, C = {s['channels']}, L = {s['num_blocks']}, γ = {s['gamma']:g}"
        lines.append(f"Table S.3, {title}: {size} (P = {s['patch_size']}, {s['image_size']} px){how}")
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
