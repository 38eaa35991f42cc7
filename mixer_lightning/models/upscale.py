"""Exact higher-resolution fine-tuning of a Mixer (Tolstikhin et al. 2021, supplementary C).

Fine-tuning at K× the pre-training image side keeps the patch size, so the token sequence grows from
S to K²·S. The supplementary splits the larger image into K×K equal regions, orders the token
sequence region by region (each region's tokens in its own raster order), and replaces every weight
of the token-mixing MLP by the block-diagonal matrix with K² copies of it on the diagonal (biases
tiled), e.g. W1 ∈ R^{D_S×S} by W1' = I_{K²} ⊗ W1 ∈ R^{K²D_S × K²S}. Each region is then processed
exactly as the pre-trained MLP processed a whole image; channel mixing, LayerNorm and the head act
on each token alone and are unchanged. Hence, for an image made by tiling K×K base-size images, the
upscaled model's token-mixing outputs are, region by region, the base model's outputs on the tiles,
and (global average pooling being linear) its logits are the mean of the base model's logits.

No public implementation of this construction exists; `tests/test_upscale.py` checks the identity
in float64.
"""

from __future__ import annotations

import copy

import torch
from einops import rearrange
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.layers import FcBlock, MlpBlock, PatchEmbed
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


def _block_diagonal_mlp(mlp: nn.Module, copies: int, where: str) -> None:
    """Replace, in place, every Linear layer of the mixing function ``mlp`` by its block-diagonal copy."""
    if not isinstance(mlp, (MlpBlock, FcBlock)):
        raise ConfigError(
            "upscale",
            f"{where} uses a {type(mlp).__name__} mixing function; the block-diagonal construction is "
            "implemented for the MLP-Mixer's MLP and the S-Mixer's FC + σ",
        )
    for name, child in list(mlp.named_children()):
        if isinstance(child, nn.Linear):
            setattr(mlp, name, block_diagonal_linear(child, copies))
        elif not isinstance(child, _ELEMENTWISE):
            raise ConfigError(
                "upscale",
                f"{where}.{name} is a {type(child).__name__}, not element-wise, so the token-mixing MLP "
                "would not process the regions independently",
            )


def upscale_tokens(model: PKMixer, factor: int) -> PKMixer:
    """A copy of ``model`` for images ``factor`` (= K) times larger per side, initialised as the Mixer
    supplementary C prescribes (see the module docstring). ``model`` itself is left unchanged.

    The returned model's stem emits tokens region by region (`PatchEmbed` with ``regions = K``), every
    token-mixing Linear layer is I_{K²} ⊗ W (D_S and S grow by K²), and a first-block SkipLayer
    W̃ ∈ R^{S×S0} becomes I_{K²} ⊗ W̃ (its LayerNorm acts per token), so models with S ≠ S0 upscale
    exactly as well. Random-permuted (RP) blocks are refused: their permutations J1, J2 mix the S·C
    entries of all tokens and channels, so there is no per-region token sequence to copy the weights
    onto, and the supplementary's construction is not defined for them.
    """
    require(
        isinstance(factor, int) and not isinstance(factor, bool) and factor >= 1,
        "upscale",
        f"must be a positive integer, got {factor!r}",
        "give the ratio of the new image side to the pre-training one, e.g. 2 for 224 → 448",
    )
    if not isinstance(model, PKMixer):
        raise ConfigError("upscale", f"cannot upscale a {type(model).__name__}", "upscale an MLP-Mixer or S-Mixer")
    require(
        model.stem.regions == 1,
        "upscale",
        f"the model is already upscaled ({model.stem.regions}×{model.stem.regions} regions); nested region "
        "orders are not the supplementary's order",
        "upscale the original model once by the product of the factors",
    )
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
    for i, block in enumerate(new.blocks):
        layer = block.token_mixing
        _block_diagonal_mlp(layer.mlp, copies, f"blocks[{i}].token_mixing.mlp")
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
