"""Lightning modules of the MLP families Hayase & Karakida compare Mixers with: the static sparse-weight
MLP (SW-MLP, App. A.2.5) and the shallow Kronecker / Monarch MLPs (Sec. 3.3, Fig. 2(d))."""

from __future__ import annotations

from typing import Any

from mixer_lightning.models.layers import Activation
from mixer_lightning.models.sparse import SparseImpl, SparseInit
from mixer_lightning.models.sw_mlp import BlockKind
from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.loading import family


@family
class SWMLPModule(ClassifierModule):
    """An SW-MLP (`mixer_lightning.models.SWMLP`) trained as a classifier.

    Arguments left at None take the family default (see `SWMLP`).

    Args:
        preset: a registered SW-MLP preset (see ``mixer models``).
        patch_size: P of the per-patch FC.
        channels: C; the width is m = S0·C.
        width: m instead of C (C = ⌈m/S0⌉, vec keeps the first m entries).
        num_blocks: L.
        block: ``mlp`` (hidden γm, eq. S.17) or ``fc`` (single sparse FC, eq. S.16).
        gamma: γ of the MLP blocks (default 2).
        density: p, the non-zero ratio of every mask.
        omega: Ω, connections per layer (``2**19`` …): p = Ω/(γm²), or m = √(Ω/(γp)) with density alone.
        impl: ``sparse`` (CSR, memory ∝ connections) or ``dense`` (masked dense weights, as the paper).
        init: ``masked`` (M ∈ {0,1}, W ~ N(0, 1/(pm))) or ``spectral`` (M ∈ {0, 1/√p}, A ~ N(0, 1/m), Sec. 4.3).
        out_act: the outer σ of an MLP block (false: the Mixer's MLP form, App. C.1).
        bias: biases in the sparse layers.
        norm_eps: LayerNorm ε.
        act: ``gelu`` or ``gelu_tanh``.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        image_size: int | None = None,
        in_chans: int | None = None,
        preset: str | None = None,
        patch_size: int | None = None,
        channels: int | None = None,
        width: int | None = None,
        num_blocks: int | None = None,
        block: BlockKind | None = None,
        gamma: float | None = None,
        density: float | None = None,
        omega: int | str | None = None,
        impl: SparseImpl | None = None,
        init: SparseInit | None = None,
        out_act: bool | None = None,
        bias: bool | None = None,
        norm_eps: float | None = None,
        act: Activation | None = None,
        **kwargs: Any,
    ):
        super().__init__(num_classes=num_classes, image_size=image_size, in_chans=in_chans, **kwargs)
        self.set_network(
            "sw_mlp",
            preset,
            patch_size=patch_size,
            channels=channels,
            width=width,
            num_blocks=num_blocks,
            block=block,
            gamma=gamma,
            density=density,
            omega=omega,
            impl=impl,
            init=init,
            out_act=out_act,
            bias=bias,
            norm_eps=norm_eps,
            act=act,
        )


class _ShallowModule(ClassifierModule):
    family: str

    def __init__(
        self,
        num_classes: int | None = None,
        image_size: int | None = None,
        in_chans: int | None = None,
        preset: str | None = None,
        factors: list[int] | None = None,
        second_act: bool | None = None,
        bias: bool | None = None,
        **kwargs: Any,
    ):
        super().__init__(num_classes=num_classes, image_size=image_size, in_chans=in_chans, **kwargs)
        self.set_network(self.family, preset, factors=factors, second_act=second_act, bias=bias)


@family
class KronMLPModule(_ShallowModule):
    """The shallow Kronecker MLP x ↦ B_c B2 ReLU(B1 x), B_i = V_i ⊗ W_i (Hayase & Karakida Sec. 3.3, Fig. 2(d)).

    Args:
        preset: a registered preset of ``kron_mlp`` (see ``mixer models``).
        factors: [a, b] with a·b = n = in_chans·H·W (default √n, √n: 28, 28 on MNIST, 8, 8 on digits).
        second_act: also a ReLU after B2.
        bias: biases on B1 and B2.
    """

    family = "kron_mlp"


@family
class MonarchMLPModule(_ShallowModule):
    """The shallow Monarch MLP x ↦ B_c B2 ReLU(B1 x), B_i = P L_i Pᵀ R_i (Sec. 3.3, Fig. 2(d); Dao et al. 2022).

    Args:
        preset: a registered preset of ``monarch_mlp`` (see ``mixer models``).
        factors: [a, b] with a·b = n: R has a blocks of b×b, L has b blocks of a×a (default √n, √n).
        second_act: also a ReLU after B2.
        bias: biases on B1 and B2.
    """

    family = "monarch_mlp"
