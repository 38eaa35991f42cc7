"""The effective wide-MLP view of a Mixer (Hayase & Karakida 2024, Sec. 3.1, 5.1; App. A.2.3, B.1).

Vectorising the S×C feature matrix column by column, vec(X)[c·S + s] = X[s, c], turns every mixing
layer into a fully connected layer of width m = S·C with a structured, sparse weight:

    token mixing       vec(W X)  = (I_C ⊗ W) vec(X)                        (eq. 8)
    channel mixing     vec(X V)  = (Vᵀ ⊗ I_S) vec(X) = J_cᵀ (I_S ⊗ Vᵀ) J_c vec(X)
    RP (PK) layer      J2 (I ⊗ W) J1 vec(X), J1 and J2 random permutations (eq. 19)

This module materialises those m×m matrices for small models (float64 is what the tests use), and
runs the whole model as the equivalent wide MLP, so each identity of the paper can be checked
numerically against the real `nn.Module`. Sizes grow as m², so keep S·C in the hundreds.

Conventions: a mixing layer of `mixer_lightning.models.pk` computes, on its normalised input,
P_out (I_{n1} ⊗ f) P_in vec(X) where f is its MLP (or FC + σ) applied to each of the n1 blocks of
n2 consecutive entries, and P_in, P_out are permutation matrices (`layer_permutations`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from mixer_lightning.analysis.spectrum import mixing_blocks
from mixer_lightning.models.layers import FcBlock, MlpBlock
from mixer_lightning.models.pk import MixingLayer, PKMixer


def vec(x: torch.Tensor) -> torch.Tensor:
    """Column-major vectorisation of the last two axes: (…, S, C) -> (…, S·C), vec(X)[c·S + s] = X[s, c]."""
    return rearrange(x, "... s c -> ... (c s)")


def unvec(v: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of `vec`: (…, rows·cols) -> (…, rows, cols)."""
    return rearrange(v, "... (c s) -> ... s c", s=rows, c=cols)


def commutation_matrix(rows: int, cols: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """J_c with J_c vec(X) = vec(Xᵀ) for X ∈ R^{rows×cols} (Definition 3.1)."""
    m = rows * cols
    s = torch.arange(rows).repeat_interleave(cols)  # entry (s, c) in row-major order
    c = torch.arange(cols).repeat(rows)
    j = torch.zeros(m, m, dtype=dtype)
    j[s * cols + c, c * rows + s] = 1  # vec(Xᵀ)[s·C + c] = X[s, c] = vec(X)[c·S + s]
    return j


def permutation_matrix(index: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The matrix J with (J x)[k] = x[index[k]] (the gather a `Permutation` module performs)."""
    m = index.numel()
    j = torch.zeros(m, m, dtype=dtype)
    j[torch.arange(m), index.cpu()] = 1
    return j


def layer_permutations(layer: MixingLayer, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """(P_in, P_out) of a mixing layer in vec coordinates: its branch is P_out (I ⊗ f) P_in vec(LN(X)).

    - normal token mixing: the blocks are the columns of X, which vec already lists: P = I.
    - normal channel mixing: the blocks are the rows: P_in = J_c, P_out = J_cᵀ (eq. S.12).
    - RP: the layer gathers the row-major flattening vec(Xᵀ) = J_c vec(X) by J1, and its output is
      read row-major: P_in = J1 J_c, P_out = J_cᵀ J2 (still permutations: a PK layer, Def. 5.1).
    - output-only RP (J1 the normal grouping): the normal P_in, P_out = J_cᵀ J2.
    """
    s_in, s_out, c = layer.tokens_in, layer.tokens, layer.channels
    jc_in, jc_out = commutation_matrix(s_in, c, dtype), commutation_matrix(s_out, c, dtype)
    if layer.axis == "token":
        p_in, p_out = torch.eye(s_in * c, dtype=dtype), torch.eye(s_out * c, dtype=dtype)
    else:
        p_in, p_out = jc_in, jc_out.T
    if layer.permute_in is not None:
        p_in = permutation_matrix(layer.permute_in.index, dtype) @ jc_in
    if layer.permute_out is not None:
        p_out = jc_out.T @ permutation_matrix(layer.permute_out.index, dtype)
    return p_in, p_out


def kron_identity(weight: torch.Tensor, blocks: int) -> torch.Tensor:
    """I_{blocks} ⊗ W."""
    return torch.kron(torch.eye(blocks, dtype=weight.dtype, device=weight.device), weight)


@dataclass
class EffectiveLinear:
    """One fully connected layer of the effective wide MLP: x ↦ weight @ x + bias."""

    weight: torch.Tensor  # (m_out, m_in)
    bias: torch.Tensor  # (m_out,)

    @property
    def density(self) -> float:
        """Fraction of non-zero weights (1/C for token mixing, 1/S for channel mixing)."""
        return float(torch.count_nonzero(self.weight)) / self.weight.numel()


def effective_linears(layer: MixingLayer, dtype: torch.dtype = torch.float64) -> list[EffectiveLinear]:
    """The branch's FC layers as dense m×m matrices in vec coordinates: [P_out (I ⊗ W) P_in] for an
    S-Mixer layer, [(I ⊗ W1) P_in, P_out (I ⊗ W2)] for an MLP-Mixer layer (the hidden layer of width
    γ·m is left in block order, which no permutation touches)."""
    n1 = mixing_blocks(layer)
    p_in, p_out = layer_permutations(layer, dtype)
    mlp = layer.mlp
    if isinstance(mlp, FcBlock):
        w, b = mlp.fc.weight.detach().to(dtype), mlp.fc.bias.detach().to(dtype)
        return [EffectiveLinear(p_out @ kron_identity(w, n1) @ p_in, p_out @ b.repeat(n1))]
    if isinstance(mlp, MlpBlock):
        w1, b1 = mlp.fc1.weight.detach().to(dtype), mlp.fc1.bias.detach().to(dtype)
        w2, b2 = mlp.fc2.weight.detach().to(dtype), mlp.fc2.bias.detach().to(dtype)
        return [
            EffectiveLinear(kron_identity(w1, n1) @ p_in, b1.repeat(n1)),
            EffectiveLinear(p_out @ kron_identity(w2, n1), p_out @ b2.repeat(n1)),
        ]
    raise TypeError(f"no effective form for a mixing function of type {type(mlp).__name__}")


class EffectiveWideMLP(nn.Module):
    """A `PKMixer` (MLP-Mixer or S-Mixer, normal or RP) run as the wide MLP it equals.

    Hidden states are vectors of width m = S·C (vec coordinates); every mixing layer is a dense
    m×m matrix (`effective_linears`). LayerNorm acts on the C entries of each token, the skip
    connections are identities (or, in the first block, SkipLayer's LN((I_C ⊗ W̃) x)), the stem is
    the per-patch FC (I ⊗ W) on the vectorised patches, and the head pools over tokens. Its logits
    equal the model's up to rounding (tested in float64).
    """

    def __init__(self, model: PKMixer, dtype: torch.dtype = torch.float64):
        super().__init__()
        self.model = model
        self.dtype = dtype
        self.layers = [(layer, effective_linears(layer, dtype)) for layer in model.mixing_layers()]

    def _layer_norm(self, x: torch.Tensor, norm: nn.LayerNorm, tokens: int, channels: int) -> torch.Tensor:
        # LN normalises each token's C channels: a row-wise operation on Mat(x), done in matrix form.
        rows = unvec(x, tokens, channels)
        out = F.layer_norm(rows, (channels,), norm.weight.to(self.dtype), norm.bias.to(self.dtype), norm.eps)
        return vec(out)

    def wide_forward(self, images: torch.Tensor) -> torch.Tensor:
        """Images -> vec(features) (B, S·C) before the final LayerNorm, through the wide MLP."""
        model = self.model
        x = vec(model.stem(images.to(self.dtype)))  # the per-patch FC: (B, S0·C)
        for layer, linears in self.layers:
            s_in, s_out, c = layer.tokens_in, layer.tokens, layer.channels
            h = self._layer_norm(x, layer.norm, s_in, c)
            act = layer.mlp.act
            for i, linear in enumerate(linears):
                h = F.linear(h, linear.weight, linear.bias)
                if isinstance(layer.mlp, FcBlock) or i == 0:
                    h = act(h)  # σ commutes with the output permutation
            if layer.skip is not None:
                w_skip = layer.skip.proj.weight.detach().to(self.dtype)
                shortcut = self._layer_norm(x @ kron_identity(w_skip, c).T, layer.skip.norm, s_out, c)
            else:
                shortcut = x
            x = shortcut + h
        return x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        model = self.model
        x = self.wide_forward(images)
        features = unvec(x, model.tokens, model.channels)
        return model.forward_head(model.norm(features))
