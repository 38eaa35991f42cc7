"""Export a trained network for inference: ONNX, torch.export (.pt2) or TorchScript.

Any family is exported (RP Mixers' permutations become plain gathers, an SW-MLP's sparse weights
dense ones; `mixer_lightning.models.export`), with a dynamic batch dimension. The exported file is then run
on a batch (onnxruntime for ONNX, torch.export.load for .pt2, torch.jit.load for TorchScript) and
compared with the eager network: the largest absolute difference of the logits is printed.

Examples:
    mixer export --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt --format onnx --out quickstart.onnx
    mixer export --ckpt_path best.ckpt --format pt2 --out model.pt2 --json
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import require


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument("--format", required=True, help="onnx, pt2 or torchscript")
    parser.add_argument("--out", required=True, help="the file to write (.onnx, .pt2, .pt)")
    parser.add_argument("--batch_size", type=int, default=2, help="batch of the traced example (the batch is dynamic)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: Namespace) -> None:
    from mixer_lightning.models.export import FORMATS, SUFFIXES, export_network
    from mixer_lightning.tasks.loading import load_classifier

    require(args.format in FORMATS, "format", f"unknown format {args.format!r}", f"choose one of {', '.join(FORMATS)}")
    out = Path(args.out)
    require(
        not out.is_dir(), "out", f"{args.out!r} is a directory", f"give a file name, e.g. model{SUFFIXES[args.format]}"
    )
    require(not out.exists() or args.overwrite, "out", f"{args.out!r} exists", "pass --overwrite to replace it")
    require(out.parent.is_dir(), "out", f"no folder {str(out.parent)!r}", "create it first, or give another path")
    module = load_classifier(args.ckpt_path, field="ckpt_path")
    difference = export_network(module.net, args.format, out, module.image_size, module.in_chans, args.batch_size)
    report = {"out": str(out), "format": args.format, "family": type(module).__name__, "max_abs_diff": difference}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Exported {type(module).__name__} to {out} ({args.format}); max |Δ logits| vs eager: {difference:.3g}")
