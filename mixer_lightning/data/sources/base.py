"""What every dataset source is: its facts (`DatasetInfo`), known at construction, and its official
splits as datasets of ``(image, label)`` pairs (`DatasetSource.load`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from torch.utils.data import Dataset

SPLITS = ("train", "val", "test")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # timm's IMAGENET_DEFAULT_*


def say(line: str) -> None:
    """A line of the run's console, from the first process only (the launchers' rank variables: the
    trainer, which knows its rank, may not exist yet)."""
    if all(os.environ.get(name, "0") in ("", "0") for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "NODE_RANK")):
        print(line, flush=True)


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
    return DatasetInfo(num_classes, image_size, 3, IMAGENET_MEAN, IMAGENET_STD, small=False)


def first_image_info(image: Any, num_classes: int) -> tuple[str, bool, DatasetInfo]:
    """(PIL mode to convert to, whether square, facts) of a dataset known by its first image: grey
    ("L", mean = std = 0.5) or RGB (ImageNet's statistics); small up to 96 px."""
    grey = image.mode in ("1", "L", "I", "I;16", "F")
    width, height = image.size
    side = max(width, height)
    info = DatasetInfo(
        num_classes,
        side,
        1 if grey else 3,
        (0.5,) if grey else IMAGENET_MEAN,
        (0.5,) if grey else IMAGENET_STD,
        small=side <= 96,
    )
    return "L" if grey else "RGB", width == height, info


class DatasetSource:
    """A named dataset. Subclasses set `info` (class attribute or in ``__init__``) and implement `load`;
    ``options`` names the data-module arguments a source takes beyond (root, download)."""

    name: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    info: DatasetInfo
    in_memory: ClassVar[bool] = False  # already decoded tensors: no PIL transforms, no workers needed
    has_val: bool = False  # an official validation split exists
    sharded: ClassVar[bool] = False  # WebDataset shards: the training order is `data.shard_order`'s
    streaming: ClassVar[bool] = False  # a stream (`data.streaming`): its own splits and loaders
    square: bool = True  # images of one square side (else data.image_size must be given)
    statistics_note: str | None = None  # said once when `info.mean/std` are a guess a user should check

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError
