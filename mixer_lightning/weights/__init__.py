"""MLP-Mixer weights from timm and from the official JAX checkpoints, and back to JAX.

- `from_timm(timm_model)`: an `MLPMixer` computing the same function as a timm ``MlpMixer`` built of
  plain Mixer blocks (every registered ``mixer_*`` variant, or a custom one) (`weights.timm`).
- `read_weights(path)`: a weights file in this project's key layout, whatever it was written by: a
  Lightning checkpoint of this project, timm weights, an official JAX ``.npz``, or a hub name
  (`weights.io`, into a `weights.file.WeightsFile`; the layouts are in `weights.keys`).
- `load_weights(model, weights)`: copy them into a model, naming any missing or misshaped key in
  the file's own spelling, and re-initialising the head when the number of classes differs
  (`weights.load`).
- `to_jax_npz(model, path)`: write a model in the official JAX layout (`weights.jax`).
- `weights.preprocessing`: the preprocessing hub weights were trained with, as the data's defaults.

Plain PyTorch, as `mixer_lightning.models`: what builds a LightningModule's network from a file
(``model.init_from``, ``model.upscale``) is `mixer_lightning.tasks.initialise`.
"""

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
