"""What the analyses ask of a network, as runtime-checkable protocols (a family offers those its
structure has; it need not inherit anything; an analysis that needs one it lacks says so in one line):

- `Classifier` (every family): ``mixer fewshot`` (``forward_head(..., pre_logits=True)``), predict, export.
- `SkipInputs`: the hidden units before every skip connection, whose CKA Hayase & Karakida compare
  (Sec. 3.4, App. C.1; ``mixer cka``).
- `MixingNetwork`: a Mixer as PK layers (Sec. 5.1): spectra (Sec. 4.3), the effective wide MLP, the
  token-mixing pictures (Mixer Fig. 5), ``mixer width``'s connections per FC layer.
- `SparseNetwork`: an SW-MLP's sparse layers (App. A.2.5), input to output, for spectra and pictures.
- `StructuredNetwork`: a shallow Kronecker or Monarch MLP's layers with ``effective_weight()`` (Sec. 3.3).
- `EffectiveWeight`: an FC layer other than ``nn.Linear`` (a low-rank A·B, M ⊙ W, a Monarch product), as the
  analyses read its matrix W (spectra, the token-mixing pictures, the effective wide MLP).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import nn

if TYPE_CHECKING:
    from mixer_lightning.models.pk import MixingLayer


@runtime_checkable
class Classifier(Protocol):
    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, in_chans, H, W) → features before pooling and the head."""
        ...

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Features → logits (B, num_classes), or the pooled features with ``pre_logits``."""
        ...


@runtime_checkable
class SkipInputs(Protocol):
    def forward_skip_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Images → the hidden units just before every skip connection, input to output."""
        ...


@runtime_checkable
class MixingNetwork(Protocol):
    def mixing_layers(self) -> list[MixingLayer]:
        """The 2L mixing layers, in order (token, channel, token, channel, ...)."""
        ...

    def connections(self) -> list[int]:
        """Non-zero weights of every FC layer of the effective wide MLP, in order."""
        ...


@runtime_checkable
class SparseNetwork(Protocol):
    def sparse_layers(self) -> list[nn.Module]:
        """Every static sparse linear layer, input to output."""
        ...


@runtime_checkable
class StructuredNetwork(Protocol):
    def structured_layers(self) -> list[nn.Module]:
        """Every structured layer (with ``effective_weight()``), input to output."""
        ...


@runtime_checkable
class EffectiveWeight(Protocol):
    def effective_weight(self) -> torch.Tensor:
        """The (out_features, in_features) matrix W the layer applies to its input."""
        ...
