"""MLP-Mixer weights (timm's ``.pth``/``.safetensors``, an official JAX ``.npz``, a hub name, a checkpoint
of this project) into a checkpoint that `mixer test --ckpt_path` and `model.init_from` take, or a
model into the official JAX layout. Classes, image size and channels come from the weights; the
architecture is the --model preset, else read from the shapes. JAX weights default to --act gelu_tanh
(flax's nn.gelu, with which the official models were trained); timm's Mixer uses the exact GELU.

Examples:
    mixer convert --from imagenet21k_Mixer-B_16.npz --model mixer_b16 --out mixer_b16_in21k.ckpt
    mixer convert --from model.safetensors --model mixer_b16 --out mixer_b16_timm.ckpt
    mixer convert --from weights.pth --out model.ckpt         (architecture read from the weights)
    mixer convert --from runs/x/version_0/checkpoints/best.ckpt --out model.npz     (to JAX)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveFloat


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True, help="weights: .npz (JAX), .pth/.safetensors, .ckpt")
    parser.add_argument(
        "--model",
        default=None,
        help="an MLP-Mixer preset (mixer_b16, ...; `mixer models`); default: read from the shapes",
    )
    parser.add_argument("--out", required=True, help="output: a Lightning checkpoint (.ckpt) or a JAX .npz")
    parser.add_argument(
        "--act",
        type=Literal["gelu", "gelu_tanh"] | None,
        default=None,
        help="activation (default: gelu_tanh for JAX files, the checkpoint's for .ckpt, else gelu)",
    )
    parser.add_argument("--norm_eps", type=PositiveFloat | None, default=None, help="LayerNorm eps (default: 1e-6)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists (atomically)")


def convert(
    source: str | Path, model: str | None = None, act: str | None = None, norm_eps: float | None = None
) -> tuple[Any, dict[str, Any], Any]:
    """The `MLPMixer` with the weights of `source`, the checkpoint hyper-parameters that rebuild it, and
    the `WeightsFile` read."""
    from mixer_lightning.errors import field_prefix, require
    from mixer_lightning.models import MLPMixer, get_entry
    from mixer_lightning.models.registry import DATA_FACTS, class_path
    from mixer_lightning.tasks.initialise import file_network
    from mixer_lightning.weights import infer_architecture, load_weights, read_weights

    weights = read_weights(source, field="--from")
    shapes = infer_architecture(weights.state_dict, "--from")
    facts = {k: shapes.pop(k) for k in DATA_FACTS}
    implied = file_network(weights)[1]
    options = {"act": act or implied.get("act") or "gelu"}
    if (norm_eps := norm_eps or implied.get("norm_eps")) is not None:
        options["norm_eps"] = norm_eps
    architecture = shapes
    if model is not None:
        entry = get_entry(model, field="--model")
        fix = "choose an MLP-Mixer preset (`mixer models 'mixer_*'`)"
        require(entry.family == "mlp_mixer", "--model", f"{model!r} is a {entry.family}, not an MLP-Mixer", fix)
        if entry.name != entry.family:
            architecture = {k: v for k, v in entry.defaults.items() if k not in DATA_FACTS}
    if not any(architecture.get("permute") or []):
        architecture.pop("permute", None)
    architecture |= options
    with field_prefix("--model"):  # a preset that cannot take the weights' image size: --model.patch_size
        net = MLPMixer(**facts, **architecture)
    load_weights(net, weights, field="--from", new_head=False)
    net_spec = {"class_path": class_path(MLPMixer), "init_args": architecture}
    hparams = {"net": net_spec, **facts, "init_from": None, "upscale": None}
    return net, hparams | {"_instantiator": "lightning.pytorch.cli.instantiate_module"}, weights


def lightning_checkpoint(net: Any, hparams: dict[str, Any], source: str, data: dict[str, Any] | None) -> dict:
    """A checkpoint as `mixer fit` writes one, weights only: the module's state dict (``net.`` prefix), its
    hyper-parameters, the Lightning version (for Lightning's checkpoint migration) and, where the weights
    tell them, the facts of their data (`converted_data_facts`), which ``mixer predict`` reads."""
    import lightning

    return {
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": lightning.__version__,
        "state_dict": {f"net.{k}": v.detach().cpu() for k, v in net.state_dict().items()},
        "hparams_name": "kwargs",
        "hyper_parameters": hparams,
        "mixer_convert": {"from": str(source)},
    } | ({"data": data} if data else {})


def run(args: Namespace) -> None:
    import torch

    from mixer_lightning.data.transforms import INTERPOLATIONS
    from mixer_lightning.errors import require
    from mixer_lightning.models import num_params
    from mixer_lightning.safety.atomic import atomic_write, check_output_file, remove_orphans
    from mixer_lightning.weights import FORMAT_NAMES, to_jax_npz
    from mixer_lightning.weights.preprocessing import converted_data_facts

    out = Path(args.out)
    require(out.suffix in (".ckpt", ".npz"), "--out", f"unknown output type {out.suffix!r}", "end it in .ckpt or .npz")
    check_output_file(out, "--out", args.overwrite)  # before reading anything: nothing written
    remove_orphans(out.parent, only=out.name)  # what a killed `mixer convert` to this name left
    net, hparams, weights = convert(args.source, args.model, args.act, args.norm_eps)
    facts = converted_data_facts(weights, hparams["num_classes"], hparams["image_size"], hparams["in_chans"])
    if facts is not None and facts.get("interpolation") not in INTERPOLATIONS:  # one the data module has
        facts["interpolation"] = "bicubic"
    with atomic_write(out, "wb", field="--out") as f:  # a kill or a full disk leaves an existing --out as it was
        if out.suffix == ".npz":
            to_jax_npz(net, f, field="--out")
        else:
            torch.save(lightning_checkpoint(net, hparams, args.source, facts), f)
    print(
        f"Wrote {out}: {args.model or 'mlp_mixer'}, {num_params(net, exclude_head=True) / 1e6:.2f} M parameters "
        f"without the head, {hparams['num_classes']} classes, {hparams['image_size']} px, {hparams['in_chans']} "
        f"input channels, act {hparams['net']['init_args']['act']} (from {FORMAT_NAMES[weights.format]} {args.source})"
    )
