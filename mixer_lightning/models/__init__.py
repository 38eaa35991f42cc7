"""Networks as plain PyTorch modules, usable without Lightning.

Every family and preset is built by name with `create_model` (``mixer models`` lists them). Weights
files (timm, the official JAX checkpoints) are read and written by `mixer_lightning.weights`.
"""

from mixer_lightning.models import mlp_mixer, s_mixer, shallow, sw_mlp  # noqa: F401  (register the families and presets)
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.models.pk import MixingLayer, Permutation, PKMixer
from mixer_lightning.models.registry import create_model, get_entry, list_models
from mixer_lightning.models.s_mixer import SMixer
from mixer_lightning.models.shallow import KronLinear, MonarchLinear, ShallowMLP
from mixer_lightning.models.sparse import MaskedLinear, SparseLinear
from mixer_lightning.models.sw_mlp import SWMLP
from mixer_lightning.models.upscale import upscale_tokens

__all__ = ["KronLinear", "MLPMixer", "MaskedLinear", "MonarchLinear", "SWMLP", "ShallowMLP", "SparseLinear"]
__all__ += ["MixingLayer", "PKMixer", "Permutation", "SMixer", "create_model", "get_entry", "list_models"]
__all__ += ["num_params", "upscale_tokens"]


def num_params(model, exclude_head: bool = False) -> int:
    """Trainable parameters of `model` (without the classifier ``head`` if asked)."""
    parameters = model.named_parameters()
    return sum(
        p.numel() for name, p in parameters if p.requires_grad and not (exclude_head and name.startswith("head."))
    )
