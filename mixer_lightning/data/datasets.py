"""Dataset sources: where the images of each named dataset come from, and what they are.

A source knows its static facts (`DatasetInfo`: classes, image size, channels, normalisation) without
touching the disk, so the CLI can link them into the model before any data is read, and it loads its
official splits as datasets of ``(image, label)`` pairs. Images are PIL images, or tensors for the
in-memory ``digits``. Adding a dataset is one class and one entry in `DATASETS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from mixer_lightning.errors import ConfigError


@dataclass(frozen=True)
class DatasetInfo:
    num_classes: int
    image_size: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


class DatasetSource:
    """A named dataset. Subclasses set `info` and implement `load`."""

    name: ClassVar[str]
    info: DatasetInfo
    in_memory: ClassVar[bool] = False  # already decoded tensors: no transforms or workers needed
    has_val: ClassVar[bool] = False  # an official validation split exists

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError


class Digits(DatasetSource):
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes, grey levels 0-16).

    It ships inside scikit-learn, so it needs no download: the embedded default dataset of the
    quickstart. It has no official split; a fixed permutation (seed 0, independent of the training
    seed) puts 20% in the test split.
    """

    name = "digits"
    info = DatasetInfo(num_classes=10, image_size=8, in_chans=1, mean=(0.3053,), std=(0.3760,))
    in_memory = True
    test_fraction = 0.2

    def load(self, split: str) -> Dataset:
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.from_numpy(np.random.default_rng(0).permutation(len(labels)))
        num_test = round(self.test_fraction * len(labels))
        index = order[:num_test] if split == "test" else order[num_test:]
        return TensorDataset(images[index], labels[index])


class TorchvisionSource(DatasetSource):
    """A dataset in torchvision's on-disk format under `root` (downloaded there when `download`)."""

    how_to_get: ClassVar[str] = ""

    def _missing(self, error: Exception) -> ConfigError:
        return ConfigError(
            "data.root",
            f"no {self.name} data under {str(Path(self.root).resolve())!r} ({error})",
            f"set data.download: true to fetch it, or {self.how_to_get}",
        )


class CIFAR10(TorchvisionSource):
    name = "cifar10"
    info = DatasetInfo(
        num_classes=10, image_size=32, in_chans=3, mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616)
    )
    how_to_get = "place torchvision's cifar-10-batches-py folder under data.root"

    def load(self, split: str) -> Dataset:
        from torchvision.datasets import CIFAR10 as TV

        try:
            return TV(self.root, train=split == "train", download=self.download)
        except (RuntimeError, OSError) as error:  # "Dataset not found or corrupted", or no network
            raise self._missing(error) from None


DATASETS: dict[str, Callable[[str, bool], DatasetSource]] = {cls.name: cls for cls in (Digits, CIFAR10)}


def get_source(name: str, root: str, download: bool) -> DatasetSource:
    try:
        return DATASETS[name](root, download)
    except KeyError:
        raise ConfigError("data.dataset", f"unknown dataset {name!r}", f"choose one of {', '.join(DATASETS)}") from None
