"""Key and tensor layouts: each maps this project's parameter names (and PyTorch tensor layouts) to a
file's, in both directions.

timm's ``MlpMixer`` names block i's parts ``norm1``, ``mlp_tokens``, ``norm2``, ``mlp_channels``. The
official JAX model (Mixer supplementary, Listing 1; ``vit_jax/models_mixer.py``) is flax: ``stem`` is
an ``nn.Conv`` with an HWIO kernel (P, P, in, C), every ``nn.Dense`` has an (in, out) kernel
(PyTorch's ``nn.Linear`` stores (out, in)), LayerNorms have ``scale`` and ``bias``; block i is
``MixerBlock_{i}`` with ``LayerNorm_0`` → ``token_mixing/Dense_{0,1}`` → ``LayerNorm_1`` →
``channel_mixing/Dense_{0,1}``, then ``pre_head_layer_norm`` and ``head``.

A translation that meets a key a plain Mixer does not have raises a `ConfigError` on ``field``, its
problem prefixed by ``source`` (the file) when given.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from einops import rearrange

from mixer_lightning.errors import ConfigError, require

_OUR_BLOCK = re.compile(r"blocks\.(\d+)\.(token_mixing|channel_mixing)\.(norm|mlp\.fc1|mlp\.fc2)\.(weight|bias)")

_TIMM_PART = {
    "norm1": "token_mixing.norm",
    "mlp_tokens": "token_mixing.mlp",
    "norm2": "channel_mixing.norm",
    "mlp_channels": "channel_mixing.mlp",
}
_TIMM_PART_INV = {ours: timm for timm, ours in _TIMM_PART.items()}
_TIMM_BLOCK = re.compile(r"blocks\.(\d+)\.(norm1|norm2|mlp_tokens|mlp_channels)\.(fc1\.|fc2\.)?(weight|bias)")

# Keys of timm's other MlpMixer block types, and what in them a plain Mixer lacks.
_TIMM_UNSUPPORTED = [
    (
        re.compile(r"\.(linear_tokens|ls1|ls2)\b|\.(alpha|beta)$"),
        "ResMLP blocks (affine 'norm', layer scale, a single linear token-mixing layer)",
    ),
    (
        re.compile(r"\.gate\.|^blocks\.\d+\.norm\.|mlp_channels\.gate"),
        "gMLP blocks (spatial gating unit instead of token mixing)",
    ),
    (re.compile(r"^stem\.norm\."), "a LayerNorm after the stem (stem_norm=True)"),
]

# Names only timm's MlpMixer family uses (Mixer, GLU-Mixer, ResMLP, gMLP blocks): a file with them is timm's.
TIMM_NAMES = re.compile(r"^blocks\.\d+\.(norm1|norm2|mlp_tokens|mlp_channels|linear_tokens|ls1|ls2)\b")


def about(source: str, problem: str) -> str:
    """`problem`, prefixed by the file it is about (when there is one)."""
    return f"{source}: {problem}" if source else problem


def timm_key(key: str) -> str:
    """This project's parameter name → timm's."""
    m = _OUR_BLOCK.fullmatch(key)
    if m is None:
        return key
    block, axis, part, kind = m.groups()
    sub, _, fc = part.partition(".")
    name = _TIMM_PART_INV[f"{axis}.{sub}"]
    return f"blocks.{block}.{name}.{fc + '.' if fc else ''}{kind}"


def from_timm_key(key: str, field: str = "weights", source: str = "") -> str:
    """timm's parameter name → this project's (`ConfigError` for what a plain Mixer does not have)."""
    for pattern, what in _TIMM_UNSUPPORTED:
        if pattern.search(key):
            raise ConfigError(
                field,
                about(source, f"{key!r} belongs to {what}, which an MLP-Mixer does not have"),
                "convert a plain MLP-Mixer",
            )
    m = _TIMM_BLOCK.fullmatch(key)
    if m is not None:
        block, part, fc, kind = m.groups()
        return f"blocks.{block}.{_TIMM_PART[part]}.{fc or ''}{kind}"
    return key


def jax_key(key: str) -> str:
    """This project's parameter name → the official JAX checkpoint's."""
    m = _OUR_BLOCK.fullmatch(key)
    if m is not None:
        block, axis, part, kind = m.groups()
        if part == "norm":
            norm = "LayerNorm_0" if axis == "token_mixing" else "LayerNorm_1"
            return f"MixerBlock_{block}/{norm}/{'scale' if kind == 'weight' else 'bias'}"
        dense = "Dense_0" if part == "mlp.fc1" else "Dense_1"
        return f"MixerBlock_{block}/{axis}/{dense}/{'kernel' if kind == 'weight' else 'bias'}"
    return _JAX_TOP_INV.get(key, key)


_JAX_BLOCK = re.compile(
    r"MixerBlock_(\d+)/(?:(LayerNorm_[01])/(scale|bias)|(token_mixing|channel_mixing)/(Dense_[01])/(kernel|bias))"
)
_JAX_TOP = {
    "stem/kernel": "stem.proj.weight",
    "stem/bias": "stem.proj.bias",
    "pre_head_layer_norm/scale": "norm.weight",
    "pre_head_layer_norm/bias": "norm.bias",
    "head/kernel": "head.weight",
    "head/bias": "head.bias",
}
_JAX_TOP_INV = {ours: jax for jax, ours in _JAX_TOP.items()}


def from_jax_key(key: str) -> str | None:
    """The official JAX checkpoint's parameter name → this project's (None if it is not a Mixer's)."""
    if key in _JAX_TOP:
        return _JAX_TOP[key]
    m = _JAX_BLOCK.fullmatch(key)
    if m is None:
        return None
    block, norm, norm_kind, axis, dense, dense_kind = m.groups()
    if norm is not None:
        axis = "token_mixing" if norm == "LayerNorm_0" else "channel_mixing"
        return f"blocks.{block}.{axis}.norm.{'weight' if norm_kind == 'scale' else 'bias'}"
    fc = "fc1" if dense == "Dense_0" else "fc2"
    return f"blocks.{block}.{axis}.mlp.{fc}.{'weight' if dense_kind == 'kernel' else 'bias'}"


def jax_to_torch(key: str, array: np.ndarray, field: str = "weights", source: str = "") -> torch.Tensor:
    """A flax array as the PyTorch tensor: HWIO conv kernel → OIHW, (in, out) dense kernel → (out, in)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if key == "stem/kernel":
        shape = tuple(tensor.shape)
        require(tensor.ndim == 4, field, about(source, f"{key} must be a 4-D HWIO kernel, got shape {shape}"))
        return rearrange(tensor, "h w i o -> o i h w").contiguous()
    if key.endswith("/kernel"):
        shape = tuple(tensor.shape)
        require(tensor.ndim == 2, field, about(source, f"{key} must be a 2-D (in, out) kernel, got shape {shape}"))
        return rearrange(tensor, "i o -> o i").contiguous()
    return tensor


def torch_to_jax(key: str, tensor: torch.Tensor) -> np.ndarray:
    """Inverse of `jax_to_torch` (``key`` is this project's name)."""
    tensor = tensor.detach().cpu()
    if key == "stem.proj.weight":
        tensor = rearrange(tensor, "o i h w -> h w i o")
    elif key.endswith(".weight") and tensor.ndim == 2:
        tensor = rearrange(tensor, "o i -> i o")
    return np.ascontiguousarray(tensor.numpy())


def jax_shape(key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A PyTorch shape in the JAX layout, for error messages."""
    if key == "stem.proj.weight" and len(shape) == 4:
        return (shape[2], shape[3], shape[1], shape[0])
    if key.endswith(".weight") and len(shape) == 2:
        return (shape[1], shape[0])
    return shape
