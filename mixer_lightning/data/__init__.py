"""Data: named dataset sources and the shared `ImageDataModule`."""

from mixer_lightning.data.datamodule import ImageDataModule
from mixer_lightning.data.datasets import DATASETS, DatasetInfo

__all__ = ["DATASETS", "DatasetInfo", "ImageDataModule"]
