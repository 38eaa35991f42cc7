"""Mixup / CutMix of training batches (timm's `Mixup`), applied by the data module once a batch is on the
device: the targets become soft (B, num_classes) class probabilities. Label smoothing is the model's
loss's (``model.label_smoothing``): ``F.cross_entropy(logits, soft_targets, label_smoothing=ε)`` is
timm's ``Mixup(label_smoothing=ε)`` followed by ``SoftTargetCrossEntropy`` (smoothing is linear, so
smoothing the mixture equals mixing the smoothed one-hots), and one knob does both."""

from __future__ import annotations

from typing import Any, Literal

MixupMode = Literal["batch", "pair", "elem"]


def build_mixup(
    num_classes: int, mixup: float, cutmix: float, prob: float, switch_prob: float, mode: MixupMode
) -> Any | None:
    """timm's `Mixup` for these settings (batches of even size), or None when both alphas are 0 (off)."""
    if mixup == 0 and cutmix == 0:
        return None
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
