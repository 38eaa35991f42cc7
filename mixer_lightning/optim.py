"""Learning-rate schedules stepped once per optimiser step, and weight-decay parameter groups.

`WarmupDecayLR` covers both papers' recipes: linear warm-up, then cosine decay (Hayase & Karakida
C.5: warm-up 5 epochs from 1e-6, cosine to 1e-5) or linear decay (Tolstikhin: 10k warm-up steps,
then linear decay to 0). Its length is in epochs or steps; `ClassifierModule` tells it how many steps
training has (`set_training_length`), so configs never hard-code the number of iterations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from mixer_lightning.errors import require


class WarmupDecayLR(LRScheduler):
    """Linear warm-up from ``warmup_start_lr`` to the optimiser's lr, then decay to ``min_lr``.

    Args:
        optimizer: the optimiser; its per-group ``lr`` is the peak learning rate.
        warmup_epochs: warm-up length in epochs (may be fractional); ignored if ``warmup_steps`` is set.
        warmup_steps: warm-up length in optimiser steps.
        warmup_start_lr: learning rate at step 0 of the warm-up.
        decay: ``cosine``, ``linear`` or ``constant`` after the warm-up.
        min_lr: learning rate at the last step.
        total_steps: training length in optimiser steps (filled in by the Lightning module).
        steps_per_epoch: optimiser steps per epoch (filled in by the Lightning module).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_epochs: NonNegativeFloat = 0.0,
        warmup_steps: NonNegativeInt | None = None,
        warmup_start_lr: float = 0.0,
        decay: Literal["cosine", "linear", "constant"] = "cosine",
        min_lr: float = 0.0,
        total_steps: int | None = None,
        steps_per_epoch: int | None = None,
        last_epoch: int = -1,
    ):
        # Plain numbers: the scheduler's state (its attributes) goes into checkpoints read with weights_only.
        self.warmup_epochs = float(warmup_epochs)
        self.warmup_steps_arg = None if warmup_steps is None else int(warmup_steps)
        self.warmup_start_lr = warmup_start_lr
        self.decay = decay
        self.min_lr = min_lr
        self.total_steps = self.total_steps_arg = total_steps
        self.steps_per_epoch = self.steps_per_epoch_arg = steps_per_epoch
        super().__init__(optimizer, last_epoch)

    def set_training_length(self, total_steps: int, steps_per_epoch: int) -> None:
        """Called by the Lightning module as training starts, a resumed fit's included, with the trainer's step
        counts: the schedule's length is the config's (a resume with a larger max_epochs decays over the new
        length, not the checkpoint's, whose end would leave the added epochs at min_lr)."""
        self.total_steps = total_steps if self.total_steps_arg is None else self.total_steps_arg
        self.steps_per_epoch = steps_per_epoch if self.steps_per_epoch_arg is None else self.steps_per_epoch_arg

    @property
    def warmup_length(self) -> int:
        if self.warmup_steps_arg is not None:
            return self.warmup_steps_arg
        if self.warmup_epochs == 0:
            return 0
        if self.steps_per_epoch is None:
            raise RuntimeError("WarmupDecayLR: warmup_epochs needs steps_per_epoch (set_training_length)")
        return round(self.warmup_epochs * self.steps_per_epoch)

    def lr_at(self, step: int, peak: float) -> float:
        """The learning rate after `step` optimiser steps for a group whose peak is `peak`."""
        if step == 0:  # known before the training length is: the optimiser's lr at construction
            has_warmup = self.warmup_steps_arg > 0 if self.warmup_steps_arg is not None else self.warmup_epochs > 0
            return self.warmup_start_lr if has_warmup else peak
        warmup = self.warmup_length
        if step < warmup:
            return self.warmup_start_lr + (peak - self.warmup_start_lr) * step / warmup
        if self.decay == "constant":
            return peak
        if self.total_steps is None:
            raise RuntimeError("WarmupDecayLR: decay needs total_steps (set_training_length)")
        progress = min(1.0, (step - warmup) / max(1, self.total_steps - warmup))
        if self.decay == "cosine":
            factor = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            factor = 1.0 - progress
        return self.min_lr + (peak - self.min_lr) * factor

    def get_lr(self) -> list[float]:
        return [self.lr_at(self.last_epoch, base) for base in self.base_lrs]


def is_no_decay(name: str, param: torch.Tensor) -> bool:
    """Biases and normalisation scales (every 1-D parameter) get no weight decay."""
    return param.ndim <= 1 or name.endswith(".bias")


def param_groups(model: nn.Module, weight_decay: float | None = None) -> list[dict]:
    """Two parameter groups: weights with decay, biases and norm parameters without.

    The first group keeps the optimiser's own weight decay (or `weight_decay` if given); the second
    sets it to 0. Their ``name`` (``decay``, ``no_decay``) names their learning rates in the loggers
    (Lightning's `LearningRateMonitor`: ``lr-AdamW/decay``).
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if is_no_decay(name, param) else decay).append(param)
    first: dict = {"name": "decay", "params": decay}
    if weight_decay is not None:
        first["weight_decay"] = weight_decay
    groups: Iterable[dict] = [first, {"name": "no_decay", "params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def layer_decay_groups(net: nn.Module, layer_decay: float, weight_decay: float) -> list[dict]:
    """Parameter groups for layer-wise learning-rate decay (BEiT, Bao et al. 2022; timm's ``--layer-decay``):
    timm's `param_groups_layer_decay`, with the layers named by the network's ``group_matcher`` (stem
    first, then each block, the final norm with the last block, the head last). Each group has
    ``lr_scale`` = layer_decay^(layers above it), for the caller to multiply into its lr, and the
    weight decay split of `param_groups` (every 1-D parameter without); its ``name`` is timm's key of it,
    ``layer_<i>_decay`` or ``layer_<i>_no_decay`` (the loggers' ``lr-AdamW/layer_0_decay``)."""
    from timm.models import group_parameters
    from timm.optim import param_groups_layer_decay

    require(
        callable(getattr(net, "group_matcher", None)),
        "layer_decay",
        f"{type(net).__name__} does not name its layers (no group_matcher)",
        "drop model.layer_decay for this family",
    )
    groups = param_groups_layer_decay(net, weight_decay=weight_decay, layer_decay=layer_decay)
    # timm keys its groups by these names but returns the groups alone: named again from a member, as timm does
    layers = group_parameters(net, net.group_matcher(coarse=False), reverse=True)
    names = {id(param): name for name, param in net.named_parameters()}
    for group in groups:
        first = group["params"][0]
        layer = layers.get(names[id(first)], max(layers.values()))
        group["name"] = f"layer_{layer}_{'no_decay' if first.ndim <= 1 else 'decay'}"
    return groups
