"""What every dataset source is: its facts (`DatasetInfo`), known at construction, and its official
splits as datasets of ``(image, label)`` pairs (`DatasetSource.load`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.errors import ConfigError

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
    natural: bool = True  # natural photographs: horizontal flips keep the label (not digits)

    @property
    def small(self) -> bool:
        """CIFAR-like images (<= 96 px: CIFAR, STL-10, MNIST, digits): pad-and-crop training and no evaluation
        crop; larger ones are ImageNet-like (random-resized crop, resmall crop). Decided by the data's own
        size for every source, as docs/notes/data-api.md says."""
        return self.image_size <= 96


def natural_info(num_classes: int, image_size: int = 224) -> DatasetInfo:
    """The facts of a dataset of natural colour photographs (ImageNet's mean/std)."""
    return DatasetInfo(num_classes, image_size, 3, IMAGENET_MEAN, IMAGENET_STD)


def first_image_info(image: Any, num_classes: int) -> tuple[str, bool, DatasetInfo]:
    """(PIL mode to convert to, whether square, facts) of a dataset known by its first image: grey
    ("L", mean = std = 0.5) or RGB (ImageNet's statistics), its side the image's longer one."""
    grey = image.mode in ("1", "L", "I", "I;16", "F")
    width, height = image.size
    side = max(width, height)
    stats = ((0.5,), (0.5,)) if grey else (IMAGENET_MEAN, IMAGENET_STD)
    return "L" if grey else "RGB", width == height, DatasetInfo(num_classes, side, 1 if grey else 3, *stats)


def image_size_of(file: Any, where: str) -> tuple[int, int]:
    """(width, height) of the image file `file` (a path or a binary file) from its header, nothing decoded;
    a file that is no image is a one-line error naming `where`."""
    from PIL import Image

    from mixer_lightning.data.pil_path import UNREADABLE

    try:
        with Image.open(file) as image:
            return image.size
    except UNREADABLE as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError("data.root", f"cannot read image {where} ({reason})", "delete or replace it") from None


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
    test_is_val: bool = False  # no test split of its own: the test split is the validation split
    statistics_note: str | None = None  # said once when `info.mean/std` are a guess a user should check
    content: str | None = None  # a digest of the training files' names (relative), sizes and labels, where known

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError

    def test_as_val(self, val_split: float) -> str | None:
        """Why the validation images are the test split's (``val_split: 0`` without a validation split, or a
        dataset whose test split is its validation split), or None: then best.ckpt is chosen on test images,
        and a run's test figure is last.ckpt's."""
        if not self.has_val and val_split == 0:
            return f"data.val_split is 0 and {self.name} has no validation split"
        if self.has_val and self.test_is_val:
            return f"{self.name}'s test split is its validation split"
        return None


def digest(lines: Iterable[str]) -> str:
    """The sha256 of `lines` (a dataset's content, as its source lists it), 16 hex digits."""
    hashed = hashlib.sha256()
    for line in lines:
        hashed.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return hashed.hexdigest()[:16]
