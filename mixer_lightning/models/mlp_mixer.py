"""MLP-Mixer (Tolstikhin et al. 2021) in the general form of Hayase & Karakida (2024, App. A.2.1).

    U = X + W2 σ(W1 LN(X))     token mixing: one MLP mixes the S tokens, shared by the C channels
    Y = U + σ(LN(U) W3) W4     channel mixing: one MLP mixes the C channels, shared by the S tokens

S and C are free of the patch grid (S0 patches): when S ≠ S0 the first block maps S0 → S with the skip
SkipLayer(X) = LN(W̃X) (Hayase App. A.2.4); S is given, or solved from Ω (``omega``). D_S = γS, D_C = γC
(Hayase) unless given (Tolstikhin's presets fix them). ``permute`` makes it an RP MLP-Mixer.
"""

from __future__ import annotations

from jsonargparse.typing import PositiveFloat, PositiveInt
from torch import nn

from mixer_lightning.models.layers import Activation, InitMode, MlpBlock, Rate, hidden_width, init_mixer_weights
from mixer_lightning.models.pk import Axis, PKMixer
from mixer_lightning.models.registry import register_family, register_preset
from mixer_lightning.width import resolve_tokens


class MLPMixer(PKMixer):
    """MLP-Mixer classifier (normal or random-permuted).

    Args:
        num_classes, image_size, in_chans: the data's (num_classes 0: no head, pooled features out).
        patch_size: P; the patch grid has S0 = (image_size / P)² tokens of C0 = in_chans·P² values.
        tokens: S, the number of tokens the mixing layers see (default S0).
        channels: C, the channels of the mixing layers.
        omega: Ω, connections per layer; S is solved from (Ω, C, γ) (give tokens or omega).
        gamma: γ, the hidden expansion: D_S = γS and D_C = γC unless given below.
        token_hidden: D_S, the token-mixing MLP's hidden width.
        channel_hidden: D_C, the channel-mixing MLP's hidden width.
        num_blocks: L, the number of Mixer blocks.
        permute: random-permuted (RP) mixing layers: true for all blocks, or one flag per block.
        permute_j1: an RP layer draws J1 as well as J2 (Def. 5.1, eq. S.13); false: only J2, the output
            indexes (App. A.2.3 read literally), J1 grouping the entries as the normal layer does.
        skip_layer: use SkipLayer(X) = LN(W̃X) in the first block (default: exactly when S ≠ S0).
        drop_rate: dropout after the MLPs' activation and output.
        drop_path: stochastic depth at the last MLP, rising linearly from 0 at the first.
        norm_eps: LayerNorm ε (flax default 1e-6; Hayase & Karakida use 1e-5).
        act: ``gelu`` (exact) or ``gelu_tanh`` (the JAX code's approximation).
        init: ``xavier``, ``lecun`` or ``normal`` (Hayase's N(0, 1/fan_in)); see `init_mixer_weights`.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        image_size: int = 224,
        in_chans: int = 3,
        patch_size: PositiveInt = 16,
        tokens: PositiveInt | None = None,
        channels: PositiveInt = 512,
        omega: int | str | None = None,
        gamma: PositiveFloat = 4.0,
        token_hidden: PositiveInt | None = None,
        channel_hidden: PositiveInt | None = None,
        num_blocks: PositiveInt = 8,
        permute: bool | list[bool] = False,
        permute_j1: bool = True,
        skip_layer: bool | None = None,
        drop_rate: Rate = 0.0,
        drop_path: Rate = 0.0,
        norm_eps: PositiveFloat = 1e-6,
        act: Activation = "gelu",
        init: InitMode = "xavier",
    ):
        self._gamma, self._hidden = gamma, {"token": token_hidden, "channel": channel_hidden}
        self._act, self._drop = act, drop_rate
        tokens = resolve_tokens(tokens, omega, channels, gamma)
        arguments = (patch_size, tokens, channels, num_blocks, permute, skip_layer, drop_path, norm_eps)
        super().__init__(num_classes, image_size, in_chans, *arguments, permute_j1=permute_j1)
        self.gamma = gamma
        self.token_hidden = self._hidden["token"] or hidden_width(gamma, self.tokens)
        self.channel_hidden = self._hidden["channel"] or hidden_width(gamma, self.channels)
        init_mixer_weights(self, init)

    def make_mlp(self, axis: Axis, features_in: int, features_out: int) -> nn.Module:
        # D_S = γS where S is the block's output tokens (the first block maps S0 → γS → S).
        hidden = self._hidden[axis] or hidden_width(self._gamma, features_out)
        return MlpBlock(features_in, hidden, features_out, act=self._act, drop=self._drop)


register_family("mlp_mixer", MLPMixer, "Tolstikhin et al. 2021; Hayase & Karakida 2024 App. A.2.1")


# Tolstikhin et al. Table 1 (224 px): D_S and D_C are fixed, not γ·S / γ·C.
_TABLE1 = "Tolstikhin et al. 2021, Table 1"
_S = dict(channels=512, token_hidden=256, channel_hidden=2048, num_blocks=8)
_B = dict(channels=768, token_hidden=384, channel_hidden=3072, num_blocks=12)
_L = dict(channels=1024, token_hidden=512, channel_hidden=4096, num_blocks=24)
_H = dict(channels=1280, token_hidden=640, channel_hidden=5120, num_blocks=32)
register_preset("mixer_s32", "mlp_mixer", f"{_TABLE1} (Mixer-S/32)", image_size=224, patch_size=32, **_S)
register_preset("mixer_s16", "mlp_mixer", f"{_TABLE1} (Mixer-S/16)", image_size=224, patch_size=16, **_S)
register_preset("mixer_b32", "mlp_mixer", f"{_TABLE1} (Mixer-B/32)", image_size=224, patch_size=32, **_B)
register_preset("mixer_b16", "mlp_mixer", f"{_TABLE1} (Mixer-B/16)", image_size=224, patch_size=16, **_B)
register_preset("mixer_l32", "mlp_mixer", f"{_TABLE1} (Mixer-L/32)", image_size=224, patch_size=32, **_L)
register_preset("mixer_l16", "mlp_mixer", f"{_TABLE1} (Mixer-L/16)", image_size=224, patch_size=16, **_L)
register_preset("mixer_h14", "mlp_mixer", f"{_TABLE1} (Mixer-H/14)", image_size=224, patch_size=14, **_H)

# Hayase & Karakida Table 1: wider (larger S) Mixers at the same connection count Ω. The paper's
# settings for all its experiments: LayerNorm ε = 1e-5 (App. A.2.1, eq. S.4) and weights N(0, 1/n)
# (Sec. 4.3, eq. S.39); Tolstikhin's presets above keep flax's ε = 1e-6 and the JAX code's init.
_HAYASE = dict(norm_eps=1e-5, init="normal", gamma=4.0)
_HK = "Hayase & Karakida 2024, Table 1"
_SS = dict(image_size=32, num_blocks=2, **_HAYASE)
register_preset("mixer_ss8", "mlp_mixer", f"{_HK} (Mixer-SS/8, CIFAR)", patch_size=8, tokens=16, channels=986, **_SS)
register_preset("mixer_ss_w", "mlp_mixer", f"{_HK} (Mixer-SS-W, CIFAR)", patch_size=4, tokens=64, channels=487, **_SS)
_BW = dict(image_size=224, patch_size=14, tokens=256, channels=588, num_blocks=8, **{**_HAYASE, "gamma": 4.57})
register_preset("mixer_b_w", "mlp_mixer", f"{_HK} (Mixer-B-W, ImageNet)", **_BW)
