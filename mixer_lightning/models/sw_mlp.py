"""SW-MLP: the static sparse-weight MLP that Hayase & Karakida 2024 compare Mixers with (App. A.2.5,
after Golubeva, Neyshabur & Gur-Ari 2021).

    per-patch FC (C0 → C) on the S0 patches, vec (column-major, m = S0·C entries), then L blocks

        fc:   x ↦ x + σ((M ⊙ W) LN(x))                                    (eq. S.16)
        mlp:  x ↦ x + σ((M2 ⊙ W2) σ((M1 ⊙ W1) LN(x)))   hidden γm         (eq. S.17)

    and the classification FC layer on the m features (no pooling: there is no token axis left).

M, M1, M2 are frozen Bernoulli(p) masks drawn once from the seed. A layer holds Ω = γ·p·m²
connections on average (App. D.1; γ = 1 for ``fc`` blocks). The masks are the only difference from a
dense MLP, so ``impl`` only changes how they are stored (`mixer_lightning.models.sparse`):
``dense`` = the paper's dense M ⊙ W, ``sparse`` = CSR non-zeros only (the default; same function).

Width and density. The per-patch FC gives S0·C entries, so m = S0·C when C is given. A width m
that S0 does not divide (the paper's Fig. 5 widths 540, 612, … with S0 = 64) is reached with
C = ⌈m/S0⌉ channels and keeping the first m entries of vec (the last channel of the last S0·C − m
patches is dropped): no extra layer, and the masks being i.i.d., which entries go does not matter.
The paper does not say how it reached such widths. Give at most two of:

- ``channels`` C (m = S0·C) or ``width`` m,
- ``density`` p, or ``omega`` Ω (then p = Ω/(γm²)),

or ``omega`` and ``density`` alone, which give m = round(√(Ω/(γp))) (eq. S.43). The realised m, p
and Ω = γ·p·m² are the attributes ``width``, ``density`` and ``omega``. With no density and no Ω,
p is a Mixer's at S = S0 tokens and C = m/S0 channels, (1/S0 + 1/C)/2 (Sec. 4: the average non-zero
ratio of a Mixer's token and channel layers), so Ω equals that Mixer's γ(C²S + CS²)/2.
"""

from __future__ import annotations

from typing import Literal

import torch
from einops import rearrange
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.layers import Activation, PatchEmbed, activation, check_positive, hidden_width, new_head
from mixer_lightning.models.registry import register_family
from mixer_lightning.models.sparse import SparseImpl, SparseInit, static_sparse_linear
from mixer_lightning.width import parse_int_expression

BlockKind = Literal["fc", "mlp"]


class SparseFcBlock(nn.Module):
    """x ↦ x + σ((M ⊙ W) LN(x)) (eq. S.16)."""

    def __init__(
        self,
        width: int,
        density: float,
        impl: SparseImpl,
        init: SparseInit,
        act: Activation,
        norm_eps: float,
        bias: bool,
    ):
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
    """x ↦ x + σ((M2 ⊙ W2) σ((M1 ⊙ W1) LN(x))), W1 ∈ R^{γm×m}, W2 ∈ R^{m×γm} (eq. S.17).

    ``out_act: false`` drops the outer σ, giving the Mixer's MLP form x + (M2⊙W2) σ((M1⊙W1) LN(x))
    (App. C.1: the SW-MLP of Fig. 2 replaces the Mixer's I_C⊗W1, I_C⊗W2, W3ᵀ⊗I_S, W4ᵀ⊗I_S by M ⊙ A).
    """

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
    check_positive(channels=channels, width=width, omega=omega)
    if density is not None:
        require(0.0 < density <= 1.0, "density", f"must be in (0, 1], got {density}", "give e.g. 0.1 or 2**-6")
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
        num_classes: classes.
        image_size: image side H = W in pixels.
        in_chans: image channels.
        patch_size: P of the per-patch FC (S0 = (H/P)² patches of C0 = in_chans·P² values).
        channels: C, the per-patch FC's output; the width is m = S0·C.
        width: m instead of C (C = ⌈m/S0⌉, vec keeps the first m entries).
        num_blocks: L.
        block: ``mlp`` (eq. S.17, hidden γm) or ``fc`` (eq. S.16, single sparse FC, γ = 1).
        gamma: γ of the MLP blocks (default 2, the Fig. 4 / Table S.3 value; must stay 1 for ``fc``).
        density: p, the probability of a mask entry being one.
        omega: Ω, connections per layer (an integer or an expression such as ``2**19``):
            p = Ω/(γm²), or with ``density`` alone the width m = √(Ω/(γp)).
        impl: ``sparse`` (CSR, memory ∝ connections) or ``dense`` (the paper's masked dense weights).
        init: ``masked`` (M ∈ {0,1}, W ~ N(0, 1/(pm))) or ``spectral`` (M ∈ {0, 1/√p}, A ~ N(0, 1/m),
            Sec. 4.3); both give the same initial M ⊙ W (`mixer_lightning.models.sparse`).
        out_act: the outer σ of an MLP block (eq. S.17); false gives the Mixer MLP form (App. C.1).
        bias: biases in the sparse layers (the paper's equations omit them, its Mixers have them).
        norm_eps: LayerNorm ε (the paper: 1e-5).
        act: σ, ``gelu`` (the paper) or ``gelu_tanh``.
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 32,
        in_chans: int = 3,
        patch_size: int = 4,
        channels: int | None = None,
        width: int | None = None,
        num_blocks: int = 3,
        block: BlockKind = "mlp",
        gamma: float | None = None,
        density: float | None = None,
        omega: float | str | None = None,
        impl: SparseImpl = "sparse",
        init: SparseInit = "masked",
        out_act: bool = True,
        bias: bool = True,
        norm_eps: float = 1e-5,
        act: Activation = "gelu",
    ):
        super().__init__()
        if block not in ("fc", "mlp"):
            raise ConfigError("block", f"unknown block {block!r}", "choose 'mlp' (eq. S.17) or 'fc' (eq. S.16)")
        if block == "fc":
            require(
                gamma in (None, 1),
                "gamma",
                f"a single-FC block has no hidden layer (got gamma={gamma})",
                "drop gamma or use block: mlp",
            )
            gamma = 1.0
        gamma = 2.0 if gamma is None else float(gamma)
        check_positive(num_classes=num_classes, num_blocks=num_blocks, gamma=gamma, norm_eps=norm_eps)
        if impl not in ("dense", "sparse"):
            raise ConfigError("impl", f"unknown implementation {impl!r}", "choose 'dense' or 'sparse'")
        if init not in ("masked", "spectral"):
            raise ConfigError("init", f"unknown initialisation {init!r}", "choose 'masked' or 'spectral'")
        omega_value = None if omega is None else float(parse_int_expression(omega, "omega"))
        check_positive(image_size=image_size, patch_size=patch_size, in_chans=in_chans)
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
        """A new head for `num_classes` (0: none, the pooled features come out), zero-initialised as
        fine-tuning starts it (Tolstikhin Sec. 3.1); timm's signature: the pooling is always the average."""
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
