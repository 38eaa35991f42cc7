"""Data: named dataset sources, the shared `ImageDataModule`, and the `GlobalBatchSize` callback."""

from mixer_lightning.data.batching import GlobalBatchSize
from mixer_lightning.data.datamodule import ImageDataModule
from mixer_lightning.data.datasets import DATASETS, DatasetInfo

__all__ = ["DATASETS", "DatasetInfo", "GlobalBatchSize", "ImageDataModule"]
