"""Convert MLP-Mixer weights into a checkpoint that `mixer test --ckpt_path` and `model.init_from`
(fine-tuning) accept, or write a model in the official JAX layout.

Inputs: timm weights (.pth, .safetensors; read with torch.load(weights_only=True) or safetensors),
an official JAX checkpoint (.npz: stem/kernel, MixerBlock_{i}/..., pre_head_layer_norm/..., head/...)
or a checkpoint of this project. The image size, input channels and number of classes always come
from the weights; the architecture is the --model preset, or is read from the weight shapes.

JAX weights default to --act gelu_tanh: flax's nn.gelu, which the official models were trained with,
is the tanh approximation of GELU. timm's MLP-Mixer uses the exact GELU (the default otherwise).

Examples:
    mixer convert --from imagenet21k_Mixer-B_16.npz --model mixer_b16 --out mixer_b16_in21k.ckpt
    mixer convert --from model.safetensors --model mixer_b16 --out mixer_b16_timm.ckpt
    mixer convert --from weights.pth --out model.ckpt         (architecture read from the weights)
    mixer convert --from runs/x/version_0/checkpoints/best.ckpt --out model.npz     (to JAX)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

MODULE_CLASS = "mixer_lightning.tasks.MLPMixerModule"


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, help="weights file: .npz (JAX), .pth/.safetensors, .ckpt"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="registered MLP-Mixer preset (mixer_b16, ...; `mixer models`); default: read from the weight shapes",
    )
    parser.add_argument("--out", required=True, help="output: a Lightning checkpoint (.ckpt) or a JAX .npz")
    parser.add_argument(
        "--act",
        choices=["gelu", "gelu_tanh"],
        default=None,
        help="activation (default: gelu_tanh for JAX files, the checkpoint's for .ckpt, else gelu)",
    )
    parser.add_argument("--norm_eps", type=float, default=None, help="LayerNorm eps (default: the preset's, 1e-6)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists (atomically)")


def convert(
    source: str | Path, model: str | None = None, act: str | None = None, norm_eps: float | None = None
) -> tuple[Any, dict[str, Any], Any]:
    """The MLPMixer with the weights of ``source``, the MLPMixerModule hyper-parameters that rebuild
    it, and the `WeightsFile` read."""
    from mixer_lightning.errors import ConfigError, require
    from mixer_lightning.models import get_entry
    from mixer_lightning.models.mlp_mixer import MLPMixer
    from mixer_lightning.weights import infer_architecture, load_weights, read_weights

    weights = read_weights(source, field="--from")
    try:
        shapes = infer_architecture(weights.state_dict)
    except ConfigError as error:
        raise ConfigError("--from", f"{source}: {error.problem}", "give MLP-Mixer weights") from None
    data_facts = {k: shapes.pop(k) for k in ("num_classes", "image_size", "in_chans")}
    act = act or weights.architecture.get("act") or "gelu"
    options = {"act": act} | ({"norm_eps": norm_eps} if norm_eps is not None else {})
    if norm_eps is None and weights.architecture.get("norm_eps") is not None:
        options["norm_eps"] = weights.architecture["norm_eps"]
    if model is not None:
        entry = get_entry(model, field="--model")
        require(
            entry.family == "mlp_mixer",
            "--model",
            f"{model!r} is a {entry.family} model; timm and JAX weights are MLP-Mixers",
            "choose an MLP-Mixer preset (`mixer models 'mixer_*'`)",
        )
        architecture = {} if entry.name != entry.family else dict(shapes)
        preset = entry.name if entry.name != entry.family else None
    else:
        architecture, preset = dict(shapes), None
    if not any(architecture.get("permute", [])):
        architecture.pop("permute", None)
    build = get_entry(preset or "mlp_mixer").build
    try:
        net = build(**data_facts, **architecture, **options)
    except ConfigError as error:  # the preset cannot take the weights' image size, channels, ...
        raise ConfigError(
            "--from",
            f"{source} ({data_facts['image_size']} px, {data_facts['in_chans']} channels) does not fit "
            f"--model {model}: {error}",
            "choose the preset the weights were trained with, or leave --model out to read the architecture "
            "from the weights",
        ) from None
    assert isinstance(net, MLPMixer)
    load_weights(net, weights, field="--from", new_head=False)
    hparams = {
        "_class_path": MODULE_CLASS,
        **data_facts,
        "preset": preset,
        **architecture,
        **options,
        "init_from": None,
        "upscale": None,
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
    }
    return net, hparams, weights


def lightning_checkpoint(
    net: Any, hparams: dict[str, Any], source: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A checkpoint as `mixer fit` writes one, with weights only: the LightningModule's state dict
    (``net.`` prefix), its hyper-parameters (with the class path and instantiator the CLI stores, which
    ``mixer test --ckpt_path`` and ``load_from_checkpoint`` read), the Lightning version (for
    Lightning's checkpoint migration) and, where the weights tell them, the facts of their data
    (`mixer_lightning.weights.preprocessing.converted_data_facts`), which ``mixer predict`` reads."""
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
    from mixer_lightning.errors import ConfigError, require
    from mixer_lightning.models import num_params
    from mixer_lightning.safety.atomic import atomic_write, check_output_file, remove_orphans
    from mixer_lightning.weights import FORMAT_NAMES, to_jax_npz
    from mixer_lightning.weights.preprocessing import converted_data_facts

    out = Path(args.out)
    require(out.suffix in (".ckpt", ".npz"), "--out", f"unknown output type {out.suffix!r}", "end it in .ckpt or .npz")
    check_output_file(out, "--out", args.overwrite)  # before reading anything: one line, nothing written
    remove_orphans(out.parent, only=out.name)  # what a killed `mixer convert` to this name left
    net, hparams, weights = convert(args.source, args.model, args.act, args.norm_eps)
    facts = converted_data_facts(weights, hparams["num_classes"], hparams["image_size"], hparams["in_chans"])
    if facts is not None and facts.get("interpolation") not in INTERPOLATIONS:  # one the data module has
        facts["interpolation"] = "bicubic"
    # Atomic: a full disk or a kill mid-write leaves an existing --out as it was (--overwrite included).
    with atomic_write(out, "wb", field="--out") as f:
        if out.suffix == ".npz":
            try:
                to_jax_npz(net, f)
            except ConfigError as error:
                raise ConfigError("--out", error.problem, error.fix) from None
        else:
            torch.save(lightning_checkpoint(net, hparams, args.source, facts), f)
    name = hparams["preset"] or "mlp_mixer"
    print(
        f"Wrote {out}: {name}, {num_params(net, exclude_head=True) / 1e6:.2f} M parameters without the head, "
        f"{hparams['num_classes']} classes, {hparams['image_size']} px, {hparams['in_chans']} input channels, "
        f"act {hparams['act']} (from {FORMAT_NAMES[weights.format]} {args.source})"
    )
