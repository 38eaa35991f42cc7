"""WebDataset tar shards as a dataset source (``data.dataset: wds``): `WebDataset` finds, indexes and
checks the shards of every split at construction (`mixer_lightning.data.shards`), and each split is a
`ShardImages`, a map-style dataset whose every image is one ``pread`` from its shard, so that the data
module's seeded samplers (and `mixer_lightning.data.shard_order.ShardOrder` for training) read it."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from mixer_lightning.data.manifest import read_manifest
from mixer_lightning.data.shards import ShardIndex, find_shards, index_split
from mixer_lightning.data.sources.base import DatasetSource, digest, image_size_of, natural_info, say
from mixer_lightning.errors import require


class ShardImages(Dataset):
    """(PIL image, label) pairs of an indexed split (`ShardIndex`), each image one ``pread`` from its shard.

    Shard files are opened lazily in each process (DataLoader workers included) and kept open (at most
    `max_open`, least recently used closed first); ``__getitems__`` reads a batch in shard and offset order."""

    def __init__(self, index: ShardIndex, max_open: int = 64):
        self.index, self.max_open = index, max_open
        self._files: dict[int, int] = {}  # shard → descriptor, least recently used first
        self._pid: int | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def targets(self) -> list[int]:
        """The labels, without reading an image (few-shot draws, class counts)."""
        return self.index.label.tolist()

    def name_of(self, i: int) -> str:
        """Where sample `i` lies, for the one-line error on an image that cannot be decoded."""
        return f"{Path(self.index.shards[int(self.index.shard[i])]).name}, sample {self.index.key_of(int(i))}"

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": {}, "_pid": None}  # descriptors stay with the process that opened them

    def _fd(self, shard: int) -> int:
        if self._pid != os.getpid():
            self._files, self._pid = {}, os.getpid()
        fd = self._files.pop(shard, None)
        if fd is None:
            if len(self._files) >= self.max_open:
                os.close(self._files.pop(next(iter(self._files))))
            fd = os.open(self.index.shards[shard], os.O_RDONLY)
        self._files[shard] = fd  # most recently used last
        return fd

    def read_bytes(self, index: int) -> bytes:
        i = self.index
        data = os.pread(self._fd(int(i.shard[index])), int(i.size[index]), int(i.offset[index]))
        if len(data) != int(i.size[index]):
            raise OSError(f"{len(data)} of {int(i.size[index])} bytes read: the shard changed or was cut short")
        return data

    @staticmethod
    def decode(data: bytes) -> Any:
        from PIL import Image

        from mixer_lightning.data.pil_path import to_mode

        with Image.open(io.BytesIO(data)) as image:
            return to_mode(image, "RGB")  # 16-bit images scaled to 8 bits, not clipped

    def __getitem__(self, index: int) -> tuple[Any, int]:
        return self.decode(self.read_bytes(index)), int(self.index.label[index])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, int]]:
        order = sorted(range(len(indices)), key=lambda j: (self.index.shard[indices[j]], self.index.offset[indices[j]]))
        data: list[bytes] = [b""] * len(indices)
        for j in order:
            data[j] = self.read_bytes(int(indices[j]))
        return [(self.decode(d), int(self.index.label[i])) for d, i in zip(data, indices, strict=True)]


class WebDataset(DatasetSource):
    """WebDataset tar shards (`mixer_lightning.data.shards`): natural images (ImageNet's mean/std), their
    size the first training image's. The classes: ``data.num_classes`` when given (the hub's ImageNet:
    1000), else the manifest of `mixer data pack` (with the class names), else one more than the largest
    label. Every split is indexed and its labels checked at construction (once; the index is cached;
    `rescan`: every shard scanned again, as ``mixer data check`` does, and the cache replaced)."""

    name = "wds"
    sharded = True
    options = ("num_classes", "cache_dir")

    def __init__(
        self,
        root: str,
        download: bool,
        num_classes: int | None = None,
        cache_dir: str | None = None,
        rescan: bool = False,
    ):
        super().__init__(root, download)
        from mixer_lightning.data.cache import default_cache_dir

        self.files = find_shards(root)
        self.content = digest(f"{path.name}\0{path.stat().st_size}" for path in self.files["train"])
        folder = self.files["train"][0].parent
        cache = Path(cache_dir) if cache_dir else default_cache_dir(str(folder))
        self.indices = {
            split: index_split(files, cache, split, labelled=split != "test", rescan=rescan)
            for split, files in self.files.items()
            if files
        }
        if "test" in self.indices and (self.indices["test"].label < 0).all():
            del self.indices["test"]  # ImageNet's test labels are not public: the hub's test shards have none
            say("data   wds: the test shards have no labels; the validation shards are the test split")
        manifest = read_manifest(folder) or {}
        self.classes = manifest.get("classes") or None
        num_classes = num_classes or (len(self.classes) if self.classes else int(self.indices["train"].label.max()) + 1)
        if self.classes is not None and len(self.classes) != num_classes:
            self.classes = None
        for index in self.indices.values():
            index.check_labels(num_classes)
        self.has_val, self.test_is_val = "val" in self.indices, "test" not in self.indices
        first = ShardImages(self.indices["train"])
        width, height = image_size_of(io.BytesIO(first.read_bytes(0)), first.name_of(0))
        self.square = width == height
        self.info = natural_info(num_classes, max(width, height))

    def load(self, split: str) -> Dataset:
        if split == "test" and "test" not in self.indices:
            split = "val"  # ImageNet's test labels are not public: its validation split is the test split
        folder = self.files["train"][0].parent
        require(split in self.indices, "data.root", f"no {split} shards in {str(folder)!r}", "set data.val_split")
        return ShardImages(self.indices[split])
