"""What the analyses ask of a network, written down once, so that a new family knows what to offer.

Each is a `typing.Protocol` (runtime-checkable: ``isinstance(net, MixingNetwork)`` tells whether a
network offers the methods; a family need not inherit from anything). A family offers the ones its
structure has; an analysis that needs one it lacks says so in one line.

- `Classifier` (every family): image → features → logits. ``mixer fewshot`` (linear probe on
  ``forward_head(..., pre_logits=True)``), ``mixer predict``, ``mixer export``.
- `SkipInputs`: the hidden units before every skip connection, the features whose CKA Hayase &
  Karakida compare (Sec. 3.4, App. C.1; ``mixer cka``). `PKMixer` gives the input of each of its 2L
  mixing layers, `SWMLP` that of each block.
- `MixingNetwork`: a Mixer written as PK layers (Sec. 5.1): its 2L `MixingLayer`s, from which the
  spectra (``mixer spectrum``, Sec. 4.3), the effective wide MLP (`analysis.effective`), the
  pictures of the token-mixing units (``mixer visualize``, Mixer Fig. 5) and the CKA feature names
  are read; and its connections per FC layer of the effective wide MLP (``mixer width``).
- `SparseNetwork`: a static sparse-weight MLP (SW-MLP, App. A.2.5): its sparse layers (each with
  ``connections``, ``in_features``, ``out_features``), input to output, and the same per block
  (``blocks``, an ``nn.Sequential`` of modules that offer ``sparse_layers()`` too), for the spectra
  and pictures.
- `StructuredNetwork`: a shallow structured MLP (Kronecker or Monarch, Sec. 3.3): its structured
  layers, each with ``effective_weight()`` (the dense matrix it equals), for the spectra.
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
