"""Exact higher-resolution fine-tuning of a Mixer (Tolstikhin et al. 2021, supplementary C).

At K× the image side with the patch size kept, S grows to K²·S. The larger image is split into K×K
regions, the tokens ordered region by region, and every token-mixing weight replaced by I_{K²} ⊗ W
(biases tiled): each region is processed exactly as the pre-trained MLP processed a whole image, so on
K×K tiled base images the logits are the mean of the base model's (`tests/test_upscale.py`, float64).
"""

from __future__ import annotations

import copy

import torch
from einops import rearrange
from torch import nn

from mixer_lightning.errors import require
from mixer_lightning.models.layers import PatchEmbed
from mixer_lightning.models.pk import PKMixer

# Modules a mixing function may contain besides its Linear layers: all act element-wise, so they
# commute with the block-diagonal structure (σ(I ⊗ W x) = (I ⊗ σ∘W) x).
_ELEMENTWISE = (nn.GELU, nn.Dropout, nn.Identity)


def block_diagonal_linear(linear: nn.Linear, copies: int) -> nn.Linear:
    """The Linear layer with weight I_copies ⊗ W (``copies`` copies of W on the diagonal) and the bias
    tiled ``copies`` times, on the same device and dtype."""
    weight = linear.weight
    out = nn.Linear(
        linear.in_features * copies,
        linear.out_features * copies,
        bias=linear.bias is not None,
        device=weight.device,
        dtype=weight.dtype,
    )
    with torch.no_grad():
        out.weight.copy_(torch.block_diag(*[weight] * copies))
        if linear.bias is not None:
            out.bias.copy_(linear.bias.repeat(copies))
    out.requires_grad_(weight.requires_grad)
    return out


def _block_diagonal_mlp(mlp: nn.Module, copies: int) -> None:
    """Replace, in place, every Linear layer of the mixing function ``mlp`` by its block-diagonal copy."""
    for name, child in list(mlp.named_children()):
        require(isinstance(child, (nn.Linear, *_ELEMENTWISE)), "upscale", f"{name}: not element-wise, not a Linear")
        if isinstance(child, nn.Linear):
            setattr(mlp, name, block_diagonal_linear(child, copies))


def upscale_tokens(model: PKMixer, factor: int) -> PKMixer:
    """A copy of ``model`` for images ``factor`` (= K) times larger per side (supplementary C): the stem
    emits tokens region by region, every token-mixing Linear is I_{K²} ⊗ W, a first-block SkipLayer W̃
    becomes I_{K²} ⊗ W̃ (so S ≠ S0 upscales exactly too). RP blocks are refused: J1, J2 mix the entries of
    all tokens, so there is no per-region sequence and the construction is not defined."""
    require(isinstance(model, PKMixer), "upscale", f"cannot upscale a {type(model).__name__}", "upscale a Mixer")
    permuted = [i for i, flag in enumerate(model.permute) if flag]
    require(
        not permuted,
        "upscale",
        f"block(s) {permuted} are random-permuted (RP): their permutations J1, J2 mix the S·C entries across "
        "tokens and channels, so the token sequence cannot be split into regions (supplementary C is "
        "defined for normal token mixing only)",
        "upscale a normal Mixer (permute: false)",
    )
    if factor == 1:
        return copy.deepcopy(model)
    copies = factor * factor
    new = copy.deepcopy(model)
    stem = model.stem
    with torch.device("meta"):  # only the shapes; the projection itself is copied unchanged
        new.stem = PatchEmbed(
            stem.image_size * factor, stem.patch_size, stem.proj.in_channels, stem.proj.out_channels, regions=factor
        )
    new.stem.proj = copy.deepcopy(stem.proj)
    for block in new.blocks:
        layer = block.token_mixing
        _block_diagonal_mlp(layer.mlp, copies)
        if layer.skip is not None:  # SkipLayer(X) = LN(W̃X): W̃ → I ⊗ W̃
            layer.skip.proj = block_diagonal_linear(layer.skip.proj, copies)
        layer.tokens_in *= copies
        layer.tokens *= copies
        block.channel_mixing.tokens_in *= copies
        block.channel_mixing.tokens *= copies
    new.tokens *= copies
    if hasattr(new, "token_hidden"):  # MLPMixer: D_S → K²·D_S
        new.token_hidden *= copies
    return new


def region_tokens(tokens: torch.Tensor, factor: int) -> list[torch.Tensor]:
    """Split a region-ordered (B, K²·S, C) token sequence into the K² per-region (B, S, C) sequences,
    regions in raster order (top-left, top-right, ..., bottom-right)."""
    return list(rearrange(tokens, "b (regions s) c -> regions b s c", regions=factor * factor))


def tile_images(images: list[torch.Tensor], factor: int) -> torch.Tensor:
    """The (B, C, K·H, K·W) image whose K×K regions are ``images`` (K² tensors (B, C, H, W), in raster order)."""
    require(len(images) == factor * factor, "images", f"need {factor * factor} tiles, got {len(images)}")
    return rearrange(images, "(kh kw) b c h w -> b c (kh h) (kw w)", kh=factor)
