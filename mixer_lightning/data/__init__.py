"""Data: where images come from, how they are augmented and batched, and the data module that puts
it together (nothing here knows the models).

- `sources`: one `DatasetSource` per dataset (add a dataset here: `DATASETS`);
- `transforms`: the per-image augmentation and evaluation crops (timm), the input permutation;
- `pil_path`: images read and transformed one at a time, in DataLoader workers;
- `batched`, `cache`, `tensor_path`: the tensor path: the transform's batched form, each split decoded
  once into a uint8 tensor cached on disk, whole batches augmented on the training device;
- `sampling`: the seeded split, order, batches and augmentation randomness, resumable mid-epoch;
- `mixup`, `batching` (`GlobalBatchSize`), `predict` (image files for ``mixer predict``);
- cluster data: `shards` (WebDataset tar shards found, checked, indexed; the source is
  `sources.webdataset`), `shard_order` (their training order), `streaming` (Hugging Face datasets
  streamed; the source is `sources.huggingface_stream`), `pack` (``mixer data pack|check``);
- `datamodule`: `ImageDataModule`, every argument of which a config's ``data:`` sets.
"""

from mixer_lightning.data.batching import GlobalBatchSize
from mixer_lightning.data.datamodule import ImageDataModule
from mixer_lightning.data.sources import DATASETS, DatasetInfo

__all__ = ["DATASETS", "DatasetInfo", "GlobalBatchSize", "ImageDataModule"]
