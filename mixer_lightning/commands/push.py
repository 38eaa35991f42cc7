"""A checkpoint as a Hugging Face Hub model repository: the folder timm's ``push_to_hf_hub`` uploads,
written locally (--out), and uploaded with --repo_id when huggingface_hub can reach the hub.

The folder holds ``model.safetensors`` (the weights, no pickle), ``config.json`` (timm's layout:
``architecture``, ``num_classes``, ``model_args``, ``label_names`` and the ``pretrained_cfg`` of the
preprocessing the model was trained with: mean, std, input_size, crop_pct, crop_mode, interpolation,
from the data facts the checkpoint carries) and ``README.md``, a model card with the family, the
data, the checkpoint's sha256, the training config (the run's config.yaml) and the test metrics
(the run's test_metrics*.json recorded for this very checkpoint).

A plain MLP-Mixer of one of timm's shapes (Mixer-S/B/L with patch 16 or 32, any image size, classes,
channels and MLP widths; S = S0, no skip layer or RP, exact GELU, LayerNorm ε 1e-6) is written as
timm's ``mixer_*_224`` with timm's parameter names, checked to give the same logits as ours:
``timm.create_model("hf-hub:ORG/NAME", pretrained=True)`` or ``timm.create_model(architecture,
pretrained=True, pretrained_cfg_overlay=dict(file="DIR/model.safetensors"), **model_args)`` loads it.
Any other model (S-Mixer, RP, SW-MLP, Kronecker/Monarch) keeps this project's parameter names, with
``architecture: mixer_lightning:<family>``. Either way ``config.json`` also carries the checkpoint's
class and hyper-parameters under ``mixer_lightning``, so this project reads the folder back, or the
hub repo: ``mixer convert --from DIR`` / ``--from hf-hub:ORG/NAME``, ``model.init_from: DIR``.

Upload: --repo_id ORG/NAME creates the repo (if new; --private) and uploads the folder, with the
token of ``hf auth login`` or HF_TOKEN. Offline (HF_HUB_OFFLINE=1, or no huggingface_hub),
the folder is written and the command says in one line that nothing was uploaded (exit 1).

(A new command rather than ``mixer export --format hf``: export writes one file and checks it, a hub
repo is a folder of three, written from the checkpoint's run (config, metrics), and maybe uploaded.)

Examples:
    mixer push --ckpt_path runs/x/version_0/checkpoints/best.ckpt --out hub/x
    mixer push --ckpt_path best.ckpt --out hub/x --repo_id my-lab/mixer-x --private
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import ConfigError, ResourceError, require

# timm's registered plain Mixers: (patch size, blocks, channels) → name. Their factories fix these
# three, the rest (image size, input channels, classes, MLP widths) are `model_args`.
TIMM_VARIANTS = {
    (32, 8, 512): "mixer_s32_224",
    (16, 8, 512): "mixer_s16_224",
    (32, 12, 768): "mixer_b32_224",
    (16, 12, 768): "mixer_b16_224",
    (32, 24, 1024): "mixer_l32_224",
    (16, 24, 1024): "mixer_l16_224",
}
# eval_crop of the data facts → timm's crop_mode (crop_pct 1.0 for a plain resize).
CROP_MODES = {"resmall_crop": "center", "resize_crop": "squash", "resize": "center"}
ARCHITECTURE_PREFIX = "mixer_lightning:"
FILES = ("model.safetensors", "config.json", "README.md")


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of `mixer fit` (or `mixer average`)")
    parser.add_argument(
        "--out",
        default=None,
        help="the folder to write the repo's files into (default with --repo_id: a temporary one)",
    )
    parser.add_argument(
        "--repo_id", default=None, help="ORG/NAME on the Hugging Face Hub to upload to (needs the network)"
    )
    parser.add_argument("--private", action="store_true", help="create the hub repo private")
    parser.add_argument("--overwrite", action="store_true", help="replace the repo files in a non-empty --out")
    parser.add_argument("--json", action="store_true", help="print JSON")


def sha256_of(path: str | Path) -> str:
    from mixer_lightning.commands.average import sha256_of as digest

    return digest(path)


def preprocessing(facts: dict[str, Any]) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` preprocessing from the data facts a checkpoint carries."""
    crop = str(facts.get("eval_crop", "resize"))
    return {
        "input_size": [int(facts["in_chans"]), int(facts["image_size"]), int(facts["image_size"])],
        "mean": [float(v) for v in facts["mean"]],
        "std": [float(v) for v in facts["std"]],
        "crop_pct": 1.0 if crop == "resize" else float(facts.get("eval_crop_pct", 0.875)),
        "crop_mode": CROP_MODES.get(crop, "center"),
        "interpolation": str(facts.get("interpolation", "bilinear")),
    }


def timm_layout(net: Any) -> tuple[str | None, dict[str, Any], str]:
    """timm's architecture name and model_args for `net`, or None and why it has no timm equivalent."""
    from torch import nn

    from mixer_lightning.models import MLPMixer

    if not isinstance(net, MLPMixer):
        return None, {}, f"timm has no {type(net).__name__}"
    c = net.channels
    key = (net.stem.patch_size, net.num_blocks, c)
    reasons = []
    if net.tokens != net.stem.num_patches or net.blocks[0].token_mixing.skip is not None:
        reasons.append(f"S = {net.tokens} ≠ S0 = {net.stem.num_patches} (a skip layer)")
    if any(layer.permuted for layer in net.mixing_layers()):
        reasons.append("RP permutations")
    acts = {m.approximate for m in net.modules() if isinstance(m, nn.GELU)}
    if acts != {"none"}:
        reasons.append("the tanh GELU")
    eps = {m.eps for m in net.modules() if isinstance(m, nn.LayerNorm)}
    if eps != {1e-6}:
        reasons.append(f"LayerNorm ε {sorted(eps)} (timm's is 1e-6)")
    if key not in TIMM_VARIANTS:
        reasons.append(f"patch {key[0]}, {key[1]} blocks, C = {key[2]} is none of timm's Mixer-S/B/L")
    ratio = [net.token_hidden / c, net.channel_hidden / c]
    if [int(r * c) for r in ratio] != [net.token_hidden, net.channel_hidden]:
        reasons.append("MLP widths timm's mlp_ratio cannot express")
    if net.num_classes < 1:
        reasons.append("no classifier head")
    if reasons:
        return None, {}, "; ".join(reasons)
    model_args = {
        "img_size": net.stem.image_size,
        "in_chans": net.stem.proj.in_channels,
        "num_classes": net.num_classes,
        "mlp_ratio": ratio,
    }
    return TIMM_VARIANTS[key], model_args, ""


def timm_model_of(net: Any, architecture: str, model_args: dict[str, Any], cfg: dict[str, Any]) -> tuple[Any, float]:
    """timm's model `architecture` with `net`'s weights and `cfg` as its pretrained_cfg, and the largest
    logit difference from `net` on a random batch."""
    import timm
    import torch

    from mixer_lightning.weights.keys import timm_key

    model = timm.create_model(architecture, pretrained=False, **model_args).eval()
    model.load_state_dict({timm_key(k): v for k, v in net.state_dict().items()}, strict=True)
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        **{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()},
    }
    model.pretrained_cfg["num_classes"] = net.num_classes
    images = torch.randn(2, *cfg["input_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = float((model(images) - net.eval()(images)).abs().max())
    return model, difference


def run_files(ckpt: Path, sha256: str) -> tuple[str | None, list[tuple[str, dict]]]:
    """The training config (the run's config.yaml) and the test results recorded for this checkpoint
    (``test_metrics*.json`` of the run's versions whose ``checkpoint.sha256`` is `sha256`)."""
    run = ckpt.parent.parent
    if ckpt.parent.name != "checkpoints" or not (run / "config.yaml").is_file():
        return None, []
    results = []
    for path in sorted(run.parent.glob("version_*/test_metrics*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and (record.get("checkpoint") or {}).get("sha256") == sha256:
            results.append((str(path), {k: v for k, v in record.items() if k.startswith("test/")}))
    return (run / "config.yaml").read_text(), results


def model_card(
    name: str,
    family: str,
    parameters: int,
    facts: dict,
    record: dict,
    config: str | None,
    hparams: dict,
    results: list,
    usage: str,
) -> str:
    """README.md: timm's model card (`generate_readme`), then the training config and test metrics."""
    import yaml
    from timm.models._hub import generate_readme

    details = {
        "Model type": f"Image classification ({family})",
        "Parameters (M)": f"{parameters / 1e6:.3f}",
        "Image size": f"{facts['image_size']} x {facts['image_size']}, {facts['in_chans']} channels",
        "Classes": facts["num_classes"],
        "Dataset": str(facts.get("dataset", "unknown")),
        "Checkpoint": f"{Path(record['path']).name}, epoch {record['epoch']}, step {record['global_step']}, "
        f"sha256 {record['sha256']}",
    }
    if facts.get("input_permutation", "none") != "none":
        details["Input"] = f"pixels permuted ({facts['input_permutation']}, seed {facts.get('permutation_seed')})"
    card = {
        "details": details,
        "usage": usage,
        "library_name": "timm" if not family.startswith(ARCHITECTURE_PREFIX) else "mixer-lightning",
        "tags": ["image-classification", "mlp-mixer", "mixer-lightning"],
    }
    text = generate_readme(card, name)
    text += "\n## Training config\n"
    if config is not None:
        text += f"The run's config.yaml:\n\n```yaml\n{config.rstrip()}\n```\n"
    else:
        shown = {k: v for k, v in hparams.items() if not k.startswith("_")}
        text += (
            f"The checkpoint's hyper-parameters:\n\n```yaml\n{yaml.safe_dump(shown, sort_keys=False).rstrip()}\n```\n"
        )
    text += "\n## Test metrics\n"
    if results:
        for path, metrics in results:
            text += f"\n`{Path(path).parent.name}/{Path(path).name}`:\n\n| metric | value |\n|---|---|\n"
            text += "".join(
                f"| {k} | {v:.4f} |\n" if isinstance(v, float) else f"| {k} | {v} |\n" for k, v in metrics.items()
            )
    else:
        text += "\nNone recorded for this checkpoint (`mixer test --ckpt_path` writes them into its run).\n"
    return text


def usage_text(architecture: str, model_args: dict[str, Any], repo: str) -> str:
    if architecture.startswith(ARCHITECTURE_PREFIX):
        return (
            "With mixer-lightning (this family has no timm counterpart):\n\n```bash\n"
            f"mixer convert --from {repo} --out model.ckpt      # or model.init_from: {repo}\n```\n"
        )
    return (
        "With timm:\n\n```python\nimport timm\n"
        f"model = timm.create_model('{repo}', pretrained=True)\n"
        "# or from the folder: timm.create_model('local-dir:FOLDER', pretrained=True), or\n"
        f"model = timm.create_model(\n    '{architecture}',\n    pretrained=True,\n"
        f"    pretrained_cfg_overlay=dict(file='model.safetensors', num_classes={model_args['num_classes']}),\n"
        f"    **{model_args!r},\n)\n```\n"
    )


def write_folder(ckpt: str, out: Path, repo_id: str | None) -> dict[str, Any]:
    """Write the repo files for the checkpoint `ckpt` into `out` (each atomically); what was written."""
    import lightning
    from safetensors.torch import save as safetensors_bytes

    from mixer_lightning.models import num_params
    from mixer_lightning.safety.atomic import atomic_write, write_text
    from mixer_lightning.tasks.loading import load_classifier, read_checkpoint

    checkpoint = read_checkpoint(ckpt, "--ckpt_path")  # trusted names, finite weights
    facts = checkpoint.get("data")
    require(
        isinstance(facts, dict) and all(k in facts for k in ("mean", "std", "image_size", "in_chans", "num_classes")),
        "--ckpt_path",
        f"{ckpt} carries no data facts (mean, std, image size: the preprocessing a hub config states)",
        "push a checkpoint written by `mixer fit` (or `mixer average` of such checkpoints)",
    )
    module = load_classifier(ckpt, "--ckpt_path")
    net = module.net
    hparams = dict(checkpoint["hyper_parameters"])
    sha256 = sha256_of(ckpt)
    record = {
        "path": str(ckpt),
        "sha256": sha256,
        "epoch": checkpoint.get("epoch"),
        "global_step": checkpoint.get("global_step"),
    }
    cfg = preprocessing(facts)
    architecture, model_args, why_not_timm = timm_layout(net)
    difference = None
    if architecture is not None:
        timm_model, difference = timm_model_of(net, architecture, model_args, cfg)
        if difference > 1e-4:  # our layout then: a timm file that computes another function helps nobody
            why_not_timm = f"timm's {architecture} differs from it by {difference:.3g} in the logits"
            architecture = None
    names = [str(n) for n in facts.get("class_names") or []]
    ours = {
        "version": 1,
        "class_path": hparams.get("_class_path"),
        "hyper_parameters": {k: v for k, v in hparams.items() if not k.startswith("_")},
        "data": facts,
        "checkpoint": record,
        "lightning_version": lightning.__version__,
    }
    if architecture is not None:
        import tempfile

        from timm.models._hub import save_config_for_hf

        with tempfile.TemporaryDirectory() as scratch:  # timm writes it plainly; we then write it atomically
            save_config_for_hf(
                timm_model,
                Path(scratch) / "config.json",  # a Path: timm 1.0.21 calls its .open()
                model_config={"label_names": names} if len(names) == net.num_classes else {},
                model_args=model_args,
            )
            config = json.loads((Path(scratch) / "config.json").read_text())
        tensors = timm_model.state_dict()
    else:
        architecture = f"{ARCHITECTURE_PREFIX}{type(module).__name__}"
        config = {
            "architecture": architecture,
            "num_classes": net.num_classes,
            "model_args": ours["hyper_parameters"],
            "pretrained_cfg": {**cfg, "num_classes": net.num_classes},
        }
        if len(names) == net.num_classes:
            config["label_names"] = names
        tensors = net.state_dict()
    config["mixer_lightning"] = ours
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    run_config, results = run_files(Path(ckpt), sha256)
    name = repo_id.split("/")[-1] if repo_id else out.absolute().name
    readme = model_card(
        name,
        architecture if architecture.startswith(ARCHITECTURE_PREFIX) else type(module).__name__,
        num_params(net),
        facts,
        record,
        run_config,
        hparams,
        results,
        usage_text(architecture, model_args, f"hf-hub:{repo_id}" if repo_id else str(out)),
    )
    with atomic_write(out / "model.safetensors", "wb", field="--out") as f:
        f.write(safetensors_bytes(tensors, metadata={"format": "pt"}))
    write_text(out / "config.json", json.dumps(config, indent=2) + "\n", field="--out")
    write_text(out / "README.md", readme, field="--out")
    return {
        "out": str(out),
        "architecture": architecture,
        "timm": not architecture.startswith(ARCHITECTURE_PREFIX),
        "why_not_timm": why_not_timm or None,
        "max_abs_diff_vs_timm": difference,
        "checkpoint": record,
        "test_metrics": [path for path, _ in results],
    }


def upload(out: Path, repo_id: str, private: bool) -> str:
    """Upload the folder `out` to the hub repo `repo_id` (created if new), as timm's push_to_hf_hub;
    a `ResourceError` in one line when the hub cannot be reached."""
    fix = f"upload the folder later: run this again online, or `hf upload {repo_id} {out}`"
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError:
        raise ResourceError(
            "--repo_id", f"huggingface_hub is not installed: {out} written, not uploaded", fix
        ) from None
    if constants.HF_HUB_OFFLINE:
        raise ResourceError(
            "--repo_id", f"the hub is offline (HF_HUB_OFFLINE is set): {out} written, not uploaded", fix
        )
    api = huggingface_hub.HfApi()
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        repo_id = getattr(url, "repo_id", None) or repo_id
        api.upload_folder(repo_id=repo_id, folder_path=str(out), commit_message="Add model (mixer push)")
    except Exception as error:  # huggingface_hub's HTTP, auth and connection errors
        cause = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise ResourceError(
            "--repo_id",
            f"cannot upload to {repo_id} ({type(error).__name__}: {cause}); {out} written, not uploaded",
            fix,
        ) from None
    return f"https://huggingface.co/{repo_id}"


def run(args: Namespace) -> None:
    import tempfile

    from mixer_lightning.safety.atomic import check_output_dir

    require(
        args.out is not None or args.repo_id is not None,
        "--out",
        "none given, and no --repo_id to upload to",
        "give --out DIR (the repo's files are written there) and/or --repo_id ORG/NAME",
    )
    if args.repo_id is not None:
        parts = str(args.repo_id).split("/")
        require(
            len(parts) == 2 and all(parts),
            "--repo_id",
            f"{args.repo_id!r} is not ORG/NAME",
            "give the hub repo as owner/name, e.g. my-lab/mixer-b16-cifar10",
        )
    scratch = None
    if args.out is None:
        scratch = tempfile.TemporaryDirectory(prefix="mixer-push-")
        out = Path(scratch.name)
    else:
        out = check_output_dir(args.out, "--out", "the hub repo's files")
        present = sorted(name for name in FILES if (out / name).exists())
        if present and not args.overwrite:
            raise ConfigError(
                "--out", f"{out} already holds {', '.join(present)}", "pass --overwrite or choose another folder"
            )
    try:
        report = write_folder(args.ckpt_path, out, args.repo_id)
        if args.out is not None:
            layout = (
                report["architecture"]
                if report["timm"]
                else f"{report['architecture']} (not timm's: {report['why_not_timm']})"
            )
            print(f"Wrote {out}/{{{', '.join(FILES)}}}: {layout}", file=sys.stderr if args.json else sys.stdout)
        if args.repo_id is not None:
            report["url"] = upload(out, args.repo_id, args.private)
            print(f"Uploaded to {report['url']}", file=sys.stderr if args.json else sys.stdout)
    finally:
        if scratch is not None:
            scratch.cleanup()
    if args.json:
        print(json.dumps(report, indent=2))
