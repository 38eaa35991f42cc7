"""SW-MLP: the static sparse-weight MLP that Hayase & Karakida 2024 compare Mixers with (App. A.2.5,
after Golubeva, Neyshabur & Gur-Ari 2021): per-patch FC (C0 → C), vec (column-major, m = S0·C), L blocks

    fc:   x ↦ x + σ((M ⊙ W) LN(x))                                    (eq. S.16)
    mlp:  x ↦ x + σ((M2 ⊙ W2) σ((M1 ⊙ W1) LN(x)))   hidden γm         (eq. S.17)

and a linear classifier on the m features. M are frozen Bernoulli(p) masks; a layer holds Ω = γ·p·m²
connections (App. D.1); ``impl`` only changes how M ⊙ W is stored (`models.sparse`).

Width and density: give at most two of ``channels`` C (m = S0·C) or ``width`` m, and ``density`` p or
``omega`` Ω (p = Ω/(γm²)); or Ω and p alone (m = round(√(Ω/(γp))), eq. S.43). A width S0 does not
divide (Fig. 5's 540, 612, … at S0 = 64; the paper does not say how) takes C = ⌈m/S0⌉ and keeps the
first m entries of vec (the masks are i.i.d., so which go does not matter). With neither p nor Ω, p
is a Mixer's at S = S0, C = m/S0: (1/S0 + 1/C)/2 (Sec. 4).
"""

from __future__ import annotations

from typing import Literal

import torch
from einops import rearrange
from jsonargparse.typing import PositiveFloat, PositiveInt
from torch import nn

from mixer_lightning.errors import require
from mixer_lightning.models.layers import Activation, Fraction, PatchEmbed, activation, hidden_width, new_head
from mixer_lightning.models.registry import register_family
from mixer_lightning.models.sparse import SparseImpl, SparseInit, static_sparse_linear
from mixer_lightning.width import parse_int_expression

BlockKind = Literal["fc", "mlp"]


class SparseFcBlock(nn.Module):
    """x ↦ x + σ((M ⊙ W) LN(x)) (eq. S.16)."""

    def __init__(self, width: int, density: float, impl: SparseImpl, init: SparseInit, act: Activation, norm_eps, bias):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=norm_eps)
        self.fc = static_sparse_linear(impl, width, width, density, bias=bias, init=init, init_width=width)
        self.act = activation(act)

    def sparse_layers(self) -> list[nn.Module]:
        return [self.fc]

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(self.norm(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


class SparseMlpBlock(nn.Module):
    """x ↦ x + σ((M2 ⊙ W2) σ((M1 ⊙ W1) LN(x))), W1 ∈ R^{γm×m} (eq. S.17); ``out_act: false`` drops the outer
    σ: the Mixer's MLP form, which Fig. 2's SW-MLP has (App. C.1)."""

    def __init__(
        self,
        width: int,
        hidden: int,
        density: float,
        impl: SparseImpl,
        init: SparseInit,
        act: Activation,
        norm_eps: float,
        bias: bool,
        out_act: bool,
    ):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=norm_eps)
        self.fc1 = static_sparse_linear(impl, width, hidden, density, bias=bias, init=init, init_width=width)
        self.act = activation(act)
        self.fc2 = static_sparse_linear(impl, hidden, width, density, bias=bias, init=init, init_width=width)
        self.out_act = activation(act) if out_act else nn.Identity()

    def sparse_layers(self) -> list[nn.Module]:
        return [self.fc1, self.fc2]

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_act(self.fc2(self.act(self.fc1(self.norm(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


def resolve_width_density(
    num_patches: int,
    gamma: float,
    channels: int | None,
    width: int | None,
    density: float | None,
    omega: float | None,
) -> tuple[int, float]:
    """(m, p) from the arguments as the module docstring describes; `ConfigError` on a contradiction."""
    require(channels is None or width is None, "width", "give channels or width, not both", "drop one of them")
    require(
        density is None or omega is None or (channels is None and width is None),
        "omega",
        "channels/width, density and omega over-determine the SW-MLP (Ω = γ·p·m²)",
        "give two of them: e.g. width and omega, or omega and density",
    )
    if width is not None:
        m = int(width)
    elif channels is not None:
        m = num_patches * channels
    elif omega is not None and density is not None:
        m = max(1, round((omega / (gamma * density)) ** 0.5))  # eq. S.43: 540, 612, 724, 935, 1619 at 2^18
    else:
        m = num_patches * 48
    if omega is not None and density is None:
        density = omega / (gamma * m * m)
        require(
            density <= 1.0,
            "omega",
            f"Ω = {omega:g} exceeds the γ·m² = {gamma * m * m:g} weights of a dense layer at width m = {m}",
            "lower omega or widen (channels/width)",
        )
    elif density is None:
        density = (1.0 / num_patches + num_patches / m) / 2.0  # a Mixer's p at S = S0, C = m/S0 (Sec. 4)
    return m, density


class SWMLP(nn.Module):
    """Static sparse-weight MLP classifier (Hayase & Karakida 2024, App. A.2.5).

    Args:
        patch_size: P of the per-patch FC (S0 = (H/P)²).
        channels: C, so m = S0·C; or ``width`` m (module docstring).
        num_blocks: L.
        block: ``mlp`` (eq. S.17, hidden γm) or ``fc`` (eq. S.16, γ = 1).
        gamma: γ of the MLP blocks (default 2, Fig. 4 / Table S.3).
        density: p, the probability of a mask entry being one; or ``omega`` Ω (``2**19``): p = Ω/(γm²).
        impl: ``sparse`` (CSR, memory ∝ connections) or ``dense`` (the paper's masked dense weights).
        init: ``masked`` or ``spectral`` (Sec. 4.3), the same initial M ⊙ W (`models.sparse`).
        out_act: the outer σ of an MLP block (eq. S.17); false: the Mixer's MLP form (App. C.1).
        bias: biases in the sparse layers (the equations omit them, the paper's Mixers have them).
        norm_eps: LayerNorm ε (the paper: 1e-5). act: σ, ``gelu`` (the paper) or ``gelu_tanh``.
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 32,
        in_chans: int = 3,
        patch_size: PositiveInt = 4,
        channels: PositiveInt | None = None,
        width: PositiveInt | None = None,
        num_blocks: PositiveInt = 3,
        block: BlockKind = "mlp",
        gamma: PositiveFloat | None = None,
        density: Fraction | None = None,
        omega: int | str | None = None,
        impl: SparseImpl = "sparse",
        init: SparseInit = "masked",
        out_act: bool = True,
        bias: bool = True,
        norm_eps: PositiveFloat = 1e-5,
        act: Activation = "gelu",
    ):
        super().__init__()
        if block == "fc":
            require(
                gamma in (None, 1),
                "gamma",
                f"a single-FC block has no hidden layer (got gamma={gamma})",
                "drop gamma or use block: mlp",
            )
            gamma = 1.0
        gamma = 2.0 if gamma is None else float(gamma)
        omega_value = None if omega is None else float(parse_int_expression(omega, "omega"))
        require(
            image_size % patch_size == 0,
            "patch_size",
            f"{patch_size} does not divide image_size {image_size}",
            f"choose a divisor of {image_size} (or resize the images)",
        )
        num_patches = (image_size // patch_size) ** 2  # S0
        m, density = resolve_width_density(num_patches, gamma, channels, width, density, omega_value)
        channels = -(-m // num_patches)  # ⌈m/S0⌉: vec keeps the first m of the S0·C entries
        self.stem = PatchEmbed(image_size, patch_size, in_chans, channels)
        self.num_classes = num_classes
        self.num_patches, self.channels, self.width = num_patches, channels, m
        self.gamma, self.density, self.block_kind, self.impl = gamma, density, block, impl
        self.omega = gamma * density * self.width**2  # expected connections per layer (App. D.1)
        m = self.width
        if block == "fc":
            blocks = [SparseFcBlock(m, density, impl, init, act, norm_eps, bias) for _ in range(num_blocks)]
        else:
            hidden = hidden_width(gamma, m)
            blocks = [
                SparseMlpBlock(m, hidden, density, impl, init, act, norm_eps, bias, out_act) for _ in range(num_blocks)
            ]
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(m, num_classes)
        # As the project's Mixers: LeCun-normal stem, zero classifier (the sparse layers init themselves).
        from timm.layers import lecun_normal_  # lazily: importing timm imports all its models

        lecun_normal_(self.stem.proj.weight)
        nn.init.zeros_(self.stem.proj.bias)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def group_matcher(self, coarse: bool = False) -> dict:
        """The layers in order, for layer-wise lr decay (timm's `param_groups_layer_decay`): the per-patch FC, then each block."""
        return {"stem": r"^stem", "blocks": r"^blocks\.(\d+)"}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """timm's API: a new zero head for `num_classes` (0: none), as fine-tuning starts (Tolstikhin Sec. 3.1)."""
        self.head = new_head(self.width, num_classes, global_pool)
        self.num_classes = num_classes

    def sparse_layers(self) -> list[nn.Module]:
        """Every static sparse linear layer, input to output."""
        return [layer for block in self.blocks for layer in block.sparse_layers()]

    def connections(self) -> list[int]:
        """Non-zero weights actually drawn in each sparse layer."""
        return [layer.connections for layer in self.sparse_layers()]

    def vectorise(self, x: torch.Tensor) -> torch.Tensor:
        """Image → per-patch FC → vec, column-major as the paper's vec (entry (j−1)·S0 + i is X[i, j]),
        its first m entries (all of them when S0 divides m)."""
        x = rearrange(self.stem(x), "b s c -> b (c s)")  # vec(X): the columns of X one after another
        return x if x.shape[1] == self.width else x[:, : self.width]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.vectorise(x))

    def forward_skip_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The hidden units just before every skip connection, (B, m) per block (the features the
        CKA of Sec. 3.4 / App. C.1 compares with a Mixer's)."""
        x = self.vectorise(x)
        features = []
        for block in self.blocks:
            features.append(x)
            x = block(x)
        return features

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def extra_repr(self) -> str:
        return (
            f"width={self.width} (S0={self.num_patches}, C={self.channels}), block={self.block_kind}, "
            f"gamma={self.gamma:g}, density={self.density:.6g}, omega={self.omega:.6g}, impl={self.impl}"
        )


register_family("sw_mlp", SWMLP, "Hayase & Karakida 2024, App. A.2.5 (Golubeva et al. 2021)")
