"""What `read_weights` returns: weights read from any file, in this project's key layout (`WeightsFile`),
with the file's own spelling of each key for errors (`mixer_lightning.weights.keys`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from mixer_lightning.weights.keys import jax_key, jax_shape, timm_key

Format = Literal["lightning", "timm", "jax", "mixer"]

FORMAT_NAMES = {
    "lightning": "a mixer-lightning checkpoint",
    "mixer": "a mixer-lightning state dict",
    "timm": "timm MlpMixer weights",
    "jax": "an official JAX (flax) checkpoint",
}
HUB_PREFIXES = ("timm:", "hf-hub:")


@dataclass
class WeightsFile:
    """Weights read from a file, in this project's key layout.

    Attributes:
        path: the file.
        format: what wrote it (see `FORMAT_NAMES`).
        state_dict: parameter name → tensor, this project's names and PyTorch layouts.
        architecture: architecture arguments the file implies (a mixer-lightning checkpoint's saved
            hyper-parameters; ``act="gelu_tanh"`` for a JAX file), to use where the user gives none.
        class_path: the LightningModule class of a mixer-lightning checkpoint.
        preprocessing: what the weights were trained on, from timm's ``pretrained_cfg`` (``mean``,
            ``std``, ``crop_pct``, ``crop_mode``, ``interpolation``, ``input_size``; ``label_names``, the
            name of each class, where the hub's config gives them), for weights named on a hub.
        data: a mixer-lightning checkpoint's facts of its data (its ``data`` entry), carried over by
            ``mixer convert``.
    """

    path: str
    format: Format
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
