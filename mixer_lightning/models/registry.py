"""A registry of model constructors: families (`mlp_mixer`, ...) and named presets (`mixer_b16`, ...).

A family constructor takes every architecture argument; a preset is a family constructor with
some arguments fixed to a paper's values (still overridable). Both are plain functions returning an
``nn.Module``, looked up by name with `create_model`, so the same names work from Python, from YAML
configs (``preset: mixer_b16``) and from the command line (``mixer models``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from torch import nn

from mixer_lightning.errors import ConfigError


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    constructor: Callable[..., nn.Module]
    defaults: dict[str, Any]
    source: str  # the paper table or section the preset comes from

    def build(self, **overrides: Any) -> nn.Module:
        return self.constructor(**{**self.defaults, **overrides})


_REGISTRY: dict[str, ModelEntry] = {}


def register_family(name: str, source: str = "") -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Register `constructor` as the generic constructor of the family `name`."""

    def wrap(constructor: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        _add(ModelEntry(name, name, constructor, {}, source))
        return constructor

    return wrap


def register_preset(name: str, family: str, source: str, **defaults: Any) -> None:
    """Register the preset `name`: the family `family` with `defaults` (overridable)."""
    _add(ModelEntry(name, family, _REGISTRY[family].constructor, defaults, source))


def _add(entry: ModelEntry) -> None:
    if entry.name in _REGISTRY:
        raise RuntimeError(f"model {entry.name!r} is registered twice")
    _REGISTRY[entry.name] = entry


def get_entry(name: str, field: str = "model") -> ModelEntry:
    """The registered family or preset `name`; a `ConfigError` on `field` if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(field, f"unknown model {name!r}", f"choose one of {', '.join(sorted(_REGISTRY))}") from None


def create_model(name: str, pretrained: bool | str = False, **overrides: Any) -> nn.Module:
    """Build the family or preset `name`; `overrides` replace the preset's (or family's) defaults.

    A preset is a paper's architecture, not one set of weights, so ``pretrained`` (timm's argument) is
    refused in one line naming where weights are loaded by name (``timm:``, ``hf-hub:``, a file)."""
    if pretrained:
        raise ConfigError(
            "pretrained",
            f"create_model builds {name!r} with random weights; weights are named by their source",
            "MLPMixerModule(preset=..., init_from='timm:mixer_b16_224.goog_in21k_ft_in1k') (or 'hf-hub:ORG/REPO', "
            "a .pth/.safetensors/.npz file), or `mixer convert --from timm:NAME --out FILE`",
        )
    return get_entry(name).build(**overrides)


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching the shell-style `pattern`, sorted."""
    return sorted(name for name in _REGISTRY if fnmatch(name, pattern))
