"""This project's parameter names (and PyTorch tensor layouts) to a file's, both ways.

timm's ``MlpMixer`` names block i's parts ``norm1``, ``mlp_tokens``, ``norm2``, ``mlp_channels``. The
official JAX model (Mixer supplementary, Listing 1) is flax: ``stem`` an HWIO conv kernel, every
``nn.Dense`` an (in, out) kernel, LayerNorms ``scale`` and ``bias``; block i is ``MixerBlock_{i}`` with
``LayerNorm_0``, ``token_mixing/Dense_{0,1}``, ``LayerNorm_1``, ``channel_mixing/Dense_{0,1}``, then
``pre_head_layer_norm`` and ``head``."""

from __future__ import annotations

import re

import numpy as np
import torch
from einops import rearrange

_OUR_BLOCK = re.compile(r"blocks\.(\d+)\.(token_mixing|channel_mixing)\.(norm|mlp\.fc1|mlp\.fc2)\.(weight|bias)")

_TIMM_PART = {
    "norm1": "token_mixing.norm",
    "mlp_tokens": "token_mixing.mlp",
    "norm2": "channel_mixing.norm",
    "mlp_channels": "channel_mixing.mlp",
}
_TIMM_PART_INV = {ours: timm for timm, ours in _TIMM_PART.items()}
_TIMM_BLOCK = re.compile(r"blocks\.(\d+)\.(norm1|norm2|mlp_tokens|mlp_channels)\.(fc1\.|fc2\.)?(weight|bias)")

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


def from_timm_key(key: str) -> str:
    """timm's parameter name → this project's (other keys as they are: no plain Mixer has them)."""
    m = _TIMM_BLOCK.fullmatch(key)
    if m is None:
        return key
    block, part, fc, kind = m.groups()
    return f"blocks.{block}.{_TIMM_PART[part]}.{fc or ''}{kind}"


def jax_key(key: str) -> str:
    """This project's parameter name → the official JAX checkpoint's."""
    m = _OUR_BLOCK.fullmatch(key)
    if m is None:
        return _JAX_TOP_INV.get(key, key)
    block, axis, part, kind = m.groups()
    if part == "norm":
        return f"MixerBlock_{block}/LayerNorm_{int(axis == 'channel_mixing')}/{'scale' if kind == 'weight' else 'bias'}"
    return f"MixerBlock_{block}/{axis}/Dense_{int(part == 'mlp.fc2')}/{'kernel' if kind == 'weight' else 'bias'}"


_JAX_BLOCK = re.compile(
    r"MixerBlock_(\d+)/(?:LayerNorm_([01])/(scale|bias)|(token_mixing|channel_mixing)/Dense_([01])/(kernel|bias))"
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
        axis = ("token_mixing", "channel_mixing")[int(norm)]
        return f"blocks.{block}.{axis}.norm.{'weight' if norm_kind == 'scale' else 'bias'}"
    return f"blocks.{block}.{axis}.mlp.fc{int(dense) + 1}.{'weight' if dense_kind == 'kernel' else 'bias'}"


def jax_to_torch(key: str, array: np.ndarray) -> torch.Tensor:
    """A flax array as the PyTorch tensor: HWIO conv kernel → OIHW, (in, out) dense kernel → (out, in)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if key == "stem/kernel":
        return rearrange(tensor, "h w i o -> o i h w").contiguous()
    return rearrange(tensor, "i o -> o i").contiguous() if key.endswith("/kernel") else tensor


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
