"""Model throughput side by side: ours against timm's equivalent, normal against RP, eager against
compiled. Images per second for a training step (forward, backward, AdamW) and for inference, FLOPs
per image (torch's FLOP counter), peak memory, and on a GPU of known peak the model FLOP utilisation.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from mixer_lightning.benchmarks.timing import compare
from mixer_lightning.errors import require
from mixer_lightning.models.flops import autocast, flops_per_image, peak_flops


def step_fns(
    model: nn.Module, batch_size: int, image_size: int, in_chans: int, num_classes: int, device, precision: str
):
    """A training step (forward, backward, AdamW) and an inference forward on a fixed random batch."""
    x = torch.randn(batch_size, in_chans, image_size, image_size, device=device)
    x = x.bfloat16() if precision == "bf16-true" else x
    y = torch.randint(0, num_classes, (batch_size,), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()

    def infer() -> None:
        with torch.inference_mode(), autocast(device, precision):
            model(x)

    return train, infer


def benchmark(
    models: dict[str, nn.Module],
    *,
    batch_size: int,
    image_size: int,
    in_chans: int = 3,
    num_classes: int = 1000,
    device: str = "cpu",
    precision: str = "32-true",
    repeats: int = 10,
    warmup: int = 3,
    count_flops: bool = True,
) -> dict[str, dict]:
    """Train and inference img/s, FLOPs, peak memory and MFU of each model, measured interleaved."""
    dev = torch.device(device)
    results: dict[str, dict] = {}
    trains, infers = {}, {}
    for name, model in models.items():
        model.to(dev).train()
        if precision == "bf16-true":
            model.bfloat16()
        # FLOPs of eager modules only: the counter would run a compiled module's graph eagerly anyway
        compiled = getattr(model, "_compiled_call_impl", None) is not None
        flops = flops_per_image(model, image_size, in_chans, dev, precision) if count_flops and not compiled else None
        results[name] = {"flops_per_image": flops}
        trains[name], infers[name] = step_fns(model, batch_size, image_size, in_chans, num_classes, dev, precision)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    train_times = compare(trains, repeats=repeats, warmup=warmup, device=dev)
    infer_times = compare(infers, repeats=repeats, warmup=warmup, device=dev)
    cuda = dev.type == "cuda"
    peak = cuda and peak_flops(torch.cuda.get_device_name(dev), precision, torch.backends.cuda.matmul.allow_tf32)
    for name, r in results.items():
        r["train_img_s"], r["infer_img_s"] = batch_size / train_times[name], batch_size / infer_times[name]
        if peak and r["flops_per_image"]:
            r["mfu_train"] = r["train_img_s"] * r["flops_per_image"]["train"] / peak
        if cuda:
            r["peak_memory_gb_all"] = torch.cuda.max_memory_allocated(dev) / 1e9
    return results


# The CIFAR-size Mixer of the standard suite: P = 4, C = 128, S = 64, 8 blocks, with timm's default
# hidden widths (0.5·C, 4·C) so that both libraries build the same network.
CIFAR_MIXER = dict(
    num_classes=10, image_size=32, patch_size=4, channels=128, token_hidden=64, channel_hidden=512, num_blocks=8
)


def timm_equivalent(model: nn.Module) -> nn.Module:
    """timm's `MlpMixer` computing the same network as our plain `MLPMixer` (S = S0, no skip layer, no RP
    permutations): a like-for-like comparison, or a one-line error."""
    import timm.models.mlp_mixer as timm_mixer

    from mixer_lightning.models import MLPMixer

    require(isinstance(model, MLPMixer), "vs", f"timm has no equivalent of a {type(model).__name__}")
    plain = model.tokens == model.stem.num_patches and model.blocks[0].token_mixing.skip is None
    require(
        plain and not any(layer.permuted for layer in model.mixing_layers()),
        "vs",
        "timm's Mixer has S = S0, no skip layer, no RP",
    )
    c = model.channels
    return timm_mixer.MlpMixer(
        num_classes=model.num_classes,
        img_size=model.stem.image_size,
        in_chans=model.stem.proj.in_channels,
        patch_size=model.stem.patch_size,
        embed_dim=c,
        num_blocks=model.num_blocks,
        mlp_ratio=(model.token_hidden / c, model.channel_hidden / c),
    )


def standard_suite(repeats: int = 12, log=print) -> dict:
    """The figures `mixer bench --json` reports (all on the CPU, in this process):

    - mixer_vs_timm_train / _infer: our img/s ÷ timm's, the smaller of Mixer-S/16 at 224 (batch 32) and the
      CIFAR-size Mixer (batch 128);
    - rp_overhead / rp_overhead_compiled: RP training-step time ÷ normal − 1 (CIFAR-size), eager and compiled;
    - compile_speedup: the CIFAR-size training step compiled ÷ eager (img/s);
    - sw_sparse_mem_ratio / sw_sparse_speed_ratio: sparse ÷ dense SW-MLP at Table S.3's CIFAR setting;
    - noise: |1 − twin ÷ ours| for an identical copy of the CIFAR-size Mixer measured beside it (an A/A
      test): ratios closer to 1 than this are not resolved by the run;
    - cifar_fit_vs_step / cifar_fit_speedup: `mixer_lightning.benchmarks.fit.fit_vs_step`.
    """
    import platform

    from mixer_lightning.benchmarks.fit import fit_vs_step
    from mixer_lightning.benchmarks.sparse import sw_mlp_ratios
    from mixer_lightning.models import create_model

    def mixer(**kwargs) -> nn.Module:
        return create_model("mlp_mixer", **CIFAR_MIXER, **kwargs)

    machine = {
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    torch.manual_seed(0)
    s16 = create_model("mixer_s16", num_classes=1000)
    log("Mixer-S/16, batch 32: ours vs timm ...")
    s16_results = benchmark(
        {"ours": s16, "timm": timm_equivalent(s16)},
        batch_size=32,
        image_size=224,
        repeats=max(3, repeats // 3),
        warmup=1,
    )
    del s16
    cifar = {"batch_size": 128, "image_size": 32, "num_classes": 10, "repeats": repeats}
    log("CIFAR-size Mixer, batch 128: ours vs timm vs RP (and an identical twin of ours) ...")
    ours = mixer()
    cifar_results = benchmark(
        {"ours": ours, "twin": copy.deepcopy(ours), "rp": mixer(permute=True), "timm": timm_equivalent(ours)}, **cifar
    )
    log("CIFAR-size Mixer compiled (eager vs compiled, normal vs RP) ...")
    compiled, rp_compiled = mixer(), mixer(permute=True)
    compiled.compile()
    rp_compiled.compile()
    compile_results = benchmark({"eager": mixer(), "compiled": compiled, "rp_compiled": rp_compiled}, **cifar)
    log("SW-MLP at the Table S.3 CIFAR setting: sparse vs dense ...")
    sparse = sw_mlp_ratios(repeats=max(2, repeats // 4))
    log("Fig. 5 S-Mixer on CIFAR-10: end-to-end fit (tensor path, PIL path) vs the training step ...")
    fit = fit_vs_step(repeats=max(5, repeats // 2), log=log)

    def ratio(results: dict, a: str, b: str, key: str = "train_img_s") -> float:
        return results[a][key] / results[b][key]

    return {
        "machine": machine,
        "mixer_vs_timm_train": min(ratio(s16_results, "ours", "timm"), ratio(cifar_results, "ours", "timm")),
        "mixer_vs_timm_infer": min(ratio(r, "ours", "timm", "infer_img_s") for r in (s16_results, cifar_results)),
        "rp_overhead": ratio(cifar_results, "ours", "rp") - 1,
        "rp_overhead_compiled": ratio(compile_results, "compiled", "rp_compiled") - 1,
        "compile_speedup": ratio(compile_results, "compiled", "eager"),
        "noise": abs(1 - ratio(cifar_results, "twin", "ours")),
        "sw_sparse_mem_ratio": sparse["ratios_sparse_over_dense"]["params_buffers_bytes"],
        "sw_sparse_speed_ratio": sparse["speedup_sparse_over_dense"],
        "cifar_fit_vs_step": fit["cifar_fit_vs_step"],
        "cifar_fit_speedup": fit["cifar_fit_speedup"],
        "details": {
            "mixer_s16_224_batch32": s16_results,
            "cifar_mixer_batch128": cifar_results,
            "cifar_mixer_compiled_batch128": compile_results,
            "sw_mlp_table_s3": {k: sparse[k] for k in ("setting", "bytes", "images_per_second")},
            "cifar_fit_fig5": fit,
        },
    }
