"""Linear few-shot accuracy of a trained network's frozen features (Tolstikhin et al. 2021, Sec. 3: the
"ℓ2-regularized linear regression" from pre-logit features to the labels; the ViT/BiT protocol of
Google's big_vision ``fewshot_lsr``).

For each seed, ``--shots`` k training images per class are drawn from the training split of the data
config (all of it: the validation split of training is ignored), their pre-logit features (the pooled
features before the head; an SW-MLP's m features) are standardised, a bias feature is appended, and a
ridge regression to {−1, +1} one-hot targets is solved in closed form; the accuracy is measured on the
whole test split. Images get the evaluation pre-processing (no augmentation).

The ridge penalty λ (``--l2``): ``auto`` (default) picks it from big_vision's grid 2⁻¹⁰ … 2¹⁹ by the
accuracy on ``--holdout`` further training images per class of the same seed (never the test split);
a number fixes it (big_vision's fixed choice is ``--l2 1024``); a comma-separated list is a grid of
your own, selected the same way.

Examples:
    mixer fewshot --ckpt runs/mixer/version_0/checkpoints/best.ckpt --config configs/cifar10_fig2_mixer.yaml --shots 5
    mixer fewshot --ckpt best.ckpt --config data.yaml --shots 1,5,10,25 --seeds 0,1,2 --json
    mixer fewshot --ckpt best.ckpt --config data.yaml --shots 10 --l2 1024
"""

from __future__ import annotations

import json
import math

import torch
from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.commands import lists
from mixer_lightning.errors import ConfigError, require


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt", type=str, required=True, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument(
        "--config", type=str, action="append", required=True, help="YAML config(s) whose data: section gives the images"
    )
    parser.add_argument("--shots", type=str, default="5", help="images per class, or a comma-separated list")
    parser.add_argument("--seeds", type=str, default="0,1,2", help="comma-separated seeds of the draws (big_vision: 3)")
    parser.add_argument("--l2", type=str, default="auto", help="ridge λ: auto, a number (e.g. 1024) or a list")
    parser.add_argument("--holdout", type=int, default=10, help="training images per class held out to choose λ")
    parser.add_argument(
        "--batch_size", type=int, default=None, help="feature batch size (default: data.eval_batch_size)"
    )
    parser.add_argument("--device", type=str, default="auto", help="auto (CUDA when available), cpu, cuda, cuda:1, …")
    parser.add_argument("--json", action="store_true", help="print JSON")


def parse_l2(text: str) -> float | list[float] | str:
    """``auto``, one λ, or a comma-separated list (selected on held-out training images); powers as the
    paper writes them (``2**10``, ``2^10``)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    values = lists.reals(
        str(text).replace("^", "**"),
        "l2",
        lambda v: v > 0 and math.isfinite(v),
        "positive numbers",
        example="1024,2**10",
    )
    return values[0] if len(values) == 1 else values


def _device(text: str) -> torch.device:
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise ConfigError("device", f"unknown device {text!r}", "give auto, cpu or cuda") from None
    require(device.type != "cuda" or torch.cuda.is_available(), "device", "CUDA is not available", "use --device cpu")
    return device


def compute(args: Namespace) -> dict:
    from mixer_lightning.analysis import fewshot
    from mixer_lightning.analysis.features import check_fits_data, datamodule_from_config
    from mixer_lightning.data.pil_path import TransformedDataset
    from mixer_lightning.tasks.loading import load_classifier

    shots_list = lists.integers(args.shots, "shots", 1, example="1,5,10")
    seeds = lists.seeds(args.seeds)
    l2 = parse_l2(args.l2)
    require(
        args.holdout >= 1 or not (l2 == "auto" or isinstance(l2, list)),
        "holdout",
        f"choosing λ needs held-out images, got --holdout {args.holdout}",
        "give --holdout >= 1 or one --l2",
    )
    device = _device(args.device)
    module = load_classifier(args.ckpt, field="ckpt")
    net = module.net
    require(
        hasattr(net, "forward_features") and hasattr(net, "forward_head"),
        "ckpt",
        f"a {type(net).__name__} has no forward_features/forward_head",
        "use a Mixer or SW-MLP checkpoint",
    )
    datamodule = datamodule_from_config(args.config)
    check_fits_data(module, datamodule, "config")
    batch_size = args.batch_size or datamodule.eval_batch_size
    require(batch_size > 0, "batch_size", f"must be positive, got {batch_size}")
    num_classes = datamodule.num_classes
    transform = datamodule.transform(train=False)
    train_base = datamodule.source.load("train")
    train_labels = fewshot.dataset_labels(train_base)
    select = l2 == "auto" or isinstance(l2, list)
    needed: set[int] = set()
    for shots in shots_list:
        for seed in seeds:
            chosen, held = fewshot.draw_shots(train_labels, num_classes, shots, args.holdout if select else 0, seed)
            needed.update(chosen, held)
    order = sorted(needed)  # only the drawn training images are run through the network
    features, _ = fewshot.extract_features(
        net, TransformedDataset(train_base, transform, order), batch_size, device, datamodule.num_workers
    )
    train_features = dict(zip(order, features, strict=True))
    datamodule.setup("test")
    test_features, test_labels = fewshot.extract_features(
        net, datamodule.test_set, batch_size, device, datamodule.num_workers
    )
    results = [
        fewshot.evaluate(
            train_features, train_labels, test_features, test_labels, num_classes, shots, seeds, l2, args.holdout
        )
        for shots in shots_list
    ]
    return {
        "ckpt": args.ckpt,
        "model": type(net).__name__,
        "features": int(test_features.shape[1]),
        "classes": num_classes,
        "train_images": len(train_labels),
        "test_images": len(test_labels),
        "seeds": seeds,
        "results": results,
    }


def _l2_text(value: float) -> str:
    exponent = math.log2(value)
    return f"2^{exponent:.0f}" if exponent.is_integer() else f"{value:g}"


def run(args: Namespace) -> None:
    result = compute(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['model']} ({result['ckpt']}): {result['features']} pre-logit features; "
        f"{result['classes']} classes, {result['train_images']} training and {result['test_images']} test images"
    )
    for r in result["results"]:
        chosen = ", ".join(_l2_text(run_["l2"]) for run_ in r["runs"])
        how = (
            f"λ chosen on {r['holdout_per_class']} held-out training images per class: {chosen}"
            if r["holdout_per_class"]
            else f"λ = {chosen.split(', ')[0]}"
        )
        print(
            f"{r['shots']:>3}-shot linear accuracy: {r['accuracy']:.4f} ± {r['accuracy_std']:.4f} "
            f"over seeds {','.join(str(s) for s in result['seeds'])} ({how})"
        )
