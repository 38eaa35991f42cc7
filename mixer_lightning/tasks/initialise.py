"""Initial weights for a network, from a file, optionally upscaled: what `model.init_from` and
`model.upscale` do (`ClassifierModule.build_network`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from mixer_lightning.errors import require
from mixer_lightning.models.upscale import upscale_tokens
from mixer_lightning.weights import WeightsFile, load_weights


def implied_arguments(weights: WeightsFile, module_name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments among ``given``'s names that are None there but that ``weights`` implies: the
    saved hyper-parameters of a checkpoint of the LightningModule ``module_name`` (another module's
    are not comparable), or ``act`` for a JAX file."""
    if weights.class_path is not None and weights.class_path.rsplit(".", 1)[-1] != module_name:
        return {}
    return {
        name: value
        for name, value in weights.architecture.items()
        if name in given and given[name] is None and value is not None
    }


def build_initialised(
    build: Callable[[int], nn.Module],
    image_size: int,
    weights: WeightsFile | None,
    upscale: int | None,
    field: str = "init_from",
) -> tuple[nn.Module, list[str]]:
    """``build(image_size)``, with the weights of ``weights`` (`load_weights`, a new zero head if the
    number of classes differs) and, with ``upscale`` = K, upscaled K× (`upscale_tokens`): the network
    is built at image_size / K, loaded, then upscaled; or, when the file already holds the upscaled
    network (a checkpoint of such a fine-tuning run), built, upscaled, then loaded. Returns the
    network and messages for the user."""
    factor = 1 if upscale is None else upscale
    require(
        isinstance(factor, int) and factor >= 1,
        "upscale",
        f"must be a positive integer, got {upscale!r}",
        "give the ratio of the fine-tuning image side to the pre-training one (2 for 224 → 448)",
    )
    require(
        image_size % factor == 0,
        "upscale",
        f"{factor} does not divide the image size {image_size}",
        f"choose data.image_size = {factor} × the pre-training image size",
    )
    net = build(image_size // factor)
    if factor == 1:
        return net, load_weights(net, weights, field=field) if weights is not None else []
    messages = []
    upscaled = upscale_tokens(net, factor)
    if weights is not None:
        token_keys = [k for k in weights.state_dict if ".token_mixing." in k and k in upscaled.state_dict()]
        holds_upscaled = bool(token_keys) and all(
            weights.state_dict[k].shape == upscaled.state_dict()[k].shape for k in token_keys
        )
        if holds_upscaled:
            return upscaled, load_weights(upscaled, weights, field=field)
        messages = load_weights(net, weights, field=field)
        upscaled = upscale_tokens(net, factor)
        messages.append(
            f"upscale: {image_size // factor} px → {image_size} px: token mixing initialised with "
            f"{factor * factor} block-diagonal copies, tokens ordered region by region (Mixer supplementary C)"
        )
    return upscaled, messages
