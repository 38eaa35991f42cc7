"""S-Mixer (Hayase & Karakida 2024, App. A.2.2): the MLP-Mixer with each MLP replaced by one FC
layer and σ, keeping LayerNorm and skip connections:

    U = X + σ(W LN(X))       token mixing, W ∈ R^{S×S}
    Y = U + σ(LN(U) V)       channel mixing, V ∈ R^{C×C}

Its vectorised form is a wide MLP of width m = S·C with Kronecker weights (Prop. 3.2); with
``permute`` it is the RP S-Mixer of Sec. 5.2. Ω = (C²S + CS²)/2 (γ = 1).
"""

from __future__ import annotations

from jsonargparse.typing import PositiveFloat, PositiveInt
from torch import nn

from mixer_lightning.models.layers import Activation, FcBlock, InitMode, Rate, init_mixer_weights
from mixer_lightning.models.pk import Axis, PKMixer
from mixer_lightning.models.registry import register_family
from mixer_lightning.width import resolve_tokens


class SMixer(PKMixer):
    """S-Mixer classifier (normal or random-permuted).

    Args: as `MLPMixer`'s (without γ, D_S, D_C: γ = 1, so Ω = (C²S + CS²)/2); drop_rate: dropout after each
    FC + σ; norm_eps: the paper's 1e-5; init: the paper's configs set ``normal`` (N(0, 1/fan_in), Sec. 4.3).
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 32,
        in_chans: int = 3,
        patch_size: PositiveInt = 4,
        tokens: PositiveInt | None = None,
        channels: PositiveInt = 128,
        omega: int | str | None = None,
        num_blocks: PositiveInt = 8,
        permute: bool | list[bool] = False,
        permute_j1: bool = True,
        skip_layer: bool | None = None,
        drop_rate: Rate = 0.0,
        drop_path: Rate = 0.0,
        norm_eps: PositiveFloat = 1e-5,
        act: Activation = "gelu",
        init: InitMode = "xavier",
    ):
        self._act, self._drop = act, drop_rate
        tokens = resolve_tokens(tokens, omega, channels, 1.0)
        arguments = (patch_size, tokens, channels, num_blocks, permute, skip_layer, drop_path, norm_eps)
        super().__init__(num_classes, image_size, in_chans, *arguments, permute_j1=permute_j1)
        self.gamma = 1.0
        init_mixer_weights(self, init)

    def make_mlp(self, axis: Axis, features_in: int, features_out: int) -> nn.Module:
        return FcBlock(features_in, features_out, act=self._act, drop=self._drop)


register_family("s_mixer", SMixer, "Hayase & Karakida 2024, App. A.2.2")
