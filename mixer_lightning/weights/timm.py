"""timm's ``MlpMixer`` and this project's `MLPMixer`: the architecture of a timm model
(`timm_architecture`), an equal `MLPMixer` with a copy of its weights (`from_timm`), and weights
named on a hub, through timm (`read_hub_weights`)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from mixer_lightning.errors import ConfigError
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.weights.file import WeightsFile
from mixer_lightning.weights.keys import about, from_timm_key
from mixer_lightning.weights.preprocessing import pretrained_preprocessing

# What timm's other MlpMixer parts are, for the error that refuses them.
OTHER_PARTS = {
    "ResBlock": "ResMLP blocks (affine 'norm', layer scale, a single linear token-mixing layer)",
    "SpatialGatingBlock": "gMLP blocks (spatial gating unit instead of token mixing)",
    "GluMlp": "a gated (GLU) MLP as gmixer",
    "GatedMlp": "a gated MLP as gMLP",
}


def _timm_activation(act: nn.Module) -> str | None:
    from timm.layers.activations import GELU, GELUTanh

    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    return {GELU: "gelu", GELUTanh: "gelu_tanh"}.get(type(act))


def timm_architecture(timm_model: nn.Module, field: str = "timm_model", source: str = "") -> dict[str, Any]:
    """`MLPMixer` arguments of a timm ``MlpMixer`` built of plain Mixer blocks; a `ConfigError` on
    `field` (about `source`, a hub name) naming what a plain MLP-Mixer does not have."""
    from timm.layers import Mlp
    from timm.models.mlp_mixer import MixerBlock, MlpMixer

    def require(condition: bool, what: str) -> None:
        if not condition:
            problem = about(source, f"{what}, which an MLP-Mixer does not have")
            raise ConfigError(field, problem, "convert a plain MLP-Mixer")

    def kind(module: nn.Module) -> str:
        return OTHER_PARTS.get(type(module).__name__, f"a {type(module).__name__}")

    require(isinstance(timm_model, MlpMixer), f"a {type(timm_model).__name__} is not a timm MlpMixer")
    stem = timm_model.stem
    require(isinstance(stem.norm, nn.Identity), "a normalisation after the stem (stem_norm=True)")
    square = stem.img_size[0] == stem.img_size[1] and stem.patch_size[0] == stem.patch_size[1]
    require(square, f"image size {stem.img_size} / patch {stem.patch_size} that are not square")
    require(timm_model.global_pool == "avg", "global_pool='' (no pooling)")
    norms, acts, hidden = set(), set(), set()
    for i, block in enumerate(timm_model.blocks):
        require(type(block) is MixerBlock, f"blocks[{i}] as {kind(block)}")
        for name in ("mlp_tokens", "mlp_channels"):
            mlp = getattr(block, name)
            require(type(mlp) is Mlp, f"blocks[{i}].{name} as {kind(mlp)}")
            require(isinstance(mlp.norm, nn.Identity), f"blocks[{i}].{name} normalising its hidden units")
            require(isinstance(mlp.fc1, nn.Linear), f"blocks[{i}].{name} with 1×1 convolutions")
            act = type(mlp.act).__name__
            require(_timm_activation(mlp.act) is not None, f"blocks[{i}].{name} with the activation {act}")
            acts.add(_timm_activation(mlp.act))
            hidden.add((name, mlp.fc1.out_features))
        for norm in (block.norm1, block.norm2):
            require(isinstance(norm, nn.LayerNorm), f"blocks[{i}] with {kind(norm)} as a norm")
            norms.add(norm.eps)
    require(isinstance(timm_model.norm, nn.LayerNorm), f"the final norm {kind(timm_model.norm)}")
    norms.add(timm_model.norm.eps)
    require(len(norms) == 1, f"LayerNorms with different eps {sorted(norms)}")
    require(len(acts) == 1, f"different activations {sorted(acts)} in different MLPs")
    require(len(hidden) == 2, "hidden widths that differ between blocks")
    first = timm_model.blocks[0]
    if timm_model.head_drop.p > 0:
        warnings.warn(f"timm's dropout before the head (p={timm_model.head_drop.p}) is not carried over", stacklevel=3)
    return dict(
        num_classes=timm_model.num_classes,
        image_size=stem.img_size[0],
        in_chans=stem.proj.in_channels,
        patch_size=stem.patch_size[0],
        channels=timm_model.embed_dim,
        token_hidden=first.mlp_tokens.fc1.out_features,
        channel_hidden=first.mlp_channels.fc1.out_features,
        num_blocks=len(timm_model.blocks),
        norm_eps=norms.pop(),
        act=acts.pop(),
        drop_rate=first.mlp_tokens.drop1.p,
        # timm drops every MLP at one rate; ours rises linearly to it at the last MLP (Mixer supp. B).
        drop_path=getattr(first.drop_path, "drop_prob", 0.0),
    )


def _timm_state_dict(timm_model: nn.Module) -> dict[str, torch.Tensor]:
    """timm's parameters under this project's names; an absent bias or LayerNorm affine weight
    (``bias=False``, ``elementwise_affine=False``) becomes zeros or ones."""
    out = {}
    like = next(timm_model.parameters())
    for name, module in timm_model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.LayerNorm)):
            weight = module.weight
            if weight is None:  # a LayerNorm without its affine transform
                weight = torch.ones(module.normalized_shape, dtype=like.dtype, device=like.device)
            bias = module.bias if module.bias is not None else weight.new_zeros(weight.shape[0])
            for kind, tensor in (("weight", weight), ("bias", bias)):
                out[from_timm_key(f"{name}.{kind}")] = tensor.detach().clone()
    return out


def from_timm(timm_model: nn.Module) -> MLPMixer:
    """An `MLPMixer` computing the same function as a timm ``MlpMixer`` of plain Mixer blocks (every
    ``mixer_*`` variant, or a custom one), with a copy of its weights; ``gmixer_*``, ``resmlp_*``,
    ``gmlp_*`` or a stem norm: a `ConfigError` naming it."""
    architecture = timm_architecture(timm_model)
    state_dict = _timm_state_dict(timm_model)
    with torch.device("meta"):  # shapes only; the tensors are then taken over from the copy
        model = MLPMixer(**architecture)
    model.load_state_dict(state_dict, strict=True, assign=True)
    return model.train(timm_model.training)


def read_hub_weights(name: str, field: str = "init_from") -> WeightsFile:
    """Weights named on a hub, through timm and huggingface_hub (their cache; HF_HUB_OFFLINE=1 reads only
    the cache): ``timm:mixer_b16_224.goog_in21k_ft_in1k`` (a timm name with its pretrained tag) or
    ``hf-hub:ORG/REPO`` (a repo in timm's layout). The architecture is the timm model's, the
    preprocessing its ``pretrained_cfg``."""
    import timm

    try:
        timm_model = timm.create_model(name.removeprefix("timm:"), pretrained=True)
    except Exception as error:  # timm: an unknown name or tag; huggingface_hub: not cached offline, no network
        cause = (str(error).splitlines() or [""])[0][:200]
        raise ConfigError(
            field,
            f"cannot load {name!r} ({type(error).__name__}: {cause})",
            "check the name (timm.list_pretrained('mixer*')); download it once where the hub is reachable, "
            "then HF_HUB_OFFLINE=1 reads the cache",
        ) from None
    architecture = timm_architecture(timm_model, field, name)
    for key in ("num_classes", "image_size", "in_chans", "drop_rate", "drop_path"):  # the data's, training's
        architecture.pop(key)
    cfg = {"num_classes": timm_model.num_classes, **timm_model.pretrained_cfg}
    return WeightsFile(name, "timm", _timm_state_dict(timm_model), architecture, None, pretrained_preprocessing(cfg))
