"""Data: where images come from (`sources`), how they are augmented (`transforms`) and batched
(`pil_path`; the tensor path: `batched`, `cache`, `tensor_path`), the seeded order that resumes
exactly (`sampling`), cluster data (`shards`, `shard_order`, `streaming`, `pack`), image files to
predict (`predict`), and `ImageDataModule`, every argument of which a config's ``data:`` sets."""

from mixer_lightning.data.batching import GlobalBatchSize
from mixer_lightning.data.datamodule import ImageDataModule
from mixer_lightning.data.sources import DATASETS, DatasetInfo

__all__ = ["DATASETS", "DatasetInfo", "GlobalBatchSize", "ImageDataModule"]
