"""The network of a `ClassifierModule`, built from its factory with the data's facts, initialised from
``init_from`` (a checkpoint, timm or JAX weights) and upscaled K× with ``upscale`` (Mixer supplementary C).

``init_from`` implies the network arguments the factory leaves at their defaults (a checkpoint's, of the
same network class; ``act: gelu_tanh`` for a JAX file), but not `NOT_IMPLIED`."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from mixer_lightning.errors import ConfigError, field_prefix, require
from mixer_lightning.models.upscale import upscale_tokens
from mixer_lightning.safety.trust import is_trusted
from mixer_lightning.weights import WeightsFile, load_weights, read_weights

# Regularisation is the fine-tuning run's own (Tolstikhin Sec. 3: fine-tuning without it), not the file's.
NOT_IMPLIED = ("drop_rate", "drop_path")


def network_class(net: Any) -> type | None:
    """The class a network factory builds: a class, or a `functools.partial` of one (as jsonargparse makes)."""
    if isinstance(net, functools.partial):
        return next((c for c in (net.func, *net.args) if inspect.isclass(c)), None)
    return net if inspect.isclass(net) else None


def import_network(path: str, field: str, source: str, base: type = nn.Module) -> type:
    """The network class (or other `base`) at `path`, imported only from a trusted package (`safety.trust`)."""
    fix, what = "if you trust it, add its package to MIXER_TRUSTED_MODULES", "network" if base is nn.Module else "class"
    require(is_trusted(path), field, f"{source} names the {what} {path!r}, outside the trusted packages", fix)
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    require(inspect.isclass(cls) and issubclass(cls, base), field, f"{source}: {path!r} is no {what} class")
    return cls


def file_network(weights: WeightsFile) -> tuple[str | None, dict[str, Any], int | None]:
    """(network class path or None, the arguments it implies, its upscale) of a weights file."""
    net = weights.architecture.get("net")
    if isinstance(net, dict):  # a checkpoint's ``model.net``
        return net.get("class_path"), dict(net.get("init_args") or {}), weights.architecture.get("upscale")
    return weights.class_path, dict(weights.architecture), None  # JAX: act; a timm folder: none


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
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items() if p.default is not p.empty}
    left = {k for k, default in defaults.items() if k not in NOT_IMPLIED and given.get(k, default) == default}
    return {k: v for k, v in arguments.items() if k in left and v != defaults[k]}, upscale


def build_network(
    factory: Any, facts: tuple[int, int, int], init_from: str | None, upscale: int | None
) -> tuple[nn.Module, dict[str, Any], int | None]:
    """(network, implied arguments, upscale): `factory`'s network for the data `facts`, with ``init_from``'s
    weights (a new zero head for other classes) and, with ``upscale`` = K, built at image_size / K, loaded,
    upscaled (or built, upscaled, loaded when the file holds an upscaled network: a checkpoint of such a run)."""
    num_classes, image_size, in_chans = facts
    with field_prefix("model"):
        weights = read_weights(init_from, "init_from") if init_from else None
        implied, implied_upscale = implied_arguments(factory, weights, repr(init_from)) if weights else ({}, None)
        if implied:
            rank_zero_info(f"model.net: {', '.join(f'{k}={v!r}' for k, v in implied.items())} from {init_from}")
        factor = int(upscale or implied_upscale or 1)  # a plain int for the checkpoints
        upscale = None if upscale is None and implied_upscale is None else factor
        if factor != 1 and weights is None:
            rank_zero_warn(
                f"model.upscale: {factor} without model.init_from: the upscaled network starts from a random "
                "initialisation (as it should when a checkpoint (--ckpt_path) supplies its weights)"
            )
        require(image_size % factor == 0, "upscale", f"{factor} does not divide the image size {image_size}")
        if isinstance(factory, nn.Module):
            require(factor == 1, "upscale", "needs the network as a factory (net: {class_path, init_args})")
            net = factory
        else:
            with field_prefix("net"):  # the network's own checks name model.net.<argument>
                net = factory(num_classes, image_size // factor, in_chans, **implied)
        messages = load_weights(net, weights, field="init_from") if weights is not None and factor == 1 else []
        if factor != 1:
            upscaled = upscale_tokens(net, factor)
            state = upscaled.state_dict()
            keys = [k for k in weights.state_dict if ".token_mixing." in k and k in state] if weights else []
            if keys and all(weights.state_dict[k].shape == state[k].shape for k in keys):  # the file is upscaled
                messages = load_weights(upscaled, weights, field="init_from")
            elif weights is not None:
                messages = load_weights(net, weights, field="init_from")
                upscaled = upscale_tokens(net, factor)
                size = f"{image_size // factor} px → {image_size} px"
                copies = f"{factor * factor} block-diagonal copies, tokens ordered region by region"
                messages.append(f"upscale: {size}: token mixing initialised with {copies} (Mixer supplementary C)")
            net = upscaled
    for message in messages:
        rank_zero_info(f"model.{message}")
    return net, implied, upscale
