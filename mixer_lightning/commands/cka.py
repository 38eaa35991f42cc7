"""Minibatch CKA between the hidden features of two trained networks (Hayase & Karakida 2024, Sec. 3.4,
Figure 2(b, c); Nguyen, Raghu & Kornblith 2021, Sec. 3.1: linear kernel, unbiased HSIC).

The features are those before every skip connection (App. C.1): the input of each mixing layer of a
Mixer (``block.token`` / ``block.channel``), of each block of an SW-MLP (``block``). The images are the
test split (or ``--split val``) of the data config (default: the first checkpoint's run config; ``--data.root``
where the data lies now), shuffled once with ``--seed`` and cut into full minibatches of ``--batch_size``. The HSIC sums are torchmetrics states: several devices (``--devices
2``) give the one-process matrix. ``--strategy ddp`` relaunches the command line (use it from a shell).

Examples:
    mixer cka --ckpt runs/mixer/version_0/checkpoints/best.ckpt --ckpt runs/sw_mlp/version_0/checkpoints/best.ckpt \\
        --config configs/cifar10_fig2_mixer.yaml --plot cka.png
    mixer cka --ckpt A.ckpt --ckpt B.ckpt --config data.yaml --batches 20 --json
    mixer cka --ckpt runs/a/version_0/checkpoints/last.ckpt --ckpt B.ckpt --data.root /scratch/cifar10 --json
    mixer cka --ckpt A.ckpt --ckpt B.ckpt --config data.yaml --accelerator gpu --devices 4 --strategy ddp
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Literal

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveInt, restricted_number_type

from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt", type=str, action="append", required=True, help="a checkpoint; give it twice (A, B)")
    parser.add_argument(
        "--config",
        type=str,
        action="append",
        default=None,
        help="config(s) whose data: gives images (default: A's run's)",
    )
    parser.add_argument(
        "--data.root", type=str | None, default=None, help="where the data lies (the config's data.root)"
    )
    parser.add_argument("--split", type=Literal["test", "val"], default="test", help="which split's images")
    parser.add_argument(
        "--batch_size",  # the unbiased HSIC needs n >= 4
        type=restricted_number_type(None, int, (">=", 4)) | None,
        default=None,
        help="minibatch size n (default: data.eval_batch_size)",
    )
    parser.add_argument("--batches", type=PositiveInt | None, default=None, help="use at most this many minibatches")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order of the images")
    parser.add_argument("--accelerator", type=str, default="auto", help="Lightning accelerator: auto, cpu, gpu, …")
    parser.add_argument("--devices", type=int | str, default=1, help="Lightning devices: 1, 2, auto, …")
    parser.add_argument("--strategy", type=str, default="auto", help="Lightning strategy: auto, ddp, ddp_spawn, …")
    parser.add_argument("--num_nodes", type=PositiveInt, default=1, help="Lightning num_nodes")
    parser.add_argument("--precision", type=str, default=None, help="Lightning precision, e.g. bf16-mixed")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw the heat map (Figure 2(b, c)) to this PNG")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")


def compute(args: Namespace) -> dict:
    """The CKA matrix of the two checkpoints of ``--ckpt`` (`mixer_lightning.analysis.cka.compute_matrix`)."""
    from mixer_lightning.analysis.cka import compute_matrix

    require(len(args.ckpt) == 2, "ckpt", f"needs two checkpoints, got {len(args.ckpt)}", "give --ckpt A --ckpt B")
    configs = args.config or [str(Path(args.ckpt[0]).parent.parent / "config.yaml")]  # <run>/checkpoints/A.ckpt
    fix = "give --config with the data: section (or A's run directory's config.yaml)"
    require(Path(configs[0]).is_file(), "config", f"no --config, and no run config {configs[0]!r} beside A", fix)
    lightning_args = {key: args[key] for key in ("accelerator", "devices", "strategy", "num_nodes", "precision")}
    data = {"root": args.data.root} if args.data.root else None
    return compute_matrix(
        *args.ckpt, configs, args.split, args.batch_size, args.batches, args.seed, data=data, **lightning_args
    )


def checkpoint_labels(result: dict) -> tuple[str, str]:
    """Axis names of the two networks that tell them apart: the family, its mixing sizes and the
    checkpoint's path below the folder the two share (``reference/seed0/last.ckpt``), not both
    "SMixer (last.ckpt)"."""
    import os

    paths = [os.path.abspath(result["ckpt_a"]), os.path.abspath(result["ckpt_b"])]
    common = os.path.dirname(os.path.commonpath(paths)) if paths[0] == paths[1] else os.path.commonpath(paths)
    labels = []
    for key, path in zip("ab", paths, strict=True):
        where = "/".join(part for part in Path(os.path.relpath(path, common)).parts if part != "checkpoints")
        mixing = result.get(f"mixing_{key}")
        sizes = f", S = {mixing['S']}, C = {mixing['C']}" if mixing else ""
        labels.append(f"{key.upper()}: {result[f'model_{key}']}{sizes}\n({where})")
    if paths[0] == paths[1]:
        labels = [f"{label}, the same checkpoint" for label in labels]
    return labels[0], labels[1]


def plot(result: dict, path: str) -> None:
    """The CKA matrix as a heat map, layers of A down, layers of B across, from the input (Figure 2(b, c))."""
    import numpy as np

    plt = pyplot()
    matrix = np.array(result["cka"])
    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(max(5.6, 2.0 + 0.6 * cols), max(4.4, 1.4 + 0.5 * rows)))
    image = ax.imshow(matrix, cmap="magma", vmin=0.0, vmax=1.0, origin="lower")
    if rows * cols <= 400:
        for (i, j), value in np.ndenumerate(matrix):
            color = "black" if value > 0.6 else "white"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(cols), result["layers_b"], rotation=45 if cols > 8 else 0, fontsize=8)
    ax.set_yticks(range(rows), result["layers_a"], fontsize=8)
    label_a, label_b = checkpoint_labels(result)
    ax.set_xlabel(label_b, fontsize=9)
    ax.set_ylabel(label_a, fontsize=9)
    images = f"{result['examples']} {result['split']} images"
    ax.set_title(f"Minibatch CKA (unbiased HSIC), {images}\nlayers from the input", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="CKA (1: same up to rotation, scale)")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def run(args: Namespace) -> None:
    from mixer_lightning.commands.quiet import quiet_libraries

    with warnings.catch_warnings():  # the console of `mixer fit`: no GPU/TPU lines, tips, DDP banners
        quiet_libraries()
        result = compute(args)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # Lightning ends NCCL's only; a gloo one left alive
        dist.destroy_process_group()  # aborts the interpreter's exit now and then (pytorch#65513)
    if not result.pop("main_process"):
        return  # `--strategy ddp` runs this command once per device: one of them reports
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"CKA of {result['model_a']} ({result['ckpt_a']}) against {result['model_b']} ({result['ckpt_b']}): "
        f"{result['batches']} minibatches of {result['batch_size']} {result['split']} images"
    )
    width = max(len(name) for name in result["layers_a"])
    print(" " * width + " " + " ".join(f"{name:>8}" for name in result["layers_b"]))
    for name, row in zip(result["layers_a"], result["cka"], strict=True):
        print(f"{name:>{width}} " + " ".join(f"{value:>8.4f}" for value in row))
    if "diagonal_mean" in result:
        print(f"mean of the diagonal: {result['diagonal_mean']:.4f}")
    if args.plot:
        print(f"Heat map written to {args.plot}")
