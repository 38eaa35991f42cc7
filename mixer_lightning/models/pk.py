"""Mixing layers as permuted-Kronecker (PK) layers (Hayase & Karakida 2024, Sec. 5.1, App. A.2.3):

    PK-Layer_W(X; J1, J2) = σ[J2 (I_{n1} ⊗ W) J1 vec(X)]                    (Def. 5.1)

a fully connected layer of effective width m = S·C. A normal Mixer has J ∈ {I, J_c}; a random-permuted
(RP) Mixer draws J1, J2 uniformly once per layer and freezes them (App. A.2.3). Nothing m×m is built:
J1, J2 are gathers of the m entries and I ⊗ W a matmul on the (n1, n2)-reshaped vector. Activations are
(B, S, C), flattened row-major (entry s·C + c is X[s, c]); the permutations being uniform, any fixed
labelling gives the same family (`analysis.effective` converts to the paper's column-major vec).
"""

from __future__ import annotations

from typing import Literal

import torch
from einops import rearrange
from torch import nn

from mixer_lightning.errors import require


class _Permute(torch.autograd.Function):
    """y = x[..., index] whose backward is the same gather by the inverse permutation.

    Plain indexing backpropagates with a scatter-add (index_put_ with accumulate), several times
    slower than a gather on CPU; for a permutation the gradient is exactly grad[..., inverse].
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        # index_select on the last axis: 0.7× the time of torch.gather with a broadcast index on the
        # Xeon the Ω runs use (benchmarks/RESULTS.md, `mixer bench --kernels`); the same values.
        return x.index_select(-1, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (inverse,) = ctx.saved_tensors
        return grad.index_select(-1, inverse), None, None


class Permutation(nn.Module):
    """A frozen uniform random permutation of `size` entries (J1 or J2 of a PK layer).

    Drawn once from torch's global generator (so ``seed_everything`` fixes it), stored as the
    persistent buffer ``index`` (saved in checkpoints; loading one restores the exact function
    whatever seed built the model); ``inverse`` is derived from it.
    """

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        self.register_buffer("index", torch.randperm(size))
        self.register_buffer("inverse", torch.argsort(self.index), persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        key = prefix + "index"
        if key in state_dict:
            index = state_dict[key]
            if index.shape != (self.size,) or not torch.equal(
                torch.sort(index.long()).values, torch.arange(self.size, device=index.device)
            ):
                errors.append(f"{key} is not a permutation of {self.size} entries")
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)
        with torch.no_grad():
            self.inverse.copy_(torch.argsort(self.index))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Permute the last axis: y[..., k] = x[..., index[k]], i.e. y = J x."""
        return _Permute.apply(x, self.index, self.inverse)

    def extra_repr(self) -> str:
        return f"size={self.size}"


Axis = Literal["token", "channel"]


class MixingLayer(nn.Module):
    """One mixing sub-block with its LayerNorm and skip connection:

        token:    U = shortcut(X) + Mat ∘ J2 ∘ (I_C ⊗ f) ∘ J1 ∘ vec(LN(X))    f: S_in → S
        channel:  Y = U + Mat ∘ J2 ∘ (I_S ⊗ f) ∘ J1 ∘ vec(LN(U))               f: C → C

    f: the MLP-Mixer's MLP (Hayase eq. S.5-S.6) or the S-Mixer's FC + σ (eq. S.7-S.8), on the last axis (a
    token-mixing f also has ``forward_columns``: f on X's columns, no transposes). ``permute``: J1, J2 frozen
    random permutations (RP, eq. S.13), else J ∈ {I, J_c}; with ``permute_j1`` false only J2 is random and J1
    groups the entries as the normal layer does (X's columns for token mixing, its rows for channel mixing:
    App. A.2.3's "random shuffling of output indexes" read literally). ``skip``: SkipLayer(X) = LN(W̃X) in a
    first block mapping S0 → S (eq. S.14), else the identity. tokens_in: S_in (S0 in a first block, else S).
    """

    def __init__(
        self,
        axis: Axis,
        mlp: nn.Module,
        tokens_in: int,
        tokens: int,
        channels: int,
        *,
        permute: bool = False,
        permute_j1: bool = True,
        skip: nn.Module | None = None,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.axis = axis
        self.tokens_in, self.tokens, self.channels = tokens_in, tokens, channels
        self.norm = nn.LayerNorm(channels, eps=norm_eps)
        self.mlp = mlp
        self.skip = skip
        self.permute_in = Permutation(tokens_in * channels) if permute and permute_j1 else None  # J1
        self.permute_out = Permutation(tokens * channels) if permute else None  # J2
        from timm.layers import DropPath  # lazily: importing timm imports all its models

        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    @property
    def permuted(self) -> bool:
        """RP: J2 is random (and J1 too, unless the layer was built with ``permute_j1`` false)."""
        return self.permute_out is not None

    def connections(self) -> list[int]:
        """Weights of each FC layer of the branch in the effective wide MLP: the n1 blocks of I_{n1} ⊗ W each
        hold W's (n1 = C for token mixing, S for channel mixing). An FC layer is a child of f holding weights
        (matrices, not biases or norms), counted whole: a low-rank W = A·B holds A's and B's entries, not W's."""
        blocks = self.channels if self.axis == "token" else self.tokens
        counts = [sum(p.numel() for p in child.parameters() if p.ndim > 1) for child in self.mlp.children()]
        return [count * blocks for count in counts if count]

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch: Mat ∘ J2 ∘ (I ⊗ f) ∘ J1 ∘ vec, on an already normalised (B, S_in, C) input."""
        if self.permute_out is not None:
            # I_{n1} ⊗ f on J1 vec(X): n1 blocks of n2 consecutive entries, S_in per block for token mixing
            # (n1 = C blocks), C per block for channel mixing (n1 = S blocks).
            if self.permute_in is not None:
                n2 = self.tokens_in if self.axis == "token" else self.channels
                y = rearrange(self.permute_in(rearrange(x, "b s c -> b (s c)")), "b (n1 n2) -> b n1 n2", n2=n2)
            else:  # J1 the normal layer's grouping: the blocks are X's columns (token) or rows (channel)
                y = x.transpose(1, 2) if self.axis == "token" else x
            y = rearrange(self.mlp(y), "b n1 n2 -> b (n1 n2)")
            return rearrange(self.permute_out(y), "b (s c) -> b s c", c=self.channels)  # Mat ∘ J2
        if self.axis == "token":
            return self.mlp.forward_columns(x)  # W·LN(X) from the left: no transposes (layers.linear_columns)
        return self.mlp(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.skip is None else self.skip(x)
        return shortcut + self.drop_path(self.branch(self.norm(x)))

    def extra_repr(self) -> str:
        return f"axis={self.axis}, tokens_in={self.tokens_in}, tokens={self.tokens}, channels={self.channels}"


class MixerBlock(nn.Module):
    """A base block X ↦ Y: token mixing, then channel mixing (Hayase App. A.2.1)."""

    def __init__(self, token_mixing: MixingLayer, channel_mixing: MixingLayer):
        super().__init__()
        self.token_mixing = token_mixing
        self.channel_mixing = channel_mixing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel_mixing(self.token_mixing(x))


def permute_flags(permute: bool | list[bool], num_blocks: int) -> list[bool]:
    """One flag per block from ``permute``: a bool for every block, or a list (App. D.5 swaps a
    single block of a normal Mixer for its RP counterpart)."""
    if isinstance(permute, bool):
        return [permute] * num_blocks
    flags = list(permute)
    require(
        len(flags) == num_blocks,
        "permute",
        f"a list needs one flag per block (num_blocks={num_blocks}), got {len(flags)}",
        f"give {num_blocks} true/false values or a single true/false",
    )
    return flags


class PKMixer(nn.Module):
    """A Mixer of PK layers: per-patch FC, `num_blocks` blocks of token and channel mixing, LayerNorm,
    global average pooling, linear head (Tolstikhin Fig. 1; Hayase App. A). Families differ only in the
    mixing function f (`make_mlp`): the MLP-Mixer's two-layer MLP, the S-Mixer's FC + σ."""

    def __init__(
        self,
        num_classes: int,
        image_size: int,
        in_chans: int,
        patch_size: int,
        tokens: int | None,
        channels: int,
        num_blocks: int,
        permute: bool | list[bool],
        skip_layer: bool | None,
        drop_path: float,
        norm_eps: float,
        permute_j1: bool = True,
    ):
        from mixer_lightning.models.layers import PatchEmbed, SkipLayer

        super().__init__()
        flags = permute_flags(permute, num_blocks)
        self.stem = PatchEmbed(image_size, patch_size, in_chans, channels)
        tokens_in = self.stem.num_patches  # S0
        tokens = tokens or tokens_in
        if skip_layer is None:
            skip_layer = tokens != tokens_in
        self.num_classes = num_classes
        self.tokens, self.channels, self.num_blocks = tokens, channels, num_blocks
        self.num_features = channels
        self.permute = flags
        self.permute_j1 = permute_j1

        rates = drop_path_rates(drop_path, 2 * num_blocks)
        blocks = []
        for i in range(num_blocks):
            s_in = tokens_in if i == 0 else tokens
            skip = SkipLayer(tokens_in, tokens, channels, norm_eps) if i == 0 and skip_layer else None
            # (built in this order: the seed's draws)
            common = dict(permute=flags[i], permute_j1=permute_j1, norm_eps=norm_eps)
            f = self.make_mlp("token", s_in, tokens)
            token_mixing = MixingLayer("token", f, s_in, tokens, channels, skip=skip, drop_path=rates[2 * i], **common)
            f = self.make_mlp("channel", channels, channels)
            channel_mixing = MixingLayer("channel", f, tokens, tokens, channels, drop_path=rates[2 * i + 1], **common)
            blocks.append(MixerBlock(token_mixing, channel_mixing))
        self.blocks = nn.Sequential(*blocks)
        self.norm = nn.LayerNorm(channels, eps=norm_eps)
        self.head = nn.Linear(channels, num_classes) if num_classes > 0 else nn.Identity()

    def group_matcher(self, coarse: bool = False) -> dict:
        """The layers in order, for layer-wise lr decay (timm's `param_groups_layer_decay`): timm's MlpMixer's, stem, blocks, the final norm with the last block."""
        return {"stem": r"^stem", "blocks": [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))]}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """timm's API: a new zero head for `num_classes` (0: none), as fine-tuning starts (Tolstikhin Sec. 3.1)."""
        from mixer_lightning.models.layers import new_head  # (layers imports this module)

        self.head = new_head(self.channels, num_classes, global_pool)
        self.num_classes = num_classes

    def make_mlp(self, axis: Axis, features_in: int, features_out: int) -> nn.Module:
        """The mixing function f of a layer, acting on the last axis (features_in → features_out)."""
        raise NotImplementedError

    def mixing_layers(self) -> list[MixingLayer]:
        """The 2L mixing layers, in order (token, channel, token, channel, ...)."""
        return [layer for block in self.blocks for layer in (block.token_mixing, block.channel_mixing)]

    def connections(self) -> list[int]:
        """Non-zero weights of every FC layer of the effective wide MLP, in order (`MixingLayer.connections`)."""
        return [count for layer in self.mixing_layers() for count in layer.connections()]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Image (B, in_chans, H, W) -> features (B, S, C) after the final LayerNorm."""
        return self.norm(self.blocks(self.stem(x)))

    def forward_skip_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The hidden units just before every skip connection: the input of each of the 2L mixing
        layers, (B, S0, C) for the first and (B, S, C) after, which the CKA analysis of Hayase &
        Karakida Sec. 3.4 compares."""
        x = self.stem(x)
        features = []
        for layer in self.mixing_layers():
            features.append(x)
            x = layer(x)
        return features

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Features (B, S, C) -> logits (B, num_classes), by global average pooling over tokens."""
        x = x.mean(dim=1)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def drop_path_rates(drop_path: float, num_mlps: int) -> list[float]:
    """Stochastic depth "rises linearly from 0 at the first MLP to s at the last", every token and
    channel MLP counting on its own (Tolstikhin, supplementary B). timm uses one rate for all."""
    if num_mlps == 1:
        return [drop_path]
    return [drop_path * i / (num_mlps - 1) for i in range(num_mlps)]
