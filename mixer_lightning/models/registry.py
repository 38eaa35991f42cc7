"""The model registry: families (`mlp_mixer`, ...) and named presets (`mixer_b16`, ...), for `create_model`
and ``mixer models``; and `upgrade_hparams`, which reads the hyper-parameters of checkpoints written
before the LightningModule took the network (one module class per family, flat arguments, ``preset``).

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


# The LightningModule of each family before the module took the network, and its own arguments.
LEGACY_MODULES = {
    "MLPMixerModule": "mlp_mixer",
    "SMixerModule": "s_mixer",
    "SWMLPModule": "sw_mlp",
    "KronMLPModule": "kron_mlp",
    "MonarchMLPModule": "monarch_mlp",
}
TRAINING_ARGUMENTS = (*DATA_FACTS, "optimizer", "lr_scheduler", "scheduler_interval", "label_smoothing")
TRAINING_ARGUMENTS += ("layer_decay", "init_from", "upscale", "compile")


def upgrade_hparams(hparams: dict[str, Any]) -> dict[str, Any]:
    """Checkpoint hyper-parameters in the current form, ``{"net": {"class_path", "init_args"}, num_classes,
    ..., optimizer, ...}``. Those of a legacy family module (``_class_path:
    mixer_lightning.tasks.mixer.SMixerModule`` and flat arguments, None for "the preset's, else the
    default") become the family's network class with the preset's architecture and every argument
    given; anything else is returned unchanged (a copy). Pure: nothing is imported or built."""
    hparams = dict(hparams)
    module = str(hparams.get("_class_path") or "")
    family = LEGACY_MODULES.get(module.rsplit(".", 1)[-1]) if module.startswith("mixer_lightning.tasks.") else None
    if family is None or "net" in hparams:
        return hparams
    hparams.pop("_class_path")
    preset = hparams.pop("preset", None)
    entry = get_entry(preset or family, field="ckpt_path")
    architecture = {k: v for k, v in entry.defaults.items() if k not in DATA_FACTS}
    upgraded: dict[str, Any] = {}
    for key, value in hparams.items():
        if key in TRAINING_ARGUMENTS or key.startswith("_"):
            upgraded[key] = value
        elif value is not None:
            architecture[key] = value
    net = {"class_path": class_path(entry.constructor), "init_args": architecture}
    return {"net": net, **upgraded}


def upgrade_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """A config (a parsed YAML dict) written for a legacy family module (``model.class_path:
    mixer_lightning.tasks.SMixerModule`` with flat ``init_args``) in the current form (``model.net`` and the
    training arguments, as `upgrade_hparams`), or None if its model needs no upgrade."""
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict) or not str(model.get("class_path", "")).startswith("mixer_lightning.tasks."):
        return None
    hparams = upgrade_hparams({"_class_path": model["class_path"], **(model.get("init_args") or {})})
    return None if "net" not in hparams else {**config, "model": hparams}


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
