"""`ImageDataModule`: one LightningDataModule for every dataset of the project.

It reads a named source (`mixer_lightning.data.datasets`), carves a seeded validation split from
train when the dataset has none, applies the training or evaluation transform, and exposes
``num_classes``, ``image_size`` and ``in_chans``, which the CLI links into the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms as T

from mixer_lightning.data.datasets import DatasetInfo, get_source
from mixer_lightning.errors import require


class TransformedDataset(Dataset):
    """(image, label) pairs of `base` (optionally restricted to `indices`) with `transform` on the image."""

    def __init__(self, base: Dataset, transform: Callable | None, indices: list[int] | None = None):
        self.base = base if indices is None else Subset(base, indices)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image, label = self.base[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(label)


class ImageDataModule(LightningDataModule):
    """Image classification data for every experiment.

    Args:
        dataset: ``digits`` (scikit-learn's 8×8 digits, embedded, no download) or ``cifar10``.
        root: folder where the dataset lives (or is downloaded to).
        download: fetch the dataset into ``root`` when it is missing (needs a network).
        batch_size: training batch size (per device).
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``).
        num_workers: DataLoader worker processes (default: 0 for in-memory data, else min(8, CPUs)).
        val_split: fraction (< 1) or number (>= 1) of training images held out for validation when
            the dataset has no official validation split.
        split_seed: seed of that held-out split (kept apart from the training seed, so every run of
            an experiment validates on the same images).
    """

    def __init__(
        self,
        dataset: str = "digits",
        root: str = "data",
        download: bool = True,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        val_split: float = 0.1,
        split_seed: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        require(batch_size > 0, "data.batch_size", f"must be positive, got {batch_size}")
        require(val_split >= 0, "data.val_split", f"must be >= 0, got {val_split}")
        self.source = get_source(dataset, root, download)
        self.dataset = dataset
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        if num_workers is None:
            num_workers = 0 if self.source.in_memory else min(8, os.cpu_count() or 1)
        self.num_workers = num_workers
        self.val_split = val_split
        self.split_seed = split_seed
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    # Facts linked into the model by the CLI (known without reading the data).
    @property
    def info(self) -> DatasetInfo:
        return self.source.info

    @property
    def num_classes(self) -> int:
        return self.info.num_classes

    @property
    def image_size(self) -> int:
        return self.info.image_size

    @property
    def in_chans(self) -> int:
        return self.info.in_chans

    def transform(self, train: bool) -> Callable:
        normalize = T.Normalize(self.info.mean, self.info.std)
        if self.source.in_memory:
            return normalize
        if train:
            return T.Compose(
                [T.RandomCrop(self.image_size, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), normalize]
            )
        return T.Compose([T.ToTensor(), normalize])

    def _split_train(self, train: Dataset) -> tuple[list[int], list[int]]:
        n = len(train)
        num_val = int(self.val_split) if self.val_split >= 1 else round(self.val_split * n)
        require(num_val < n, "data.val_split", f"holds out {num_val} of {n} training images", "choose a smaller value")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.split_seed)).tolist()
        return order[num_val:], order[:num_val]

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and self.train_set is None:
            train = self.source.load("train")
            if self.source.has_val:
                self.train_set = TransformedDataset(train, self.transform(train=True))
                self.val_set = TransformedDataset(self.source.load("val"), self.transform(train=False))
            else:
                train_idx, val_idx = self._split_train(train)
                self.train_set = TransformedDataset(train, self.transform(train=True), train_idx)
                self.val_set = TransformedDataset(train, self.transform(train=False), val_idx)
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = TransformedDataset(self.source.load("test"), self.transform(train=False))

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader:
        assert dataset is not None, "setup() has not been called"
        return DataLoader(
            dataset,
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=train and len(dataset) > self.batch_size,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)
