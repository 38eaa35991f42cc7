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
