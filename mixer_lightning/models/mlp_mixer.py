"""MLP-Mixer (Tolstikhin et al. 2021) in the general form of Hayase & Karakida (2024, App. A.2).

    U = X + W2 σ(W1 LN(X))     token mixing: one MLP mixes the S tokens, shared by the C channels
    Y = U + σ(LN(U) W3) W4     channel mixing: one MLP mixes the C channels, shared by the S tokens

The mixing sizes (tokens S, channels C) are free of the patch grid (S0 patches of C0 values): the
per-patch FC maps C0 → C, and when S ≠ S0 (or ``skip_layer=True``) the first token-mixing block maps
S0 → S with the skip connection SkipLayer(X) = LN(W̃X) (Hayase App. A.2.4). Hidden widths are
D_S = γS and D_C = γC (Hayase) unless given explicitly (the Tolstikhin presets fix D_S, D_C).
"""

from __future__ import annotations

import torch
from timm.layers import DropPath
from torch import nn

from mixer_lightning.errors import require
from mixer_lightning.models.layers import (
    Activation,
    InitMode,
    MlpBlock,
    PatchEmbed,
    SkipLayer,
    check_positive,
    check_rate,
    hidden_width,
    init_mixer_weights,
)
from mixer_lightning.models.registry import register_family, register_preset


def drop_path_rates(drop_path: float, num_mlps: int) -> list[float]:
    """Stochastic depth "rises linearly from 0 at the first MLP to s at the last", every token and
    channel MLP counting on its own (Tolstikhin, supplementary B). timm uses one rate for all."""
    if num_mlps == 1:
        return [drop_path]
    return [drop_path * i / (num_mlps - 1) for i in range(num_mlps)]


class TokenMixing(nn.Module):
    """U = X + W2 σ(W1 LN(X)) (Tolstikhin eq. 1; Hayase eq. S.5), with (B, S, C) tensors.

    The MLP acts along the token axis of every channel. With ``skip`` given (first block of a model
    whose S ≠ S0) the MLP maps S0 → S and the skip connection is that layer (Hayase eq. S.14)."""

    def __init__(
        self,
        tokens_in: int,
        tokens_out: int,
        hidden: int,
        channels: int,
        *,
        skip: SkipLayer | None = None,
        act: Activation = "gelu",
        drop: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        require(
            skip is not None or tokens_in == tokens_out,
            "tokens",
            f"a token-mixing block from {tokens_in} to {tokens_out} tokens needs a skip layer",
            "set skip_layer: true",
        )
        self.norm = nn.LayerNorm(channels, eps=norm_eps)
        self.mlp = MlpBlock(tokens_in, hidden, tokens_out, act=act, drop=drop)
        self.skip = skip
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(x).transpose(1, 2)).transpose(1, 2)
        shortcut = x if self.skip is None else self.skip(x)
        return shortcut + self.drop_path(y)


class ChannelMixing(nn.Module):
    """Y = U + σ(LN(U) W3) W4 (Tolstikhin eq. 1; Hayase eq. S.6): the MLP acts on every token's C channels."""

    def __init__(
        self,
        channels: int,
        hidden: int,
        *,
        act: Activation = "gelu",
        drop: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=norm_eps)
        self.mlp = MlpBlock(channels, hidden, act=act, drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.mlp(self.norm(x)))


class MixerBlock(nn.Module):
    """A base block X ↦ Y: token mixing, then channel mixing (Hayase App. A.2.1)."""

    def __init__(self, token_mixing: nn.Module, channel_mixing: nn.Module):
        super().__init__()
        self.token_mixing = token_mixing
        self.channel_mixing = channel_mixing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel_mixing(self.token_mixing(x))


class MLPMixer(nn.Module):
    """MLP-Mixer classifier: per-patch FC, ``num_blocks`` Mixer blocks, LayerNorm, global average
    pooling over tokens, linear head (Tolstikhin Fig. 1).

    Args:
        num_classes: classifier outputs (0: no head, ``forward`` returns pooled features).
        image_size: side of the square input image, in pixels.
        in_chans: image channels.
        patch_size: P; the patch grid has S0 = (image_size / P)² tokens of C0 = in_chans·P² values.
        tokens: S, the number of tokens the mixing layers see (default S0).
        channels: C, the channels of the mixing layers.
        gamma: γ, the hidden expansion: D_S = γS and D_C = γC unless given below.
        token_hidden: D_S, the token-mixing MLP's hidden width.
        channel_hidden: D_C, the channel-mixing MLP's hidden width.
        num_blocks: L, the number of Mixer blocks.
        skip_layer: use SkipLayer(X) = LN(W̃X) in the first block (default: exactly when S ≠ S0).
        drop_rate: dropout after the MLPs' activation and output.
        drop_path: stochastic depth at the last MLP, rising linearly from 0 at the first.
        norm_eps: LayerNorm ε (flax default 1e-6; Hayase & Karakida use 1e-5).
        act: ``gelu`` (exact) or ``gelu_tanh`` (the JAX code's approximation).
        init: ``xavier`` or ``lecun`` dense init; see `init_mixer_weights`.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        image_size: int = 224,
        in_chans: int = 3,
        patch_size: int = 16,
        tokens: int | None = None,
        channels: int = 512,
        gamma: float = 4.0,
        token_hidden: int | None = None,
        channel_hidden: int | None = None,
        num_blocks: int = 8,
        skip_layer: bool | None = None,
        drop_rate: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
        act: Activation = "gelu",
        init: InitMode = "xavier",
    ):
        super().__init__()
        check_positive(
            tokens=tokens,
            channels=channels,
            gamma=gamma,
            token_hidden=token_hidden,
            channel_hidden=channel_hidden,
            num_blocks=num_blocks,
            norm_eps=norm_eps,
        )
        require(num_classes >= 0, "num_classes", f"must be >= 0, got {num_classes}", "give the number of classes")
        check_rate(drop_rate=drop_rate, drop_path=drop_path)
        self.stem = PatchEmbed(image_size, patch_size, in_chans, channels)
        tokens_in = self.stem.num_patches  # S0
        tokens = tokens or tokens_in
        if skip_layer is None:
            skip_layer = tokens != tokens_in
        self.num_classes = num_classes
        self.tokens, self.channels, self.num_blocks = tokens, channels, num_blocks
        self.token_hidden = token_hidden or hidden_width(gamma, tokens)
        self.channel_hidden = channel_hidden or hidden_width(gamma, channels)
        self.num_features = channels

        rates = drop_path_rates(drop_path, 2 * num_blocks)
        blocks = []
        for i in range(num_blocks):
            first = i == 0
            skip = SkipLayer(tokens_in, tokens, channels, norm_eps) if first and skip_layer else None
            token_mixing = TokenMixing(
                tokens_in if first else tokens,
                tokens,
                self.token_hidden,
                channels,
                skip=skip,
                act=act,
                drop=drop_rate,
                drop_path=rates[2 * i],
                norm_eps=norm_eps,
            )
            channel_mixing = ChannelMixing(
                channels, self.channel_hidden, act=act, drop=drop_rate, drop_path=rates[2 * i + 1], norm_eps=norm_eps
            )
            blocks.append(MixerBlock(token_mixing, channel_mixing))
        self.blocks = nn.Sequential(*blocks)
        self.norm = nn.LayerNorm(channels, eps=norm_eps)
        self.head = nn.Linear(channels, num_classes) if num_classes > 0 else nn.Identity()
        init_mixer_weights(self, init)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Image (B, in_chans, H, W) -> features (B, S, C) after the final LayerNorm."""
        return self.norm(self.blocks(self.stem(x)))

    def forward_skip_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The hidden units just before every skip connection (the input of each token- and channel-
        mixing sub-block, 2L tensors of shape (B, S, C) or (B, S0, C) for the first), which the CKA
        analysis of Hayase & Karakida Sec. 3.4 compares."""
        x = self.stem(x)
        features = []
        for block in self.blocks:
            features.append(x)
            x = block.token_mixing(x)
            features.append(x)
            x = block.channel_mixing(x)
        return features

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Features (B, S, C) -> logits (B, num_classes), by global average pooling over tokens."""
        x = x.mean(dim=1)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


@register_family("mlp_mixer", "Tolstikhin et al. 2021; Hayase & Karakida 2024 App. A.2.1")
def mlp_mixer(**kwargs) -> MLPMixer:
    """The generic MLP-Mixer: every argument of `MLPMixer`."""
    return MLPMixer(**kwargs)


# Tolstikhin et al. Table 1 (224 px): D_S and D_C are fixed, not γ·S / γ·C.
_TOLSTIKHIN = {
    "s": dict(channels=512, token_hidden=256, channel_hidden=2048, num_blocks=8),
    "b": dict(channels=768, token_hidden=384, channel_hidden=3072, num_blocks=12),
    "l": dict(channels=1024, token_hidden=512, channel_hidden=4096, num_blocks=24),
    "h": dict(channels=1280, token_hidden=640, channel_hidden=5120, num_blocks=32),
}
for _size, _patch in [("s", 32), ("s", 16), ("b", 32), ("b", 16), ("l", 32), ("l", 16), ("h", 14)]:
    register_preset(
        f"mixer_{_size}{_patch}",
        "mlp_mixer",
        f"Tolstikhin et al. 2021, Table 1 (Mixer-{_size.upper()}/{_patch})",
        image_size=224,
        patch_size=_patch,
        **_TOLSTIKHIN[_size],
    )

# Hayase & Karakida Table 1: wider (larger S) Mixers at the same connection count Ω.
register_preset(
    "mixer_ss8", "mlp_mixer", "Hayase & Karakida 2024, Table 1 (Mixer-SS/8, CIFAR)",
    image_size=32, patch_size=8, tokens=16, channels=986, gamma=4.0, num_blocks=2,
)  # fmt: skip
register_preset(
    "mixer_ss_w", "mlp_mixer", "Hayase & Karakida 2024, Table 1 (Mixer-SS-W, CIFAR)",
    image_size=32, patch_size=4, tokens=64, channels=487, gamma=4.0, num_blocks=2,
)  # fmt: skip
register_preset(
    "mixer_b_w", "mlp_mixer", "Hayase & Karakida 2024, Table 1 (Mixer-B-W, ImageNet)",
    image_size=224, patch_size=14, tokens=256, channels=588, gamma=4.57, num_blocks=8,
)  # fmt: skip
