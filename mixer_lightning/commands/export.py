"""Export a trained network for inference: ONNX, torch.export (.pt2) or TorchScript.

Any family is exported (RP Mixers' permutations become plain gathers, an SW-MLP's sparse weights
dense ones; `mixer_lightning.models.export`), with a dynamic batch dimension. The exported file is then run
on a batch (onnxruntime for ONNX, torch.export.load for .pt2, torch.jit.load for TorchScript) and
compared with the eager network: the largest absolute difference of the logits is printed.

The file carries what a runtime needs to pre-process images as ``mixer predict`` does: the
checkpoint's data facts (class names, image size, mean, std, crop, interpolation), its family, this
package's version and the checkpoint's SHA-256 (an ONNX model's ``metadata_props``, input ``image``,
output ``logits``; ``mixer.json`` among a TorchScript or .pt2 file's extra files).

Examples:
    mixer export --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt --format onnx --out quickstart.onnx
    mixer export --ckpt_path best.ckpt --format pt2 --out model.pt2 --json
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import ConfigError, require


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument("--format", required=True, help="onnx, pt2 or torchscript")
    parser.add_argument("--out", required=True, help="the file to write (.onnx, .pt2, .pt)")
    parser.add_argument("--batch_size", type=int, default=2, help="batch of the traced example (the batch is dynamic)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--json", action="store_true", help="print JSON")


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run(args: Namespace) -> None:
    import mixer_lightning
    from mixer_lightning.models.export import FORMATS, SUFFIXES, export_network, inference_metadata
    from mixer_lightning.safety.atomic import check_output_file, remove_orphans
    from mixer_lightning.tasks.loading import load_classifier, read_checkpoint

    require(args.format in FORMATS, "format", f"unknown format {args.format!r}", f"choose one of {', '.join(FORMATS)}")
    out = Path(args.out)
    suffix = SUFFIXES[args.format]
    if out.suffix.lower() != suffix and not out.is_dir():
        # A file's name says what it is: an ONNX model named .pt2 would be opened by the wrong loader.
        named = next((fmt for fmt, ending in SUFFIXES.items() if ending == out.suffix.lower()), None)
        if named:
            kind = {"onnx": "an ONNX", "pt2": "a pt2", "torchscript": "a TorchScript"}[named]
            problem, fix = (
                f"is the name of {kind} file, but --format is {args.format}",
                f", or give --format {named}",
            )
        else:
            problem, fix = f"does not end in {suffix}, the ending of --format {args.format}", ""
        raise ConfigError("out", f"{args.out!r} {problem}", f"name it {out.with_suffix(suffix).name}{fix}")
    check_output_file(out, "out", args.overwrite)  # before loading anything: one line, nothing written
    remove_orphans(out.parent, only=out.name)  # what a killed `mixer export` to this name left
    module = load_classifier(args.ckpt_path, field="ckpt_path")
    metadata = inference_metadata(
        read_checkpoint(args.ckpt_path).get("data"),
        image_size=module.image_size,
        in_chans=module.in_chans,
        family=type(module).__name__,
        mixer_lightning_version=mixer_lightning.__version__,
        checkpoint_sha256=sha256(args.ckpt_path),
    )
    difference = export_network(
        module.net, args.format, out, module.image_size, module.in_chans, args.batch_size, metadata=metadata
    )
    report = {"out": str(out), "format": args.format, "family": type(module).__name__, "max_abs_diff": difference}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Exported {type(module).__name__} to {out} ({args.format}); max |Δ logits| vs eager: {difference:.3g}")
