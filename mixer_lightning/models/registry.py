"""The model registry: families (`mlp_mixer`, ...) and named presets (`mixer_b16`, ...), for `create_model`
and ``mixer models``.

A family is a network class (its signature starts with ``num_classes, image_size, in_chans``) with
some arguments fixed; a preset is a family with a paper's architecture (still overridable). Configs
name the class itself (``model.net.class_path``) and write the architecture out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from torch import nn

from mixer_lightning.errors import ConfigError

DATA_FACTS = ("num_classes", "image_size", "in_chans")  # what every network's signature starts with


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    constructor: Callable[..., nn.Module]  # the network class
    defaults: dict[str, Any]
    source: str  # the paper table or section the preset comes from

    def build(self, **overrides: Any) -> nn.Module:
        return self.constructor(**{**self.defaults, **overrides})


_REGISTRY: dict[str, ModelEntry] = {}


def register_family(name: str, cls: type[nn.Module], source: str = "", **fixed: Any) -> None:
    """Register the network class `cls` as the family `name`, with the arguments `fixed` (a structure)."""
    _add(ModelEntry(name, name, cls, fixed, source))


def register_preset(name: str, family: str, source: str, **defaults: Any) -> None:
    """Register the preset `name`: the family `family` with `defaults` (overridable)."""
    base = _REGISTRY[family]
    _add(ModelEntry(name, family, base.constructor, {**base.defaults, **defaults}, source))


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

    A preset is a paper's architecture, not one set of weights: ``pretrained`` (timm's argument) is
    refused, naming where weights are loaded by name."""
    if pretrained:
        raise ConfigError(
            "pretrained",
            f"create_model builds {name!r} with random weights; weights are named by their source",
            "model.init_from: 'timm:mixer_b16_224.goog_in21k_ft_in1k', 'hf-hub:ORG/REPO' or a file, "
            "or `mixer convert --from timm:NAME --out FILE`",
        )
    return get_entry(name).build(**overrides)


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching the shell-style `pattern`, sorted."""
    return sorted(name for name in _REGISTRY if fnmatch(name, pattern))


def class_path(cls: type) -> str:
    """``mixer_lightning.models.SMixer`` for a class the package exports, else its module's path."""
    models = sys.modules.get("mixer_lightning.models")  # (imported by then: the families register there)
    if getattr(models, cls.__name__, None) is cls:
        return f"mixer_lightning.models.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


PAPER_NAMES = {"SMixer": "S-Mixer", "MLPMixer": "MLP-Mixer", "SWMLP": "SW-MLP"}  # Hayase & Karakida 2024's words


def paper_name(class_name: str, permute: bool | list[bool] = False) -> str:
    """A network's name in the papers: ``RP S-Mixer`` for an SMixer whose mixing layers are randomly permuted
    (Sec. 5.2), ``S-Mixer (RP blocks 2)`` where only some are (App. D.5)."""
    name = PAPER_NAMES.get(class_name, class_name)
    flags = permute if isinstance(permute, list) else [bool(permute)]
    if flags and all(flags):
        return f"RP {name}"
    blocks = [str(i + 1) for i, flag in enumerate(flags) if flag]
    return f"{name} (RP blocks {', '.join(blocks)})" if blocks else name
