"""Building blocks shared by every family: the per-patch FC stem, MLPs, the first-block skip layer,
the JAX-style initialisers, and the argument types the CLI checks (jsonargparse restricted types).

Notation (Hayase & Karakida 2024, App. A): an H×W image with patch size P gives S0 = HW/P² input
tokens of C0 = in_chans·P² values; mixing layers act on X ∈ R^{S×C} (S tokens, C channels), stored
as a (batch, S, C) tensor.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from einops import rearrange
from jsonargparse.typing import restricted_number_type
from torch import nn

from mixer_lightning.errors import require

Activation = Literal["gelu", "gelu_tanh"]
Rate = restricted_number_type(None, float, [(">=", 0.0), ("<", 1.0)])  # dropout, stochastic depth: [0, 1)
Fraction = restricted_number_type(None, float, [(">", 0.0), ("<=", 1.0)])  # a density p: (0, 1]


def hidden_width(gamma: float, width: int) -> int:
    """The hidden width γ·n of an MLP on n features, rounded half up (Hayase: D_S = γS, D_C = γC)."""
    return max(1, int(math.floor(gamma * width + 0.5)))


def activation(name: Activation) -> nn.Module:
    """σ = GELU (Tolstikhin; Hayase eq. S.3). ``gelu_tanh`` is the tanh approximation that the
    official JAX code gets from ``flax.linen.gelu``; ``gelu`` is the exact erf form used by timm."""
    return nn.GELU(approximate={"gelu": "none", "gelu_tanh": "tanh"}[name])


class PatchEmbed(nn.Module):
    """Per-patch FC layer (Hayase eq. S.1): each of the S0 P×P patches' C0 = in_chans·P² values to C
    channels, a P×P convolution with stride P as the JAX code's ``stem``; tokens in raster order, or with
    ``regions`` = K region by region (K×K regions, each in raster order: Mixer supplementary C, `upscale`)."""

    def __init__(self, image_size: int, patch_size: int, in_chans: int, channels: int, regions: int = 1):
        super().__init__()
        require(
            image_size % patch_size == 0,
            "patch_size",
            f"{patch_size} does not divide image_size {image_size}",
            f"choose a divisor of {image_size} (or resize the images)",
        )
        self.image_size = image_size
        self.patch_size = patch_size
        self.grid = image_size // patch_size
        self.num_patches = self.grid * self.grid  # S0
        self.regions = regions
        self.proj = nn.Conv2d(in_chans, channels, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Channels-last: the (B, S0, C) tokens below are then a view, not a copy of every token (7-20% of
        # a CIFAR-size CPU step, benchmarks/RESULTS.md); the same sums in another order.
        x = self.proj(x.contiguous(memory_format=torch.channels_last))  # (B, C, G, G)
        if self.regions == 1:
            return rearrange(x, "b c h w -> b (h w) c")  # (B, S0, C), raster order
        # Region-major (K rows × K columns of regions), raster order of the patches inside a region.
        return rearrange(x, "b c (kh h) (kw w) -> b (kh kw h w) c", kh=self.regions, kw=self.regions)

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, patch_size={self.patch_size}, regions={self.regions}"


def linear_columns(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """W X + b 1ᵀ on every X of the batch, (B, n_in, N) -> (B, n_out, N): token mixing as the papers write
    it (Hayase eq. S.5), one batched GEMM without transposing copies (1.05–1.08× faster CPU steps,
    benchmarks/RESULTS.md; the dot products of ``linear(X.transpose(1, 2)).transpose(1, 2)``)."""
    batch = x.shape[0]
    weight = linear.weight.expand(batch, -1, -1)
    if linear.bias is None:
        return torch.bmm(weight, x)
    return torch.baddbmm(linear.bias[:, None].expand(batch, -1, x.shape[2]), weight, x)


class MlpBlock(nn.Module):
    """f_{W1,W2}(x) = W2 σ(W1 x + b1) + b2, applied to the last axis (Hayase eq. S.2)."""

    def __init__(
        self, in_features: int, hidden: int, out_features: int | None = None, act: Activation = "gelu", drop=0.0
    ):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = activation(act)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, out_features or in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

    def forward_columns(self, x: torch.Tensor) -> torch.Tensor:
        """f on every column of x (B, n_in, N) -> (B, n_out, N): token mixing without transposes."""
        return self.drop2(linear_columns(self.fc2, self.drop1(self.act(linear_columns(self.fc1, x)))))


class FcBlock(nn.Module):
    """f_W(x) = σ(W x + b): the S-Mixer's mixing function, one FC layer and σ (Hayase eq. S.3)."""

    def __init__(self, in_features: int, out_features: int, act: Activation = "gelu", drop: float = 0.0):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.act = activation(act)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.act(self.fc(x)))

    def forward_columns(self, x: torch.Tensor) -> torch.Tensor:
        """f on every column of x (B, n_in, N) -> (B, n_out, N): token mixing without transposes."""
        return self.drop(self.act(linear_columns(self.fc, x)))


class SkipLayer(nn.Module):
    """SkipLayer(X) = LN(W̃ X), W̃ ∈ R^{S×S0} (Hayase App. A.2.4, eq. S.15): the skip connection of the
    first token-mixing block when the mixing layers' S differs from the patch grid's S0 (the sweeps
    use it even when S = S0, "for a fair comparison")."""

    def __init__(self, tokens_in: int, tokens_out: int, channels: int, norm_eps: float):
        super().__init__()
        self.proj = nn.Linear(tokens_in, tokens_out, bias=False)
        self.norm = nn.LayerNorm(channels, eps=norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, S0, C) -> (B, S, C)
        return self.norm(linear_columns(self.proj, x))


InitMode = Literal["xavier", "lecun", "normal"]


def fan_in_normal_(weight: torch.Tensor) -> torch.Tensor:
    """Fill `weight` with i.i.d. N(0, 1/n), n its fan-in (in_features, or in_chans·P² of a patch stem),
    untruncated: Hayase & Karakida's Mixer initialisation (Sec. 4.3, a γC×C weight is N(0, 1/C) and a
    γS×S one N(0, 1/S); eq. S.39)."""
    fan_in = weight[0].numel()
    with torch.no_grad():
        return weight.normal_(0.0, 1.0 / math.sqrt(fan_in))


def init_mixer_weights(model: nn.Module, mode: InitMode = "xavier") -> None:
    """Initialise a Mixer: zero head and LayerNorms (1, 0) in every mode (``vit_jax/models_mixer.py``), and
    - ``xavier``: Xavier-uniform kernels, MLP biases N(0, 10⁻⁶²), LeCun-normal stem: the ViT JAX code's MLP
      blocks, which timm's ``MlpMixer`` and its pretrained weights use;
    - ``lecun``: flax ``nn.Dense`` defaults, what the published ``models_mixer.py`` literally does;
    - ``normal``: every weight N(0, 1/fan_in), untruncated, zero biases: Hayase & Karakida Sec. 4.3 / eq.
      S.39, which their spectral argument (σ_max ≈ 1 + √γ) assumes (head and biases not stated: zero)."""
    from timm.layers import lecun_normal_  # lazily: importing timm imports all its models

    dense = {"xavier": nn.init.xavier_uniform_, "normal": fan_in_normal_, "lecun": lecun_normal_}[mode]
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if name == "head" or name.endswith(".head"):
                nn.init.zeros_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
                continue
            dense(module.weight)
            if module.bias is not None:
                if mode == "xavier" and ".mlp." in f".{name}.":
                    nn.init.normal_(module.bias, std=1e-6)
                else:
                    nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Conv2d):
            if mode == "normal":
                fan_in_normal_(module.weight)
            else:
                lecun_normal_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def new_head(features: int, num_classes: int, global_pool: str | None = None) -> nn.Module:
    """A classifier head for `num_classes` (0: none, the pooled features come out), zero-initialised as
    fine-tuning starts it (Tolstikhin Sec. 3.1): every family's ``reset_classifier``, with timm's
    signature (the pooling is always the average)."""
    require(global_pool in (None, "avg"), "global_pool", f"{global_pool!r}: this network pools by the average only")
    if num_classes == 0:
        return nn.Identity()
    head = nn.Linear(features, num_classes)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head
