"""What `read_weights` returns: weights from any file in this project's key layout, with the file's
own spelling of each key for errors (`mixer_lightning.weights.keys`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from mixer_lightning.weights.keys import jax_key, jax_shape, timm_key

FORMAT_NAMES = {
    "lightning": "a mixer-lightning checkpoint",
    "mixer": "a mixer-lightning state dict",
    "timm": "timm MlpMixer weights",
    "jax": "an official JAX (flax) checkpoint",
}
HUB_PREFIXES = ("timm:", "hf-hub:")


@dataclass
class WeightsFile:
    """Weights read from `path`, written by `format` (`FORMAT_NAMES`): `state_dict` in this project's
    names and layouts; `architecture`, the architecture arguments the file implies (a checkpoint's
    hyper-parameters, ``act="gelu_tanh"`` for a JAX file); `class_path`, a checkpoint's LightningModule;
    `preprocessing`, timm's ``pretrained_cfg`` of hub weights (with ``label_names``); `data`, a
    checkpoint's data facts."""

    path: str
    format: Literal["lightning", "timm", "jax", "mixer"]
    state_dict: dict[str, torch.Tensor]
    architecture: dict[str, Any] = field(default_factory=dict)
    class_path: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None

    def file_key(self, key: str) -> str:
        """This project's parameter name as the file spells it."""
        return {"timm": timm_key, "jax": jax_key}.get(self.format, lambda k: k)(key)

    def file_shape(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return jax_shape(key, tuple(shape)) if self.format == "jax" else tuple(shape)

    def num_blocks(self) -> int:
        blocks = {int(m.group(1)) for k in self.state_dict if (m := re.match(r"blocks\.(\d+)\.", k))}
        return max(blocks) + 1 if blocks else 0


# The types of a checkpoint's entries that the commands read (the data facts: `data.predict.data_facts`).
NUMBER, NUMBERS = (int, float), (list, tuple)
FACT_TYPES = {
    "dataset": str,
    "num_classes": int,
    "class_names": NUMBERS,
    "image_size": int,
    "in_chans": int,
    "mean": NUMBERS,
    "std": NUMBERS,
    "eval_crop": str,
    "eval_crop_pct": NUMBER,
    "interpolation": str,
    "input_permutation": str,
    "permutation_patch_size": int,
    "permutation_seed": int,
}


def schema_problem(checkpoint: dict[str, Any]) -> str | None:
    """What in `checkpoint` is not of the form every command reads (None: all is): the state dict tensors by
    name, the hyper-parameters and the data facts mappings of plain values, the epoch and step numbers."""
    state = checkpoint["state_dict"]
    if not isinstance(state, dict):
        return f"its state_dict is a {type(state).__name__}, not tensors by name"
    wrong = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if wrong is not None:
        return f"its state_dict entry {wrong!r} is a {type(state[wrong]).__name__}, not a tensor"
    for key, kind in (("hyper_parameters", dict), ("data", dict), ("epoch", int), ("global_step", int)):
        if checkpoint.get(key) is not None and not isinstance(checkpoint[key], kind):
            return f"its {key} is a {type(checkpoint[key]).__name__}, not a {kind.__name__}"
    facts = checkpoint.get("data") or {}
    for key, kind in FACT_TYPES.items():
        value = facts.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"its data fact {key} is {value!r}"
        if kind is NUMBERS and key != "class_names" and value is not None:
            if not all(isinstance(v, NUMBER) for v in value):
                return f"its data fact {key} is {value!r}"
    return None


def layout_problem(checkpoint: dict[str, Any]) -> str | None:
    """Why `checkpoint` is of another layout than this release writes (None: it is this one's): hyper-parameters
    naming a module of its own (``_class_path``) and no ``net``, as before the module took the network."""
    hparams = checkpoint.get("hyper_parameters") or {}
    if isinstance(hparams, dict) and "_class_path" in hparams and "net" not in hparams:
        return f"its hyper-parameters are of another layout ({hparams['_class_path']}, no model.net)"
    return None
