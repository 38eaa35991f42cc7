"""The shallow structured MLPs of Hayase & Karakida 2024, Sec. 3.3 and Fig. 2(d) (setting: App. C.1).

    x ↦ B_c B2 ReLU(B1 x)                on the flattened image x ∈ R^n (no per-patch FC, no LN, no skip)

with B1, B2 ∈ R^{n×n} either Kronecker products V ⊗ W (`KronLinear`, the structure a Mixer's
vectorised mixing layers have, Prop. 3.2) or Monarch matrices P L Pᵀ R (`MonarchLinear`, Dao et al.
2022; eq. 12 writes P = J_cᵀ), and B_c the dense classification layer. ``second_act: true`` adds a
ReLU after B2 (B_c ReLU(B2 ReLU(B1 x)), the form REFERENCE.md and the project's issue state; Sec. 3.3
writes one ReLU).

Sizes. n = in_chans·H·W factors as n = a·b (``factors``; default a = b = √n as the paper's √n blocks of
size √n: MNIST 28×28×1 gives n = 784 = 28·28, the digits 8×8×1 give n = 64 = 8·8; a non-square n takes
the divisor pair nearest √n, e.g. CIFAR's 3072 = 48·64, a rectangular Monarch as Dao et al.'s). Kronecker: V ∈ R^{a×a},
W ∈ R^{b×b} (a² + b² weights); Monarch: R has a diagonal blocks of b×b and L has b blocks of a×a
(a·b² + b·a² weights, 2n√n for a = b = √n). Neither matrix is ever formed: each is two batched
matrix products on the input reshaped to (a, b).

Vectorisation is the paper's (column-major): a layer's input x = vec(X) with X ∈ R^{b×a}, so the
row-major PyTorch view ``x.view(batch, a, b)`` is Xᵀ.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.layers import check_positive, new_head
from mixer_lightning.models.registry import register_family

Structure = Literal["kron", "monarch"]


def square_factors(n: int, factors: tuple[int, int] | list[int] | None, field: str = "factors") -> tuple[int, int]:
    """(a, b) with a·b = n: the given ``factors``, else (√n, √n), else the divisor pair nearest to it
    (a the largest divisor of n below √n: 3072 = 48·64 for CIFAR's 32×32×3)."""
    if factors is None:
        a = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        return a, n // a
    require(
        len(factors) == 2 and all(int(f) > 0 for f in factors),
        field,
        f"must be two positive integers, got {factors}",
        "give e.g. [28, 28]",
    )
    a, b = (int(f) for f in factors)
    require(a * b == n, field, f"{a}·{b} = {a * b} is not the input size n = {n}", "give factors whose product is n")
    return a, b


class KronLinear(nn.Module):
    """y = (V ⊗ W) x + bias, V ∈ R^{a×a}, W ∈ R^{b×b}, computed as vec(W X Vᵀ) for x = vec(X).

    Each factor is drawn N(0, 1/size), so V ⊗ W's entries have variance 1/n (LeCun normal of the
    n×n matrix they form).
    """

    def __init__(self, a: int, b: int, bias: bool = True):
        super().__init__()
        self.a, self.b = a, b
        self.features = a * b
        self.V = nn.Parameter(torch.randn(a, a) / math.sqrt(a))
        self.W = nn.Parameter(torch.randn(b, b) / math.sqrt(b))
        self.bias = nn.Parameter(torch.zeros(self.features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xt = x.reshape(-1, self.a, self.b)  # Xᵀ, (batch, a, b)
        y = torch.matmul(torch.matmul(self.V, xt), self.W.t())  # V Xᵀ Wᵀ = (W X Vᵀ)ᵀ
        y = y.reshape(shape)
        return y + self.bias if self.bias is not None else y

    def effective_weight(self) -> torch.Tensor:
        """V ⊗ W as a dense n×n matrix (tests and analysis at small n)."""
        return torch.kron(self.V, self.W)

    def singular_values(self) -> torch.Tensor:
        """Exact singular values of V ⊗ W from the structure: all products σ_i(V)·σ_j(W), descending."""
        sv = torch.linalg.svdvals(self.V.detach().double())
        sw = torch.linalg.svdvals(self.W.detach().double())
        return torch.outer(sv, sw).flatten().sort(descending=True).values

    def extra_repr(self) -> str:
        return f"features={self.features}, V={self.a}x{self.a}, W={self.b}x{self.b}, bias={self.bias is not None}"


class MonarchLinear(nn.Module):
    """y = P L Pᵀ R x + bias (Dao et al. 2022; Hayase eq. 12, P = J_cᵀ).

    For x = vec(X), X ∈ R^{b×a}: R = diag(R_1 … R_a), R_j ∈ R^{b×b}, maps column j of X; Pᵀ = J_c
    transposes, so L = diag(L_1 … L_b), L_i ∈ R^{a×a}, maps row i; P transposes back. With
    every R_j = W and every L_i = V it is V ⊗ W, the Kronecker (Mixer) layer: a Monarch matrix with
    shared blocks (Corollary 3.4).
    Blocks are drawn N(0, 1/size), so the n×n matrix has entries of variance 1/n like `KronLinear`.
    """

    def __init__(self, a: int, b: int, bias: bool = True):
        super().__init__()
        self.a, self.b = a, b
        self.features = a * b
        self.R = nn.Parameter(torch.randn(a, b, b) / math.sqrt(b))  # a blocks of b×b
        self.L = nn.Parameter(torch.randn(b, a, a) / math.sqrt(a))  # b blocks of a×a
        self.bias = nn.Parameter(torch.zeros(self.features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xt = x.reshape(-1, self.a, self.b)  # row j = column j of X
        y = torch.einsum("jkl,njl->njk", self.R, xt)  # R: each column of X by its own block
        y = torch.einsum("ikl,nli->nki", self.L, y)  # Pᵀ, L on each row, P: back in the same layout
        y = y.reshape(shape)
        return y + self.bias if self.bias is not None else y

    def effective_weight(self) -> torch.Tensor:
        """P L Pᵀ R as a dense n×n matrix (tests and analysis at small n)."""
        eye = torch.eye(self.features, dtype=self.R.dtype, device=self.R.device)
        bias, self.bias = self.bias, None
        try:
            return self.forward(eye).t()  # column k = M e_k
        finally:
            self.bias = bias

    def extra_repr(self) -> str:
        return f"features={self.features}, blocks: R {self.a}x({self.b}x{self.b}), L {self.b}x({self.a}x{self.a})"


LAYERS: dict[str, type[nn.Module]] = {"kron": KronLinear, "monarch": MonarchLinear}


class ShallowMLP(nn.Module):
    """x ↦ B_c B2 ReLU(B1 x) on the flattened image with structured B1, B2 (Sec. 3.3, Fig. 2(d)).

    Args:
        num_classes: classes.
        image_size: image side H = W.
        in_chans: image channels; n = in_chans·H·W.
        structure: ``kron`` (B = V ⊗ W) or ``monarch`` (B = P L Pᵀ R).
        factors: [a, b] with a·b = n (default √n, √n, or the divisor pair nearest to it).
        second_act: a ReLU after B2 as well.
        bias: biases on B1 and B2 (Sec. 3.3's formula has none; Dao et al.'s Monarch layers do).
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 28,
        in_chans: int = 1,
        structure: Structure = "kron",
        factors: tuple[int, int] | list[int] | None = None,
        second_act: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        check_positive(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
        if structure not in LAYERS:
            raise ConfigError("structure", f"unknown structure {structure!r}", "choose 'kron' or 'monarch'")
        n = in_chans * image_size * image_size
        a, b = square_factors(n, factors)
        self.structure, self.features, self.factors = structure, n, (a, b)
        self.b1 = LAYERS[structure](a, b, bias=bias)
        self.act1 = nn.ReLU()
        self.b2 = LAYERS[structure](a, b, bias=bias)
        self.act2 = nn.ReLU() if second_act else nn.Identity()
        self.head = nn.Linear(n, num_classes)  # B_c

    def structured_layers(self) -> list[nn.Module]:
        return [self.b1, self.b2]

    def group_matcher(self, coarse: bool = False) -> dict:
        """The layers in order, for layer-wise lr decay (timm's `param_groups_layer_decay`): B1, then B2."""
        return {"stem": r"^b1\.", "blocks": [(r"^b2\.", (0,))]}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for `num_classes` (0: none, the pooled features come out), zero-initialised as
        fine-tuning starts it (Tolstikhin Sec. 3.1); timm's signature: the pooling is always the average."""
        self.head = new_head(self.features, num_classes, global_pool)
        self.num_classes = num_classes

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)  # any fixed order of the n pixels will do: B1 mixes them all
        return self.act2(self.b2(self.act1(self.b1(x))))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


register_family("kron_mlp", ShallowMLP, "Hayase & Karakida 2024, Sec. 3.3, Fig. 2(d)", structure="kron")
register_family(
    "monarch_mlp", ShallowMLP, "Hayase & Karakida 2024, Sec. 3.3, Fig. 2(d); Dao et al. 2022", structure="monarch"
)
