"""A model as an official JAX checkpoint (`to_jax_npz`; the layout: `mixer_lightning.weights.keys`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from einops import rearrange

from mixer_lightning.errors import require
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.weights.keys import jax_key, torch_to_jax


def to_jax_npz(model: MLPMixer, path: str | Path, field: str = "model") -> dict[str, np.ndarray]:
    """Write `model` as an official JAX ``.npz`` (which has no SkipLayer nor permutations) and return
    the arrays. A K-upscaled model's region-ordered token mixing is permuted to the JAX code's raster
    order: the same function, as a permutation of the tokens commutes with all but token mixing."""
    require(isinstance(model, MLPMixer), field, f"cannot write a {type(model).__name__} as a JAX Mixer")
    plain = not any(model.permute) and model.blocks[0].token_mixing.skip is None
    require(plain, field, "the JAX Mixer has no random permutations and no SkipLayer", "export one with S = S0")
    state = model.state_dict()
    regions = model.stem.regions
    if regions > 1:
        # order[j] = raster index of the j-th region-ordered token (`PatchEmbed`'s order); W1' = W1[:, order⁻¹],
        # W2' = W2[order⁻¹].
        raster = rearrange(torch.arange(model.stem.num_patches), "(row col) -> row col", row=model.stem.grid)
        order = rearrange(raster, "(kh h) (kw w) -> (kh kw h w)", kh=regions, kw=regions)
        inverse = torch.argsort(order)
        for i in range(len(model.blocks)):
            prefix = f"blocks.{i}.token_mixing.mlp."
            state[prefix + "fc1.weight"] = state[prefix + "fc1.weight"][:, inverse]
            state[prefix + "fc2.weight"] = state[prefix + "fc2.weight"][inverse]
            state[prefix + "fc2.bias"] = state[prefix + "fc2.bias"][inverse]
    arrays = {jax_key(k): torch_to_jax(k, v) for k, v in state.items()}
    np.savez(path, **arrays)
    return arrays
