"""MLP-Mixer weights from timm, the official JAX checkpoints and the hub, and back to JAX: `read_weights`
(any file or hub name, into this project's key layout), `load_weights` (into a model, naming any
mismatched key as the file spells it), `from_timm`, `to_jax_npz`; `weights.preprocessing`: the
preprocessing hub weights expect, as the data's defaults. Plain PyTorch, as `mixer_lightning.models`."""

from mixer_lightning.weights.file import FORMAT_NAMES, HUB_PREFIXES, WeightsFile
from mixer_lightning.weights.io import read_weights
from mixer_lightning.weights.jax import to_jax_npz
from mixer_lightning.weights.load import infer_architecture, load_weights
from mixer_lightning.weights.timm import from_timm, read_hub_weights, timm_architecture

__all__ = [
    "FORMAT_NAMES",
    "HUB_PREFIXES",
    "WeightsFile",
    "from_timm",
    "infer_architecture",
    "load_weights",
    "read_hub_weights",
    "read_weights",
    "timm_architecture",
    "to_jax_npz",
]
