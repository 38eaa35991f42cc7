"""Mixup / CutMix on training batches (timm's `Mixup`), with the project's checks.

The data module applies it to each training batch once the batch is on the device, so the images
are mixed on the accelerator and the targets become soft (B, num_classes) class probabilities.
Label smoothing is not applied here but by the model's loss (``model.init_args.label_smoothing``):
``F.cross_entropy(logits, soft_targets, label_smoothing=ε)`` smooths the mixed targets, which is
exactly timm's ``Mixup(label_smoothing=ε)`` followed by ``SoftTargetCrossEntropy`` (smoothing is
linear, so smoothing the mixture equals mixing the smoothed one-hots), and one knob does both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from timm.data import Mixup

from mixer_lightning.errors import require

MixupMode = Literal["batch", "pair", "elem"]


def build_mixup(
    num_classes: int, mixup: float, cutmix: float, prob: float, switch_prob: float, mode: MixupMode, batch_size: int
) -> Mixup | None:
    """timm's `Mixup` for these settings, or None when both alphas are 0 (off)."""
    require(mixup >= 0, "data.mixup", f"must be >= 0 (0 turns mixup off), got {mixup}")
    require(cutmix >= 0, "data.cutmix", f"must be >= 0 (0 turns cutmix off), got {cutmix}")
    require(0 <= prob <= 1, "data.mixup_prob", f"must be in [0, 1], got {prob}")
    require(0 <= switch_prob <= 1, "data.mixup_switch_prob", f"must be in [0, 1], got {switch_prob}")
    require(
        mode in ("batch", "pair", "elem"), "data.mixup_mode", f"unknown mode {mode!r}", "choose batch, pair or elem"
    )
    if mixup == 0 and cutmix == 0:
        return None
    require(
        batch_size % 2 == 0,
        "data.batch_size",
        f"mixup/cutmix mix every image with another of its batch, so the batch size must be even, got {batch_size}",
        f"use an even data.batch_size (e.g. {batch_size + 1})",
    )
    from timm.data import Mixup  # lazily: importing timm imports all its models

    return Mixup(
        mixup_alpha=mixup,
        cutmix_alpha=cutmix,
        prob=prob,
        switch_prob=switch_prob,
        mode=mode,
        label_smoothing=0.0,
        num_classes=num_classes,
    )
