"""Writing a model as an official JAX checkpoint (`to_jax_npz`; the layout is in
`mixer_lightning.weights.keys`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from einops import rearrange

from mixer_lightning.errors import require
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.weights.keys import jax_key, torch_to_jax


def to_jax_npz(model: MLPMixer, path: str | Path) -> dict[str, np.ndarray]:
    """Write ``model`` as an official JAX checkpoint (``.npz``, the layout of the module docstring)
    and return the arrays. The JAX Mixer has neither SkipLayer nor permutations, so models with
    them are refused. A K-upscaled model (region-ordered tokens) is written with its token-mixing
    weights permuted to the raster token order of the JAX code: the same function, since a
    permutation of the tokens commutes with everything but token mixing."""
    require(isinstance(model, MLPMixer), "model", f"cannot write a {type(model).__name__} as a JAX Mixer")
    require(
        not any(model.permute) and model.blocks[0].token_mixing.skip is None,
        "model",
        "the JAX Mixer has no random permutations and no SkipLayer",
        "export a normal MLP-Mixer with S = S0",
    )
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
