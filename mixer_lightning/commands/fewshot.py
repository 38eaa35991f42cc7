"""Linear few-shot accuracy of a trained network's frozen pre-logit features (Tolstikhin et al. 2021,
Sec. 3: "ℓ2-regularized linear regression"; the protocol of big_vision's ``fewshot_lsr``).

For each seed, ``--shots`` k training images per class (evaluation pre-processing) give standardised
features plus a bias feature, and a closed-form ridge regression to {−1, +1} one-hot targets; the
accuracy is on the whole test split. ``--l2``: ``auto`` picks λ from big_vision's grid 2⁻¹⁰ … 2¹⁹ by the
accuracy on ``--holdout`` further training images per class (never the test split); a number fixes it
(big_vision's: 1024); a comma-separated list is a grid of your own.

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
from jsonargparse.typing import NonNegativeInt, PositiveInt

from mixer_lightning.commands import lists


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt", type=str, required=True, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument("--config", type=str, action="append", required=True, help="config(s) whose data: gives images")
    parser.add_argument("--shots", type=str, default="5", help="images per class, or a comma-separated list")
    parser.add_argument("--seeds", type=str, default="0,1,2", help="comma-separated seeds of the draws (big_vision: 3)")
    parser.add_argument("--l2", type=str, default="auto", help="ridge λ: auto, a number (e.g. 1024) or a list")
    parser.add_argument("--holdout", type=NonNegativeInt, default=10, help="training images per class to choose λ on")
    parser.add_argument("--batch_size", type=PositiveInt | None, default=None, help="default: data.eval_batch_size")
    parser.add_argument("--device", type=str, default="auto", help="auto (CUDA when available), cpu, cuda, cuda:1, …")
    parser.add_argument("--json", action="store_true", help="print JSON")


def parse_l2(text: str) -> float | list[float] | str:
    """``auto``, one λ, or a comma-separated list (selected on held-out training images); powers as the
    paper writes them (``2**10``, ``2^10``)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    positive = (lambda v: v > 0 and math.isfinite(v)), "positive numbers"
    values = lists.reals(str(text).replace("^", "**"), "l2", *positive, example="1024,2**10")
    return values[0] if len(values) == 1 else values


def compute(args: Namespace) -> dict:
    from mixer_lightning.analysis import fewshot
    from mixer_lightning.analysis.features import check_fits_data, datamodule_from_config
    from mixer_lightning.data.pil_path import TransformedDataset
    from mixer_lightning.tasks.loading import load_classifier

    shots_list = lists.integers(args.shots, "shots", 1, example="1,5,10")
    seeds = lists.seeds(args.seeds)
    l2 = parse_l2(args.l2)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    module = load_classifier(args.ckpt, field="ckpt")
    datamodule = datamodule_from_config(args.config)
    check_fits_data(module, datamodule, "config")
    batch_size, workers = args.batch_size or datamodule.eval_batch_size, datamodule.num_workers
    train_base = datamodule.source.load("train")
    train_labels = fewshot.dataset_labels(train_base)
    holdout = args.holdout if l2 == "auto" or isinstance(l2, list) else 0  # held-out images choose λ
    needed: set[int] = set()
    for shots in shots_list:
        for seed in seeds:
            chosen, held = fewshot.draw_shots(train_labels, datamodule.num_classes, shots, holdout, seed)
            needed.update(chosen, held)
    order = sorted(needed)  # only the drawn training images are run through the network
    train_set = TransformedDataset(train_base, datamodule.transform(train=False), order)
    features, _ = fewshot.extract_features(module.net, train_set, batch_size, device, workers)
    datamodule.setup("test")
    test_features, test_labels = fewshot.extract_features(module.net, datamodule.test_set, batch_size, device, workers)
    train = dict(zip(order, features, strict=True)), train_labels
    test = test_features, test_labels
    results = [fewshot.evaluate(*train, *test, datamodule.num_classes, k, seeds, l2, args.holdout) for k in shots_list]
    return {
        "ckpt": args.ckpt,
        "model": type(module.net).__name__,
        "features": int(test_features.shape[1]),
        "classes": datamodule.num_classes,
        "train_images": len(train_labels),
        "test_images": len(test_labels),
        "seeds": seeds,
        "results": results,
    }


def run(args: Namespace) -> None:
    result = compute(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['model']} ({result['ckpt']}): {result['features']} pre-logit features; {result['classes']} "
          f"classes, {result['train_images']} training and {result['test_images']} test images")  # fmt: skip
    seeds = ",".join(map(str, result["seeds"]))
    for r in result["results"]:
        l2s = [run["l2"] for run in r["runs"]]
        chosen = ", ".join(f"2^{math.log2(v):.0f}" if math.log2(v).is_integer() else f"{v:g}" for v in l2s)
        how = f"λ chosen on {r['holdout_per_class']} held-out training images per class: {chosen}"
        how = how if r["holdout_per_class"] else f"λ = {chosen.split(', ')[0]}"
        accuracy = f"{r['accuracy']:.4f} ± {r['accuracy_std']:.4f}"
        print(f"{r['shots']:>3}-shot linear accuracy: {accuracy} over seeds {seeds} ({how})")
