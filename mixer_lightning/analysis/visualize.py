"""Pictures of trained weights (Tolstikhin et al. 2021, Sec. 3.5, Figure 5, supp. D; Hayase & Karakida 2024,
Figures 1 and S.9).

- Token-mixing units: each row of a token-mixing MLP's first FC layer has one weight per input token;
  where the tokens are the patches, it is drawn on the √S0×√S0 patch grid. Sorted as the Mixer paper's
  "heuristic that tries to show low frequency filters first" (ours: the spectral centroid of the 2-D DFT
  power), each followed by "its closest inverse" (the most negative cosine similarity).
- Stem units: the per-patch FC's C units as P×P (RGB) images, sorted the same way.
- Sparsity patterns: the non-zeros of an effective m×m weight (I_C ⊗ W, Wᵀ ⊗ I_S, J2 (I ⊗ W) J1, M ⊙ W),
  0/1 per entry or the fraction of non-zeros per pixel where the matrix is larger than the picture.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.protocols import MixingNetwork
from mixer_lightning.models.registry import paper_name


def token_positions(stem: nn.Module) -> torch.Tensor:
    """(S0, 2) row and column on the patch grid of each input token, in the stem's token order (raster
    order, or region by region for a K-upscaled model, `PatchEmbed.regions`)."""
    grid, k = stem.grid, getattr(stem, "regions", 1)
    t = torch.arange(grid * grid)
    if k == 1:
        return torch.stack([t // grid, t % grid], dim=1)
    g = grid // k  # patches per region side
    region, inside = t // (g * g), t % (g * g)
    return torch.stack([(region // k) * g + inside // g, (region % k) * g + inside % g], dim=1)


def unit_images(weight: torch.Tensor, stem: nn.Module) -> torch.Tensor:
    """Token-mixing units (U, S0) -> (U, √S0, √S0) images: pixel (r, c) is the weight of the patch there."""
    positions = token_positions(stem)
    images = torch.zeros(weight.shape[0], stem.grid, stem.grid, dtype=weight.dtype)
    images[:, positions[:, 0], positions[:, 1]] = weight.detach().cpu()
    return images


def spatial_frequency(images: torch.Tensor) -> torch.Tensor:
    """The spectral centroid Σ|F(k)|²·|k| / Σ|F(k)|² of each (…, H, W) image (cycles per image side;
    summed over any leading channel axis given as (U, channels, H, W))."""
    x = images.double()
    if x.dim() == 3:
        x = x.unsqueeze(1)
    power = torch.fft.fft2(x).abs().pow(2).sum(1)  # (U, H, W)
    h, w = power.shape[-2:]
    fy = torch.fft.fftfreq(h, d=1.0 / h).double().abs()
    fx = torch.fft.fftfreq(w, d=1.0 / w).double().abs()
    radius = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)
    return (power * radius).sum((-2, -1)) / power.sum((-2, -1)).clamp_min(1e-300)


def closest_inverse(vectors: torch.Tensor) -> torch.Tensor:
    """For each row, the index of the other row with the most negative cosine similarity to it."""
    x = F.normalize(vectors.reshape(vectors.shape[0], -1).double(), dim=1)
    similarity = x @ x.T
    similarity.fill_diagonal_(float("inf"))
    return similarity.argmin(dim=1)


def paired_order(images: torch.Tensor) -> list[tuple[int, int]]:
    """(unit, its closest inverse) for every unit, lowest frequency first (Mixer Fig. 5, supp. Fig. 1)."""
    inverse = closest_inverse(images)
    order = torch.argsort(spatial_frequency(images), stable=True)
    return [(int(i), int(inverse[i])) for i in order]


# ----------------------------------------------------------------------------------- what applies


def token_mixing_weight(layer: nn.Module) -> torch.Tensor:
    """The first FC weight of a token-mixing layer's function: W1 (D_S×S_in), the S-Mixer's W (S×S_in), or
    whatever matrix another family's first FC layer applies (`spectrum.fc_weight`: A·B of a low-rank W)."""
    from mixer_lightning.analysis.spectrum import fc_weight, mixing_weights

    fcs = mixing_weights(layer)
    require(bool(fcs), "model.net", f"the token mixing {type(layer.mlp).__name__} holds no weights", "draw stem_units")
    return fc_weight(fcs[0][1])


def spatial_token_blocks(net: nn.Module, blocks: list[int] | None = None) -> tuple[list[int], list[str]]:
    """The (1-based) blocks whose token-mixing units have a spatial grid, and why the others have none.

    Block 1's token mixing reads the patches. Later blocks read them too (the residual stream keeps
    token t at patch t), unless the first block's SkipLayer mixed the tokens (S0 → S, App. A.2.4). A
    randomly permuted (RP) layer reads permuted entries of the S·C features: no grid at all.
    """
    if not isinstance(net, MixingNetwork):
        return [], [f"the {paper_name(type(net).__name__)} has no token-mixing layers"]
    token_layers = [layer for layer in net.mixing_layers() if layer.axis == "token"]
    wanted = blocks or list(range(1, min(3, len(token_layers)) + 1))  # Mixer Figure 5: the first three
    has_skip = token_layers[0].skip is not None
    chosen, notes = [], []
    for b in wanted:
        if not 1 <= b <= len(token_layers):
            raise ConfigError(
                "blocks",
                f"block {b} does not exist (the network has {len(token_layers)})",
                f"choose blocks in 1..{len(token_layers)}",
            )
        layer = token_layers[b - 1]
        if layer.permute_in is not None:  # (an output-only RP layer's input is still the patch grid)
            notes.append(
                f"block {b}: its token mixing is randomly permuted (RP): a unit reads permuted "
                "entries of the S·C features, not patches, so it has no spatial grid"
            )
        elif b > 1 and has_skip:
            notes.append(
                f"block {b}: after the first block's SkipLayer (S0 = {token_layers[0].tokens_in} → "
                f"S = {token_layers[0].tokens} tokens) tokens are learned mixtures of patches, "
                "not a patch grid"
            )
        else:
            chosen.append(b)
    return chosen, notes


def token_units(net: nn.Module, block: int) -> torch.Tensor:
    """(units, √S0, √S0) images of the token-mixing units of `block` (1-based)."""
    layer = [layer for layer in net.mixing_layers() if layer.axis == "token"][block - 1]
    return unit_images(token_mixing_weight(layer).float(), net.stem)


def stem_units(net: nn.Module) -> torch.Tensor:
    """(C, in_chans, P, P) weights of the per-patch FC, lowest frequency first."""
    weight = net.stem.proj.weight.detach().cpu().float()
    return weight[torch.argsort(spatial_frequency(weight), stable=True)]


def pattern_image(weight: torch.Tensor, max_pixels: int = 300) -> torch.Tensor:
    """The non-zero entries of `weight` as a picture of at most `max_pixels` a side: 0/1 per entry where
    it fits, else the fraction of non-zero entries under each pixel (average pooling). Max pooling made a
    pixel black when any of its ≈ 85 entries was non-zero: a 3 %-dense matrix came out 92 % black."""
    mask = (weight.detach() != 0).float()[None, None]
    rows, cols = weight.shape
    if max(rows, cols) > max_pixels:
        mask = F.adaptive_avg_pool2d(mask, (min(rows, max_pixels), min(cols, max_pixels)))
    return mask[0, 0]


def first_effective_weight(layer: nn.Module) -> torch.Tensor:
    """The first FC layer of a mixing layer in the wide MLP, as `effective.effective_linears` gives it
    ((I ⊗ W1) P_in, or P_out (I ⊗ W) P_in for a single-FC layer), with the permutations applied by
    indexing instead of m×m matrix products (O(m²) rather than O(m³): m = 4096 takes a second)."""
    from mixer_lightning.analysis.effective import kron_identity, layer_permutations
    from mixer_lightning.analysis.spectrum import fc_weight, mixing_blocks, mixing_weights

    p_in, p_out = layer_permutations(layer, torch.float32)
    # A @ J = A[:, argsort(index)] and J @ A = A[index] for (J x)[k] = x[index[k]].
    in_index, out_index = p_in.argmax(1), p_out.argmax(1)
    fcs = mixing_weights(layer)
    weight = kron_identity(fc_weight(fcs[0][1]).detach().float().cpu(), mixing_blocks(layer))
    weight = weight[:, torch.argsort(in_index)]
    return weight[out_index] if len(fcs) == 1 else weight
