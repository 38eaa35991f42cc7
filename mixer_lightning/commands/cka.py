"""Minibatch CKA between the hidden features of two trained networks (Hayase & Karakida 2024, Sec. 3.4,
Figure 2(b, c); Nguyen, Raghu & Kornblith 2021, Sec. 3.1, linear kernel, unbiased HSIC).

The features are those just before every skip connection (App. C.1): the input of each token- and
channel-mixing layer of a Mixer (labelled ``block.token`` / ``block.channel``), the input of each block
of an SW-MLP (``block``), in order from the input. Any two checkpoints that take the same images can be
compared: a Mixer with an SW-MLP (Figure 2), two seeds, a normal and an RP Mixer.

The images are the test split (or ``--split val``) of the data config, with its evaluation
pre-processing, shuffled once with ``--seed`` and cut into full minibatches of ``--batch_size`` (the
last partial one is dropped; ``--batches`` keeps fewer). The HSIC sums are torchmetrics states, so a
run on several devices (``--devices 2``) takes whole minibatches on each and gives the same matrix as
one process. ``--strategy ddp`` relaunches the command line, so use it from a shell; ``ddp_spawn``
works anywhere.

Examples:
    mixer cka --ckpt runs/mixer/version_0/checkpoints/best.ckpt --ckpt runs/sw_mlp/version_0/checkpoints/best.ckpt \\
        --config configs/cifar10_fig2_mixer.yaml --plot cka.png
    mixer cka --ckpt A.ckpt --ckpt B.ckpt --config data.yaml --batches 20 --json
    mixer cka --ckpt A.ckpt --ckpt B.ckpt --config data.yaml --accelerator gpu --devices 4 --strategy ddp
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Literal

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.atomic import save_figure
from mixer_lightning.errors import require


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt",
        type=str,
        action="append",
        required=True,
        help="a checkpoint; give it twice (A, then B; the same file twice compares a network with itself)",
    )
    parser.add_argument(
        "--config", type=str, action="append", required=True, help="YAML config(s) whose data: section gives the images"
    )
    parser.add_argument("--split", type=Literal["test", "val"], default="test", help="which split's images")
    parser.add_argument("--batch_size", type=int, default=None, help="minibatch size n (default: data.eval_batch_size)")
    parser.add_argument("--batches", type=int, default=None, help="use at most this many minibatches")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order of the images")
    parser.add_argument("--accelerator", type=str, default="auto", help="Lightning accelerator: auto, cpu, gpu, …")
    parser.add_argument("--devices", type=str, default="1", help="Lightning devices: 1, 2, auto, …")
    parser.add_argument("--strategy", type=str, default="auto", help="Lightning strategy: auto, ddp, ddp_spawn, …")
    parser.add_argument("--num_nodes", type=int, default=1, help="Lightning num_nodes")
    parser.add_argument("--precision", type=str, default=None, help="Lightning precision, e.g. bf16-mixed")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw the heat map (Figure 2(b, c)) to this PNG")


def _devices(text: str) -> int | str:
    return int(text) if str(text).lstrip("-").isdigit() else text


def compute(args: Namespace) -> dict:
    """The CKA matrix of the two checkpoints of ``--ckpt`` (see `compute_matrix`)."""
    require(
        len(args.ckpt) == 2,
        "ckpt",
        f"needs exactly two checkpoints, got {len(args.ckpt)}",
        "give --ckpt A --ckpt B (the same file twice compares a network with itself)",
    )
    return compute_matrix(
        args.ckpt[0],
        args.ckpt[1],
        args.config,
        split=args.split,
        batch_size=args.batch_size,
        batches=args.batches,
        seed=args.seed,
        accelerator=args.accelerator,
        devices=_devices(args.devices),
        strategy=args.strategy,
        num_nodes=args.num_nodes,
        precision=args.precision,
    )


def compute_matrix(
    ckpt_a: str,
    ckpt_b: str,
    configs: list[str],
    split: str = "test",
    batch_size: int | None = None,
    batches: int | None = None,
    seed: int = 0,
    accelerator: str = "auto",
    devices: int | str = 1,
    strategy: str = "auto",
    num_nodes: int = 1,
    precision: str | None = None,
) -> dict:
    """Minibatch CKA between the skip-connection inputs of the networks in two checkpoints, on the
    images of the ``data:`` section of `configs` (also what `mixer sweep report` runs for Fig. 2(a))."""
    from lightning.pytorch import Trainer

    from mixer_lightning.analysis.cka import CKAEvaluation, matrix_from_results
    from mixer_lightning.analysis.features import check_fits_data, datamodule_from_config, skip_input_names
    from mixer_lightning.tasks.loading import load_classifier

    modules, names = [], []
    for path in (ckpt_a, ckpt_b):
        module = load_classifier(path, field="ckpt")
        net = module.net
        layers = skip_input_names(net)
        require(
            bool(layers) and hasattr(net, "forward_skip_inputs"),
            "ckpt",
            f"{path!r} holds a {type(net).__name__}, which exposes no features before skip connections",
            "compare Mixers (MLP-Mixer, S-Mixer, RP) and SW-MLPs",
        )
        modules.append(module)
        names.append(layers)
    datamodule = datamodule_from_config(configs)
    for module in modules:
        check_fits_data(module, datamodule, "config")
    datamodule.setup("test" if split == "test" else "validate")
    dataset = datamodule.test_set if split == "test" else datamodule.val_set
    batch_size = batch_size or datamodule.eval_batch_size
    require(batch_size >= 4, "batch_size", f"the unbiased HSIC needs at least 4 images per minibatch, got {batch_size}")
    require(batches is None or batches > 0, "batches", f"must be positive, got {batches}")
    full = len(dataset) // batch_size
    require(
        full > 0,
        "batch_size",
        f"the {split} split has {len(dataset)} images, fewer than one minibatch",
        "lower --batch_size",
    )
    evaluation = CKAEvaluation(
        modules[0].net,
        modules[1].net,
        len(names[0]),
        len(names[1]),
        dataset,
        batch_size,
        batches,
        seed,
        datamodule.num_workers,
    )
    trainer_args = dict(
        accelerator=accelerator,
        devices=devices,
        strategy=strategy,
        num_nodes=num_nodes,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
    )
    if precision:
        trainer_args["precision"] = precision
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer = Trainer(**trainer_args)
        results = trainer.test(evaluation, verbose=False)[0]
    matrix = matrix_from_results(results, len(names[0]), len(names[1]))
    result = {
        "cka": matrix,
        "layers_a": names[0],
        "layers_b": names[1],
        "ckpt_a": ckpt_a,
        "ckpt_b": ckpt_b,
        "model_a": type(modules[0].net).__name__,
        "model_b": type(modules[1].net).__name__,
        "split": split,
        "batch_size": batch_size,
        "batches": int(results["cka/batches"]),
        "examples": int(results["cka/examples"]),
        "main_process": trainer.is_global_zero,
    }
    if len(names[0]) == len(names[1]):
        result["diagonal_mean"] = sum(matrix[i][i] for i in range(len(matrix))) / len(matrix)  # Figure 2(a)
    for key, module in (("mixing_a", modules[0]), ("mixing_b", modules[1])):
        net = module.net
        if hasattr(net, "mixing_layers"):  # a Mixer: its mixing sizes (its density is (1/S + 1/C)/2)
            result[key] = {"S": int(net.tokens), "C": int(net.channels)}
    return result


def plot(result: dict, path: str) -> None:
    """The CKA matrix as a heat map, layers of A down, layers of B across, from the input (Figure 2(b, c))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.array(result["cka"])
    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(max(5.6, 2.0 + 0.6 * cols), max(4.4, 1.4 + 0.5 * rows)))
    image = ax.imshow(matrix, cmap="magma", vmin=0.0, vmax=1.0, origin="lower")
    if rows * cols <= 400:
        for i in range(rows):
            for j in range(cols):
                ax.text(
                    j,
                    i,
                    f"{matrix[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if matrix[i, j] > 0.6 else "white",
                )
    ax.set_xticks(range(cols), result["layers_b"], rotation=45 if cols > 8 else 0, fontsize=8)
    ax.set_yticks(range(rows), result["layers_a"], fontsize=8)
    ax.set_xlabel(f"B: {result['model_b']} ({Path(result['ckpt_b']).name})")
    ax.set_ylabel(f"A: {result['model_a']} ({Path(result['ckpt_a']).name})")
    ax.set_title(f"Minibatch CKA (unbiased HSIC), {result['examples']} {result['split']} images", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="CKA")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def run(args: Namespace) -> None:
    result = compute(args)
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
