"""S-Mixer (Hayase & Karakida 2024, App. A.2.2): the MLP-Mixer with each MLP replaced by one FC
layer and σ, keeping LayerNorm and skip connections:

    U = X + σ(W LN(X))       token mixing, W ∈ R^{S×S}
    Y = U + σ(LN(U) V)       channel mixing, V ∈ R^{C×C}

Its vectorised form is a wide MLP of width m = S·C with Kronecker weights (Prop. 3.2); with
``permute`` it is the RP S-Mixer of Sec. 5.2. Ω = (C²S + CS²)/2 (γ = 1).
"""

from __future__ import annotations

from torch import nn

from mixer_lightning.models.layers import Activation, FcBlock, InitMode, check_rate, init_mixer_weights
from mixer_lightning.models.pk import Axis, PKMixer
from mixer_lightning.models.registry import register_family
from mixer_lightning.width import resolve_tokens


class SMixer(PKMixer):
    """S-Mixer classifier (normal or random-permuted).

    Args:
        num_classes, image_size, in_chans, patch_size: as `MLPMixer`.
        tokens: S (default S0), or give ``omega``.
        channels: C.
        omega: Ω = (C²S + CS²)/2; S is solved from (Ω, C).
        num_blocks: L.
        permute: RP S-Mixer: true for all blocks, or one flag per block (App. D.5).
        skip_layer: SkipLayer in the first block (default: when S ≠ S0; the sweeps set it always).
        drop_rate: dropout after each FC + σ.
        drop_path: stochastic depth of the last mixing layer, rising linearly from 0.
        norm_eps: LayerNorm ε (the paper uses 1e-5).
        act: ``gelu`` or ``gelu_tanh``.
        init: ``xavier``, ``lecun`` or ``normal`` (the paper's N(0, 1/fan_in), Sec. 4.3); the paper's
            configs set ``normal``.
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 32,
        in_chans: int = 3,
        patch_size: int = 4,
        tokens: int | None = None,
        channels: int = 128,
        omega: float | str | None = None,
        num_blocks: int = 8,
        permute: bool | list[bool] = False,
        skip_layer: bool | None = None,
        drop_rate: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-5,
        act: Activation = "gelu",
        init: InitMode = "xavier",
    ):
        check_rate(drop_rate=drop_rate)
        self._act, self._drop = act, drop_rate
        super().__init__(
            num_classes=num_classes,
            image_size=image_size,
            in_chans=in_chans,
            patch_size=patch_size,
            tokens=resolve_tokens(tokens, omega, channels, 1.0),
            channels=channels,
            num_blocks=num_blocks,
            permute=permute,
            skip_layer=skip_layer,
            drop_path=drop_path,
            norm_eps=norm_eps,
        )
        self.gamma = 1.0
        init_mixer_weights(self, init)

    def make_mlp(self, axis: Axis, features_in: int, features_out: int) -> nn.Module:
        return FcBlock(features_in, features_out, act=self._act, drop=self._drop)


register_family("s_mixer", SMixer, "Hayase & Karakida 2024, App. A.2.2")
