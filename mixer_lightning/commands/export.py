"""Export a trained network for inference: ONNX, torch.export (.pt2) or TorchScript.

Any family is exported (RP Mixers' permutations become plain gathers, an SW-MLP's sparse weights
dense ones; `mixer_lightning.models.export`), with a dynamic batch dimension. The exported file is then run
on a batch (onnxruntime for ONNX, torch.export.load for .pt2, torch.jit.load for TorchScript) and
compared with the eager network: the largest absolute difference of the logits is printed.

The file carries what a runtime needs to pre-process images as ``mixer predict`` does: the
checkpoint's data facts, its network, this package's version and the checkpoint's SHA-256 (an ONNX
model's ``metadata_props``, input ``image``, output ``logits``; ``mixer.json`` among a TorchScript or
.pt2 file's extra files).

Examples:
    mixer export --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt --format onnx --out quickstart.onnx
    mixer export --ckpt_path best.ckpt --format pt2 --out model.pt2 --json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveInt


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument("--format", type=Literal["onnx", "pt2", "torchscript"], required=True, help="the file's format")
    parser.add_argument("--out", required=True, help="the file to write (.onnx, .pt2, .pt)")
    parser.add_argument("--batch_size", type=PositiveInt, default=2, help="batch of the traced example (it is dynamic)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: Namespace) -> None:
    import mixer_lightning
    from mixer_lightning.models.export import export_network, inference_metadata
    from mixer_lightning.safety.atomic import check_output_file, remove_orphans, sha256_file
    from mixer_lightning.tasks.loading import load_classifier, read_checkpoint

    out = check_output_file(args.out, "out", args.overwrite)  # before loading anything: nothing written
    remove_orphans(Path(out).parent, only=Path(out).name)  # what a killed `mixer export` to this name left
    module = load_classifier(args.ckpt_path, field="ckpt_path")
    family = type(module.net).__name__
    metadata = inference_metadata(
        read_checkpoint(args.ckpt_path).get("data"),
        image_size=module.image_size,
        in_chans=module.in_chans,
        family=family,
        mixer_lightning_version=mixer_lightning.__version__,
        checkpoint_sha256=sha256_file(args.ckpt_path),
    )
    difference = export_network(
        module.net, args.format, out, module.image_size, module.in_chans, args.batch_size, metadata=metadata
    )
    if args.json:
        print(
            json.dumps({"out": str(out), "format": args.format, "family": family, "max_abs_diff": difference}, indent=2)
        )
    else:
        print(f"Exported {family} to {out} ({args.format}); max |Δ logits| vs eager: {difference:.3g}")
