"""The network of a `ClassifierModule`, built from its factory with the data's facts, and initialised
from ``init_from`` (a checkpoint, timm or JAX weights), upscaled K× with ``upscale`` (Mixer supplementary C)."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from torch import nn

from mixer_lightning.errors import ConfigError, field_prefix, require
from mixer_lightning.models.registry import upgrade_hparams
from mixer_lightning.models.upscale import upscale_tokens
from mixer_lightning.safety.trust import is_trusted
from mixer_lightning.weights import WeightsFile, load_weights

# Regularisation is the fine-tuning run's own (Tolstikhin Sec. 3: fine-tuning without it), not the file's.
NOT_IMPLIED = ("drop_rate", "drop_path")


def network_class(net: Any) -> type | None:
    """The class a network factory builds: a class, or a `functools.partial` of one (as jsonargparse makes)."""
    if isinstance(net, functools.partial):
        return next((c for c in (net.func, *net.args) if inspect.isclass(c)), None)
    return net if inspect.isclass(net) else None


def import_network(path: str, field: str, source: str) -> type:
    """The network class at `path`, imported only from a trusted package (`safety.trust`)."""
    fix = "if you trust it, add its package to MIXER_TRUSTED_MODULES"
    require(is_trusted(path), field, f"{source} names the network {path!r}, outside the trusted packages", fix)
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    require(inspect.isclass(cls) and issubclass(cls, nn.Module), field, f"{source}: {path!r} is no network class")
    return cls


def file_network(weights: WeightsFile) -> tuple[str | None, dict[str, Any], int | None]:
    """(network class path or None, the arguments it implies, its upscale) of a weights file."""
    hparams = dict(weights.architecture)
    if weights.class_path:
        hparams["_class_path"] = weights.class_path
    hparams = upgrade_hparams(hparams)
    net = hparams.get("net")
    if isinstance(net, dict):
        return net.get("class_path"), dict(net.get("init_args") or {}), hparams.get("upscale")
    return None, {k: v for k, v in hparams.items() if not k.startswith("_")}, None  # JAX: act; a timm folder


def implied_arguments(factory: Any, weights: WeightsFile, source: str) -> tuple[dict[str, Any], int | None]:
    """The network arguments `weights` implies where the factory leaves them at their defaults (except
    `NOT_IMPLIED`), and the file's upscale; a `ConfigError` if it holds another network class."""
    cls = network_class(factory)
    path, arguments, upscale = file_network(weights)
    if cls is None:
        return {}, upscale
    if path is not None and import_network(path, "init_from", source) is not cls:
        raise ConfigError(
            "init_from",
            f"{source} holds a {path}, this model's network is a {cls.__name__}",
            f"set model.net.class_path to {path}, or start from weights of a {cls.__name__}",
        )
    given = factory.keywords if isinstance(factory, functools.partial) else {}
    parameters = inspect.signature(cls).parameters
    implied = {}
    for name, value in arguments.items():
        default = parameters[name].default if name in parameters else inspect.Parameter.empty
        if default is inspect.Parameter.empty or name in NOT_IMPLIED or value == default:
            continue
        if given.get(name, default) == default:
            implied[name] = value
    return implied, upscale


def build_initialised(
    factory: Any,
    facts: tuple[int, int, int],
    weights: WeightsFile | None,
    upscale: int | None,
    implied: dict[str, Any],
    field: str = "init_from",
) -> tuple[nn.Module, list[str]]:
    """The network of `factory` for the data `facts` (num_classes, image_size, in_chans) with the `implied`
    arguments, with the weights of ``weights`` (`load_weights`: a new zero head if the number of classes
    differs), and with ``upscale`` = K upscaled K× (`upscale_tokens`): built at image_size / K, loaded,
    upscaled; or, when the file already holds the upscaled network (a checkpoint of such a run), built,
    upscaled, loaded. Returns the network and messages for the user."""
    num_classes, image_size, in_chans = facts
    factor = upscale or 1
    require(
        image_size % factor == 0,
        "upscale",
        f"{factor} does not divide the image size {image_size}",
        f"choose data.image_size = {factor} × the pre-training image size",
    )
    if isinstance(factory, nn.Module):
        require(factor == 1, "upscale", "needs the network as a factory (net: {class_path, init_args})")
        net = factory
    else:
        with field_prefix("net"):  # the network's own checks name model.net.<argument>
            net = factory(num_classes, image_size // factor, in_chans, **implied)
    if factor == 1:
        return net, load_weights(net, weights, field=field) if weights is not None else []
    upscaled = upscale_tokens(net, factor)
    if weights is None:
        return upscaled, []
    token_keys = [k for k in weights.state_dict if ".token_mixing." in k and k in upscaled.state_dict()]
    if token_keys and all(weights.state_dict[k].shape == upscaled.state_dict()[k].shape for k in token_keys):
        return upscaled, load_weights(upscaled, weights, field=field)
    messages = load_weights(net, weights, field=field)
    messages.append(
        f"upscale: {image_size // factor} px → {image_size} px: token mixing initialised with "
        f"{factor * factor} block-diagonal copies, tokens ordered region by region (Mixer supplementary C)"
    )
    return upscale_tokens(net, factor), messages
