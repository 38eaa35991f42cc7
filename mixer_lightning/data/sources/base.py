"""What every dataset source is: its facts (`DatasetInfo`), known at construction, and its official
splits as datasets of ``(image, label)`` pairs (`DatasetSource.load`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch.utils.data import Dataset

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class DatasetInfo:
    num_classes: int
    image_size: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    small: bool = True  # CIFAR-like: pad-crop training, no evaluation crop (else ImageNet-like)
    natural: bool = True  # natural photographs: horizontal flips keep the label (not digits)


class DatasetSource:
    """A named dataset. Subclasses set `info` (class attribute or in ``__init__``) and implement `load`."""

    name: ClassVar[str]
    info: DatasetInfo
    in_memory: ClassVar[bool] = False  # already decoded tensors: no PIL transforms, no workers needed
    has_val: bool = False  # an official validation split exists

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError
