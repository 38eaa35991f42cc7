"""Benchmark models: training-step and inference throughput (images/s), FLOPs per image, peak GPU
memory and, on a GPU of known peak, the model FLOP utilisation (MFU). Candidates run side by side in
one process (interleaved repetitions, medians): every figure worth quoting is a ratio.

Without a model, the standard suite (`mixer_lightning.benchmarks.models.standard_suite`): ours
against timm, RP against normal, compiled against eager, sparse against dense SW-MLP.

Examples:
    mixer bench --json                                      the standard suite (a few minutes on a CPU)
    mixer bench --model mixer_s16 --vs timm --batch_size 32
    mixer bench --model mixer_b16 --vs timm --device cuda --precision bf16-mixed --batch_size 128
    mixer bench --config configs/cifar10_fig5_s_mixer.yaml --compile --json
    mixer bench --kernels                                   permutation and element-wise kernels, eager vs compiled
    mixer bench --table_s3 [--device cuda]                  Hayase & Karakida Table S.3 at its settings, beside the paper's
    mixer bench --fit --json                                end-to-end `mixer fit` vs the training step, tensor vs PIL data path
    mixer bench --data                                      ImageNet's training pipeline per CPU core: image folder vs shards
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Literal

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveFloat, PositiveInt, restricted_number_type

SUITE_KEYS = "mixer_vs_timm_train mixer_vs_timm_infer rp_overhead rp_overhead_compiled compile_speedup".split()
SUITE_KEYS += "sw_sparse_mem_ratio sw_sparse_speed_ratio cifar_fit_vs_step cifar_fit_speedup noise".split()


def add_arguments(parser: ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", type=str, default=None, help="a registered model (see `mixer models`)")
    add("--config", type=str, default=None, help="or an experiment config: its model and data")
    add("--vs", type=Literal["timm"] | None, default=None, help="'timm': also run timm's equivalent")
    add("--compile", action="store_true", help="also run the model compiled (torch.compile)")
    add("--kernels", action="store_true", help="the RP permutation and element-wise kernels instead")
    add("--table_s3", action="store_true", help="Hayase & Karakida Table S.3 at its settings")
    add("--fit", action="store_true", help="`mixer fit` (tensor, PIL data path) vs the training step")
    add("--data", action="store_true", help="ImageNet's training pipeline per CPU core: image folder vs shards")
    add("--data_images", type=restricted_number_type(None, int, (">=", 16)), default=256, help="--data: JPEGs")
    add("--gpu_images_per_s", type=PositiveFloat | None, default=None, help="--data: GPU img/s to feed (2,030)")
    add("--fit_warmup", type=PositiveInt, default=8, help="--fit: training batches before timing")
    add("--fit_batches", type=PositiveInt, default=32, help="--fit: timed training batches per fit")
    add("--data_root", type=str, default=None, help="--fit: the CIFAR-10 folder (default: $MIXER_DATA_ROOT/cifar10)")
    add("--batch_size", type=PositiveInt, default=32)
    add("--image_size", type=PositiveInt | None, default=None, help="default: the model's / data's")
    add("--num_classes", type=PositiveInt, default=1000)
    add("--device", type=str, default="cpu", help="cpu or cuda")
    add("--precision", type=Literal["32-true", "bf16-mixed", "bf16-true"], default="32-true")
    add("--repeats", type=PositiveInt | None, default=None, help="timed steps per candidate")
    add("--json", action="store_true", help="print JSON")


def _model_from_config(path: str):
    """The network of an experiment config, built for its data (num_classes, image_size, in_chans)."""
    from jsonargparse import ArgumentParser as Parser

    from mixer_lightning.analysis.features import datamodule_from_config
    from mixer_lightning.safety.config_files import load_configs
    from mixer_lightning.tasks import ClassifierModule

    data = datamodule_from_config([path])
    model = {**(load_configs([path]).get("model") or {}), "init_from": None}
    model.update(num_classes=data.num_classes, image_size=data.image_size, in_chans=data.in_chans)
    parser = Parser(exit_on_error=False)
    parser.add_class_arguments(ClassifierModule, "model")
    module = parser.instantiate_classes(parser.parse_object({"model": model})).model
    return module.net, data.image_size, data.in_chans, data.num_classes


def _print(report: dict, args: Namespace, text) -> None:
    print(json.dumps(report, indent=2) if args.json else text(report))


def run(args: Namespace) -> None:
    from mixer_lightning.errors import require

    modes = [f"--{mode}" for mode in ("data", "fit", "kernels", "table_s3") if args[mode]]
    require(len(modes) <= 1, "model", f"{' and '.join(modes)} are different measurements", "give one of them")
    require(not (modes and args.model), "model", f"{''.join(modes)} measures no --model", "drop --model")
    log = (lambda *a, **k: print(*a, **k, file=sys.stderr)) if args.json else print
    repeats = {"repeats": args.repeats} if args.repeats else {}
    if args.data:
        from mixer_lightning.benchmarks.pipeline import MIXER_B16_H100_IMG_S, data_pipeline, format_report

        gpu = args.gpu_images_per_s or MIXER_B16_H100_IMG_S
        report = data_pipeline(args.data_images, args.repeats or 9, gpu_images_per_s=gpu, log=log)
        return _print(report, args, format_report)
    if args.fit:
        from mixer_lightning.benchmarks.fit import FIG5_CONFIG, fit_vs_step

        setting = {"warmup": args.fit_warmup, "batches": args.fit_batches, "precision": args.precision}
        report = fit_vs_step(
            args.config or FIG5_CONFIG, args.data_root, args.repeats or 5, device=args.device, log=log, **setting
        )
        return _print(report, args, fit_text)
    if args.kernels:
        from mixer_lightning.benchmarks.kernels import format_report, kernel_suite

        return _print(kernel_suite(**repeats), args, format_report)
    if args.table_s3:
        from mixer_lightning.benchmarks.table_s3 import format_table_s3, table_s3

        return _print(table_s3(device=args.device, **repeats), args, format_table_s3)
    from mixer_lightning.benchmarks.models import benchmark, standard_suite, timm_equivalent

    if args.model is None and args.config is None:
        report = standard_suite(**repeats, log=(lambda *a, **k: None) if args.json else print)
        return _print(report, args, lambda r: "\n".join(f"{key:<24} {r[key]:8.3f}" for key in SUITE_KEYS))
    if args.config is not None:
        net, image_size, in_chans, num_classes = _model_from_config(args.config)
    else:
        from mixer_lightning.models import create_model

        size = {"image_size": args.image_size} if args.image_size else {}
        net = create_model(args.model, num_classes=args.num_classes, **size)
        image_size, in_chans, num_classes = net.stem.image_size, net.stem.proj.in_channels, args.num_classes
    candidates = {"ours": net}
    if args.vs == "timm":
        candidates["timm"] = timm_equivalent(net)
    if args.compile:
        candidates["ours_compiled"] = copy.deepcopy(net)
        candidates["ours_compiled"].compile()
    if len(candidates) > 1:  # a comparison: an identical copy of ours beside it says how far a ratio is noise
        candidates["twin"] = copy.deepcopy(net)
    shape = {"batch_size": args.batch_size, "image_size": image_size, "in_chans": in_chans, "num_classes": num_classes}
    results = benchmark(candidates, **shape, device=args.device, precision=args.precision, repeats=args.repeats or 10)
    noise = twin_noise(results)
    if args.json:
        print(json.dumps({**results, **({"noise": noise} if noise else {})}, indent=2))
        return
    print(f"{'candidate':<16} {'train img/s':>12} {'infer img/s':>12} {'GFLOP/img (train)':>18} {'MFU':>6}")
    for name, r in results.items():
        flops = f"{r['flops_per_image']['train'] / 1e9:.2f}" if r["flops_per_image"] else "-"
        mfu = f"{r['mfu_train']:.1%}" if "mfu_train" in r else "-"
        label = "ours (twin)" if name == "twin" else name
        print(f"{label:<16} {r['train_img_s']:>12.1f} {r['infer_img_s']:>12.1f} {flops:>18} {mfu:>6}")
    for line in ratio_lines(results, noise):
        print(line)


def fit_text(report: dict) -> str:
    rates, waiting, spread = report["img_per_s"], report["waiting_share"], report["rounds_spread"]
    lines = [
        f"fit, tensor path   {rates['fit_tensor']:9.1f} img/s   (waiting for batches {waiting['tensor']:.1%})",
        f"fit, PIL path      {rates['fit_pil']:9.1f} img/s   (waiting for batches {waiting['pil']:.1%})",
        f"training step      {rates['train_step']:9.1f} img/s",
    ]
    for key in ("cifar_fit_vs_step", "cifar_fit_speedup", "pil_fit_vs_step"):
        rounds = report["setting"]["repeats"]
        lines.append(
            f"{key:<18} {report[key]:9.3f}   (median of {rounds} rounds: {spread[key][0]:.3f}–{spread[key][1]:.3f})"
        )
    return "\n".join([*lines, "noise: the rounds' range; a ratio whose range includes 1 is not resolved"])


def twin_noise(results: dict[str, dict]) -> dict[str, float] | None:
    """|1 − twin ÷ ours| for training and inference img/s: how far two identical networks measured side
    by side differ on this machine, now (None without a twin)."""
    if "twin" not in results:
        return None
    return {
        key: abs(1 - results["twin"][f"{key}_img_s"] / results["ours"][f"{key}_img_s"]) for key in ("train", "infer")
    }


def ratio_lines(results: dict[str, dict], noise: dict[str, float] | None) -> list[str]:
    """ "ours / timm: train 1.234, inference 0.987 (within noise)" per compared candidate, and the noise row
    that a single run is judged by: a ratio whose distance to 1 is below it is not resolved."""
    lines = []
    for name in results:
        if name in ("ours", "twin"):
            continue
        parts = []
        for key, word in (("train", "train"), ("infer", "inference")):
            ratio = results["ours"][f"{key}_img_s"] / results[name][f"{key}_img_s"]
            within = noise is not None and abs(1 - ratio) <= noise[key]
            parts.append(f"{word} {ratio:.3f}" + (" (within noise)" if within else ""))
        lines.append(f"ours / {name}: " + ", ".join(parts))
    if noise is not None:
        lines.append(
            f"noise |1 − twin / ours| (an identical copy of ours, measured beside it): train {noise['train']:.3f}, "
            f"inference {noise['infer']:.3f}; a ratio closer to 1 than this is not resolved"
        )
    return lines
