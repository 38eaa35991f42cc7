"""A checkpoint as a Hugging Face Hub model repository (``model.safetensors``, ``config.json``,
``README.md``), written into --out and/or uploaded to --repo_id (the token of ``hf auth login``).

A plain MLP-Mixer of timm's shapes (Mixer-S/B/L, patch 16 or 32; S = S0, no RP, exact GELU, LayerNorm
ε 1e-6) becomes timm's ``mixer_*_224`` (timm's ``save_for_hf``, ``push_to_hf_hub``): timm loads it by
``hf-hub:ORG/NAME``. Other families keep this project's names (``mixer_lightning:<network>``). config.json
has timm's ``pretrained_cfg`` (the checkpoint's preprocessing) and, under ``mixer_lightning``, its
hyper-parameters, which ``mixer convert --from`` and ``model.init_from`` read back. The model card holds
the run's config.yaml and the test metrics recorded for this checkpoint. Only these files are uploaded, and
--out holds nothing else: a new or empty folder (--overwrite: one holding an earlier push's files).

Examples:
    mixer push --ckpt_path runs/x/version_0/checkpoints/best.ckpt --out hub/x
    mixer push --ckpt_path best.ckpt --out hub/x --repo_id my-lab/mixer-x --private
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import ConfigError, ResourceError, require

# timm's plain Mixers: (patch size, blocks, C) → name; image size, classes and MLP widths are model_args.
SIZES = {"s": (8, 512), "b": (12, 768), "l": (24, 1024)}
TIMM_VARIANTS = {(p, *shape): f"mixer_{size}{p}_224" for size, shape in SIZES.items() for p in (16, 32)}
CROP_MODES = {"resmall_crop": "center", "resize_crop": "squash", "resize": "center"}  # eval_crop → crop_mode
ARCHITECTURE_PREFIX = "mixer_lightning:"
FILES = ("model.safetensors", "config.json", "README.md")


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of `mixer fit` (or `mixer average`)")
    parser.add_argument("--out", default=None, help="a new or empty folder to write the repo's files into")
    parser.add_argument("--repo_id", default=None, help="ORG/NAME on the Hugging Face Hub to upload to")
    parser.add_argument("--private", action="store_true", help="create the hub repo private")
    parser.add_argument("--overwrite", action="store_true", help="replace the files of an earlier push in --out")
    parser.add_argument("--json", action="store_true", help="print JSON")


def preprocessing(facts: dict[str, Any]) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` preprocessing from the data facts a checkpoint carries."""
    crop = str(facts.get("eval_crop", "resize"))
    return {
        "input_size": (int(facts["in_chans"]), int(facts["image_size"]), int(facts["image_size"])),
        "mean": tuple(float(v) for v in facts["mean"]),
        "std": tuple(float(v) for v in facts["std"]),
        "crop_pct": 1.0 if crop == "resize" else float(facts.get("eval_crop_pct", 0.875)),
        "crop_mode": CROP_MODES.get(crop, "center"),
        "interpolation": str(facts.get("interpolation", "bilinear")),
    }


def timm_model_of(net: Any, cfg: dict[str, Any]) -> tuple[Any, dict[str, Any], float | None, str]:
    """timm's ``mixer_*`` holding `net`'s weights with `cfg` as its pretrained_cfg, its model_args and the
    largest logit difference from `net`; or None and why timm has no Mixer computing `net`'s function."""
    import timm
    import torch

    from mixer_lightning.models import MLPMixer
    from mixer_lightning.weights.keys import timm_key

    if not isinstance(net, MLPMixer):
        return None, {}, None, f"timm has no {type(net).__name__}"
    c, shape = net.channels, (net.stem.patch_size, net.num_blocks, net.channels)
    if shape not in TIMM_VARIANTS or net.num_classes < 1:
        return None, {}, None, f"patch {shape[0]}, {shape[1]} blocks, C = {c}: none of timm's Mixer-S/B/L classifiers"
    name = TIMM_VARIANTS[shape]
    model_args = {"img_size": net.stem.image_size, "in_chans": net.stem.proj.in_channels}
    model_args |= {"num_classes": net.num_classes, "mlp_ratio": [net.token_hidden / c, net.channel_hidden / c]}
    model = timm.create_model(name, **model_args).eval()
    try:
        model.load_state_dict({timm_key(k): v for k, v in net.state_dict().items()}, strict=True)
    except RuntimeError as error:  # a skip layer (S ≠ S0), RP permutations, widths mlp_ratio cannot express
        return None, {}, None, f"timm's {name} cannot hold its weights ({str(error).splitlines()[0][:120]})"
    model.pretrained_cfg = {**model.pretrained_cfg, **cfg, "num_classes": net.num_classes}
    images = torch.randn(2, *cfg["input_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = float((model(images) - net.eval()(images)).abs().max())
    if difference > 1e-4:  # the tanh GELU, another LayerNorm ε: a timm file computing another function
        return None, {}, difference, f"timm's {name} differs from it by {difference:.3g} in the logits"
    return model, model_args, difference, ""


def run_records(ckpt: Path, sha256: str) -> tuple[str | None, dict[str, dict]]:
    """The run's config.yaml and the test results (``test_metrics*.json`` of the run's versions) that
    name this checkpoint by its sha256, a partial one named so; a damaged file is none."""
    run = ckpt.parent.parent
    if ckpt.parent.name != "checkpoints" or not (run / "config.yaml").is_file():
        return None, {}
    results = {}
    for path in sorted(run.parent.glob("version_*/test_metrics*.json")):
        try:
            record = json.loads(path.read_bytes())
        except ValueError:  # a damaged record is no result (docs/reliability.md)
            continue
        checkpoint = record.get("checkpoint") if isinstance(record, dict) else None
        if isinstance(checkpoint, dict) and checkpoint.get("sha256") == sha256:
            name = f"{path.parent.name}/{path.name}"
            if record.get("partial") is True:  # a test cut by limit_test_batches
                name += f", partial: {record.get('images')} of {record.get('of')} images"
            results[name] = {k: v for k, v in record.items() if k.startswith("test/")}
    return (run / "config.yaml").read_text(), results


def model_card(
    network: str, architecture: str, model_args: dict, facts: dict, record: dict, config: str, results: dict, repo: str
):
    """The model card timm's ``push_to_hf_hub`` takes: details (with the test metrics), the training
    config as the description, and how to load it."""
    checkpoint = f"{Path(record['path']).name}, epoch {record['epoch']}, step {record['global_step']}"
    details = {
        "Model type": f"Image classification ({network})",
        "Image size": f"{facts['image_size']} x {facts['image_size']}, {facts['in_chans']} channels",
        "Classes": facts["num_classes"],
        "Dataset": str(facts.get("dataset", "unknown")),
        "Checkpoint": f"{checkpoint}, sha256 {record['sha256']}",
        **{f"Test metrics ({name})": metrics for name, metrics in results.items()},
    }
    ours = architecture.startswith(ARCHITECTURE_PREFIX)
    usage = (
        f"```bash\nmixer convert --from {repo} --out model.ckpt      # or model.init_from: {repo}\n```\n"
        if ours
        else f"```python\nimport timm\nmodel = timm.create_model('{repo}', pretrained=True)\n# or:\n"
        f"model = timm.create_model('{architecture}', pretrained=True, pretrained_cfg_overlay=dict("
        f"file='model.safetensors', num_classes={model_args['num_classes']}), **{model_args!r})\n```\n"
    )
    return {
        "description": f"Trained with mixer-lightning. Training config:\n\n```yaml\n{config.rstrip()}\n```",
        "details": details,
        "usage": usage,
        "library_name": "mixer-lightning" if ours else "timm",
        "tags": ["image-classification", "mlp-mixer", "mixer-lightning"],
    }


def prepare(ckpt: str, repo: str) -> dict[str, Any]:
    """What `mixer push` writes for the checkpoint `ckpt`: the timm model (or our network and its
    config.json), config.json's own section, the model card, and the report."""
    import yaml

    from mixer_lightning.safety.atomic import sha256_file
    from mixer_lightning.tasks.loading import load_classifier, read_checkpoint

    checkpoint = read_checkpoint(ckpt, "--ckpt_path")
    facts = checkpoint.get("data")
    fix = "push a checkpoint written by `mixer fit` (or `mixer average` of such checkpoints)"
    require(isinstance(facts, dict), "--ckpt_path", f"{ckpt} carries no data facts (mean, std, image size)", fix)
    net = load_classifier(ckpt, "--ckpt_path").net
    hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    record = {"path": str(ckpt), "sha256": sha256_file(ckpt)} | {k: checkpoint.get(k) for k in ("epoch", "global_step")}
    cfg = preprocessing(facts)
    timm_model, model_args, difference, why_not_timm = timm_model_of(net, cfg)
    architecture = timm_model.pretrained_cfg["architecture"] if timm_model else ARCHITECTURE_PREFIX + type(net).__name__
    names = [str(n) for n in facts.get("class_names") or []]
    extra = {"label_names": names} if len(names) == net.num_classes else {}
    extra["mixer_lightning"] = {"hyper_parameters": hparams, "data": facts, "checkpoint": record}
    config = {"architecture": architecture, "num_classes": net.num_classes, "model_args": hparams}
    config |= {"pretrained_cfg": {**cfg, "num_classes": net.num_classes}, **extra}
    run_config, results = run_records(Path(ckpt), record["sha256"])
    config_text = run_config or yaml.safe_dump(hparams, sort_keys=False)
    card = model_card(type(net).__name__, architecture, model_args, facts, record, config_text, results, repo)
    report = {"architecture": architecture, "timm": timm_model is not None, "why_not_timm": why_not_timm or None}
    report |= {"max_abs_diff_vs_timm": difference, "checkpoint": record, "test_metrics": list(results)}
    parts = {"timm_model": timm_model, "model_config": extra, "model_args": model_args, "net": net}
    return parts | {"config": config, "card": card, "report": report}


def write_files(parts: dict[str, Any], folder: Path, name: str) -> None:
    """The repo's three files in `folder` (timm's save_for_hf for a timm model)."""
    from safetensors.torch import save_file

    from mixer_lightning.seam import timm_model_card

    if parts["timm_model"] is not None:
        from timm.models import save_for_hf

        # copies: timm 1.0.21 pops what it reads from model_config
        save_for_hf(
            parts["timm_model"], folder, dict(parts["model_config"]), parts["model_args"], safe_serialization=True
        )
    else:
        tensors = {k: v.detach().cpu().contiguous() for k, v in parts["net"].state_dict().items()}
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        (folder / "config.json").write_text(json.dumps(parts["config"], indent=2) + "\n")
    (folder / "README.md").write_text(timm_model_card(parts["card"], name), encoding="utf-8")


def upload(parts: dict[str, Any], folder: Path, repo_id: str, private: bool, out: Path | None) -> str:
    """Upload to the hub repo `repo_id` (created if new); a `ResourceError` in one line if it fails."""
    import huggingface_hub
    from timm.models import push_to_hf_hub

    message = "Add model (mixer push)"
    try:
        if parts["timm_model"] is not None:
            kwargs = {"model_config": dict(parts["model_config"]), "model_card": parts["card"]}
            push_to_hf_hub(parts["timm_model"], repo_id, message, private=private, safe_serialization=True, **kwargs)
        else:
            api = huggingface_hub.HfApi()
            repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
            api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=message, allow_patterns=list(FILES))
    except Exception as error:  # huggingface_hub's offline mode, HTTP, auth and connection errors
        cause = (str(error).splitlines() or [""])[0][:200]
        written = f"{out} written, not uploaded" if out else "nothing uploaded"
        later = f"run this again online, or `hf upload {repo_id} {out}`" if out else "run this again online"
        raise ResourceError(
            "--repo_id", f"cannot upload to {repo_id} ({type(error).__name__}: {cause}); {written}", later
        ) from None
    return f"https://huggingface.co/{repo_id}"


def run(args: Namespace) -> None:
    from mixer_lightning.safety.atomic import atomic_write, check_output_dir, remove_orphans

    require(args.out is not None or args.repo_id is not None, "--out", "none given", "give --out and/or --repo_id")
    out = None
    if args.out is not None:
        # --out is the repo as uploaded (`hf upload REPO OUT`): nothing in it but push's files.
        out = check_output_dir(args.out, "--out", "the hub repo's files")
        for name in FILES:  # what a killed push left
            remove_orphans(out, only=name)
        held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        others = [name for name in held if name not in FILES]
        if others:
            listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise ConfigError(
                "--out", f"{out} holds files push does not write ({listed})", "give a new or empty folder"
            )
        if held and not args.overwrite:
            raise ConfigError("--out", f"{out} holds {', '.join(held)}", "pass --overwrite or another folder")
    parts = prepare(args.ckpt_path, f"hf-hub:{args.repo_id}" if args.repo_id else str(out))
    report = {"out": str(out) if out else None, **parts["report"]}
    log = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="mixer-push-") as scratch:
        folder = Path(scratch)
        write_files(parts, folder, (args.repo_id or str(out.absolute())).split("/")[-1])
        if out is not None:
            for name in FILES:  # each file whole: a kill or a full disk leaves --out's files as they were
                with atomic_write(out / name, "wb", field="--out") as f:
                    f.write((folder / name).read_bytes())
            layout = report["architecture"] + ("" if report["timm"] else f" (not timm's: {report['why_not_timm']})")
            print(f"Wrote {out}/{{{', '.join(FILES)}}}: {layout}", file=log)
        if args.repo_id is not None:
            report["url"] = upload(parts, folder, args.repo_id, args.private, out)
            print(f"Uploaded to {report['url']}", file=log)
    if args.json:
        print(json.dumps(report, indent=2))
