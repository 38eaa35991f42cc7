"""What every dataset source is: its facts (`DatasetInfo`), known at construction, and its official
splits as datasets of ``(image, label)`` pairs (`DatasetSource.load`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch.utils.data import Dataset

SPLITS = ("train", "val", "test")
# Data-module arguments that sources may use, and the others ignore (the cache folder).
SHARED_OPTIONS = ("cache_dir",)


@dataclass(frozen=True)
class DatasetInfo:
    num_classes: int
    image_size: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    small: bool = True  # CIFAR-like: pad-crop training, no evaluation crop (else ImageNet-like)
    natural: bool = True  # natural photographs: horizontal flips keep the label (not digits)


def natural_info(num_classes: int, image_size: int = 224) -> DatasetInfo:
    """The facts of an ImageNet-like dataset of natural photographs (ImageNet's mean/std, evaluation crops)."""
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD  # lazily: importing timm imports all its models

    return DatasetInfo(
        num_classes=num_classes,
        image_size=image_size,
        in_chans=3,
        mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD,
        small=False,
    )


def first_image_info(image: Any, num_classes: int) -> tuple[str, bool, DatasetInfo]:
    """(PIL mode to convert to, whether square, facts) of a dataset known by its first image: grey
    ("L", mean = std = 0.5) or RGB (ImageNet's statistics); small up to 96 px."""
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD  # lazily: importing timm imports all its models

    mode = "L" if image.mode in ("1", "L", "I", "I;16", "F") else "RGB"
    width, height = image.size
    info = DatasetInfo(
        num_classes=num_classes,
        image_size=max(width, height),
        in_chans=1 if mode == "L" else 3,
        mean=(0.5,) if mode == "L" else IMAGENET_DEFAULT_MEAN,
        std=(0.5,) if mode == "L" else IMAGENET_DEFAULT_STD,
        small=max(width, height) <= 96,
    )
    return mode, width == height, info


class DatasetSource:
    """A named dataset. Subclasses set `info` (class attribute or in ``__init__``) and implement `load`."""

    name: ClassVar[str]
    info: DatasetInfo
    in_memory: ClassVar[bool] = False  # already decoded tensors: no PIL transforms, no workers needed
    has_val: bool = False  # an official validation split exists
    sharded: ClassVar[bool] = False  # WebDataset shards: the training order is `data.shard_order`'s
    streaming: ClassVar[bool] = False  # a stream (`data.streaming`): its own splits and loaders
    statistics_note: str | None = None  # said once when `info.mean/std` are a guess a user should check

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError
