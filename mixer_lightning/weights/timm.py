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


def _timm_activation(act: nn.Module) -> str | None:
    from timm.layers.activations import GELU, GELUTanh

    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    if type(act) is GELU:
        return "gelu"
    if type(act) is GELUTanh:
        return "gelu_tanh"
    return None


def timm_architecture(timm_model: nn.Module, field: str = "timm_model", source: str = "") -> dict[str, Any]:
    """`MLPMixer` arguments of a timm ``MlpMixer`` built of plain Mixer blocks; a `ConfigError` on
    ``field`` (about ``source``, a hub name) naming what is not a plain MLP-Mixer (gmixer's GLU MLPs,
    ResMLP's affine blocks, gMLP's spatial gating, a stem norm, another activation ...)."""
    from timm.layers import Mlp
    from timm.models.mlp_mixer import MixerBlock, MlpMixer

    def refuse(what: str) -> ConfigError:
        return ConfigError(
            field, about(source, f"{what}, which an MLP-Mixer does not have"), "convert a plain MLP-Mixer"
        )

    def require(condition: bool, problem: str, fix: str | None = None) -> None:
        if not condition:
            raise ConfigError(field, about(source, problem), fix)

    if not isinstance(timm_model, MlpMixer):
        raise refuse(f"a {type(timm_model).__name__} is not a timm MlpMixer")
    stem = timm_model.stem
    if not isinstance(stem.norm, nn.Identity):
        raise refuse("a normalisation after the stem (stem_norm=True)")
    require(getattr(stem, "flatten", True), "the stem does not flatten its output to tokens")
    require(
        stem.img_size is not None and stem.img_size[0] == stem.img_size[1] and stem.patch_size[0] == stem.patch_size[1],
        f"image size {stem.img_size} / patch {stem.patch_size} are not square",
        "MLPMixer takes square images and patches",
    )
    require(timm_model.global_pool == "avg", "global_pool='' (no pooling) is not a classifier Mixer")
    blocks = list(timm_model.blocks)
    require(len(blocks) > 0, "has no blocks")
    norms, acts, hidden = set(), set(), set()
    for i, block in enumerate(blocks):
        if type(block) is not MixerBlock:
            kind = type(block).__name__
            what = {
                "ResBlock": "ResMLP blocks (affine 'norm', layer scale, a single linear token-mixing layer)",
                "SpatialGatingBlock": "gMLP blocks (spatial gating unit instead of token mixing)",
            }.get(kind)
            raise refuse(f"blocks[{i}] is {what or f'a {kind}, not a plain MixerBlock'}")
        for name in ("mlp_tokens", "mlp_channels"):
            mlp = getattr(block, name)
            if type(mlp) is not Mlp:
                what = {"GluMlp": "a gated (GLU) MLP as gmixer", "GatedMlp": "a gated MLP as gMLP"}.get(
                    type(mlp).__name__, f"a {type(mlp).__name__}"
                )
                raise refuse(f"blocks[{i}].{name} is {what}")
            if not isinstance(mlp.norm, nn.Identity):
                raise refuse(f"blocks[{i}].{name} normalises its hidden units")
            if not (isinstance(mlp.fc1, nn.Linear) and isinstance(mlp.fc2, nn.Linear)):
                raise refuse(f"blocks[{i}].{name} uses 1×1 convolutions")
            act = _timm_activation(mlp.act)
            if act is None:
                raise refuse(f"blocks[{i}].{name} uses the activation {type(mlp.act).__name__} (not GELU)")
            acts.add(act)
            hidden.add((name, mlp.fc1.out_features))
        for name in ("norm1", "norm2"):
            norm = getattr(block, name)
            if not isinstance(norm, nn.LayerNorm):
                raise refuse(f"blocks[{i}].{name} is a {type(norm).__name__}, not a LayerNorm")
            norms.add(norm.eps)
    if not isinstance(timm_model.norm, nn.LayerNorm):
        raise refuse(f"the final norm is a {type(timm_model.norm).__name__}, not a LayerNorm")
    norms.add(timm_model.norm.eps)
    require(len(norms) == 1, f"LayerNorms with different eps {sorted(norms)}")
    require(len(acts) == 1, f"different activations {sorted(acts)} in different MLPs")
    require(len(hidden) == 2, "hidden widths differ between blocks")
    head = timm_model.head
    first = blocks[0]
    drop = first.mlp_tokens.drop1.p
    drop_path = getattr(first.drop_path, "drop_prob", 0.0)
    if timm_model.head_drop.p > 0:
        warnings.warn(
            f"timm's dropout before the head (p={timm_model.head_drop.p}) has no MLPMixer counterpart and is "
            "not carried over (eval outputs are identical)",
            stacklevel=3,
        )
    return dict(
        num_classes=head.out_features if isinstance(head, nn.Linear) else 0,
        image_size=stem.img_size[0],
        in_chans=stem.proj.in_channels,
        patch_size=stem.patch_size[0],
        channels=timm_model.embed_dim,
        token_hidden=first.mlp_tokens.fc1.out_features,
        channel_hidden=first.mlp_channels.fc1.out_features,
        num_blocks=len(blocks),
        norm_eps=norms.pop(),
        act=acts.pop(),
        drop_rate=drop,
        # timm drops every MLP with one constant rate; ours rises linearly to this rate at the last MLP
        # (Mixer supplementary B). Eval outputs do not depend on it.
        drop_path=drop_path,
    )


def _timm_state_dict(timm_model: nn.Module) -> dict[str, torch.Tensor]:
    """timm's parameters under this project's names; absent biases / affine LayerNorm parameters
    (bias=False, elementwise_affine=False) become zeros / ones."""
    out = {}
    for name, module in timm_model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.LayerNorm)):
            if isinstance(module, nn.LayerNorm) and module.weight is None:
                shape = module.normalized_shape
                ref = next(timm_model.parameters())
                weight, bias = torch.ones(shape, dtype=ref.dtype, device=ref.device), None
            else:
                weight, bias = module.weight, module.bias
            if bias is None:
                bias = torch.zeros(
                    weight.shape[0] if weight.ndim > 1 else weight.shape, dtype=weight.dtype, device=weight.device
                )
            for kind, tensor in (("weight", weight), ("bias", bias)):
                out[from_timm_key(f"{name}.{kind}")] = tensor.detach().clone()
    return out


def from_timm(timm_model: nn.Module) -> MLPMixer:
    """An `MLPMixer` with the architecture and a copy of the weights of a timm ``MlpMixer`` built of
    plain Mixer blocks: every registered ``mixer_*`` variant and custom ones (any image, patch and
    width, LayerNorm ε, exact or tanh GELU, no biases ...). It computes the same function; its
    training-time stochastic depth rises linearly to timm's rate (timm uses that rate everywhere).

    A timm MlpMixer with other blocks (``gmixer_*``: GLU MLPs; ``resmlp_*``: affine norms and layer
    scale; ``gmlp_*``: spatial gating) or a stem norm is refused with a `ConfigError` naming it.
    """
    architecture = timm_architecture(timm_model)
    state_dict = _timm_state_dict(timm_model)
    with torch.device("meta"):  # shapes only; the tensors are then taken over from the copy
        model = MLPMixer(**architecture)
    model.load_state_dict(state_dict, strict=True, assign=True)
    return model.train(timm_model.training)


def read_hub_weights(name: str, field: str = "init_from") -> WeightsFile:
    """Weights named on a hub, through timm and huggingface_hub (their cache, ``HF_HUB_CACHE``, and
    ``HF_HUB_OFFLINE=1`` apply): ``timm:mixer_b16_224.goog_in21k_ft_in1k`` (a timm model name with its
    pretrained tag) or ``hf-hub:ORG/REPO`` (a timm-format hub repository: config.json + weights). The
    architecture is the timm model's (so no preset is needed) and ``preprocessing`` its
    ``pretrained_cfg``."""
    import timm
    from huggingface_hub import constants

    from mixer_lightning.hub import offline_or_reachable

    model_name = name.removeprefix("timm:")
    unreachable = offline_or_reachable()  # no network: the cache only, and a miss at once
    try:
        timm_model = timm.create_model(model_name, pretrained=True)
    except RuntimeError as error:
        if "Unknown model" in str(error) or "Invalid pretrained tag" in str(error):
            raise ConfigError(
                field, f"timm knows no model {model_name!r}", "see timm.list_pretrained('mixer*')"
            ) from None
        raise
    except Exception as error:  # huggingface_hub: LocalEntryNotFoundError, OfflineModeIsEnabled, connection errors
        if unreachable:
            raise ConfigError(
                field,
                f"cannot fetch {name!r} from the hub or its cache: {unreachable}, and it is not in the hub cache "
                f"({constants.HF_HUB_CACHE})",
                "download it once where the hub is reachable (it is then cached), or give a local weights file",
            ) from None
        cause = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise ConfigError(
            field,
            f"cannot fetch {name!r} from the hub or its cache ({type(error).__name__}: {cause})",
            "download it once where the hub is reachable (it is then cached; HF_HUB_OFFLINE=1 uses the cache), "
            "or give a local weights file",
        ) from None
    architecture = timm_architecture(timm_model, field, name)
    for fact in ("num_classes", "image_size", "in_chans"):  # facts of the data, not of the architecture
        architecture.pop(fact)
    architecture.pop("drop_rate"), architecture.pop("drop_path")  # training settings, not the function
    cfg = dict(getattr(timm_model, "pretrained_cfg", None) or {})
    preprocessing = pretrained_preprocessing({"num_classes": timm_model.num_classes, **cfg})
    return WeightsFile(name, "timm", _timm_state_dict(timm_model), architecture, None, preprocessing)
