"""WebDataset tar shards as a dataset source (``data.dataset: wds``): `WebDataset` finds, indexes and
checks the shards of every split at construction (`mixer_lightning.data.shards`), and each split is a
`ShardImages`, a map-style dataset whose every image is one ``pread`` from its shard, so that the data
module's seeded samplers (and `mixer_lightning.data.shard_order.ShardOrder` for training) read it."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.shards import ShardIndex, find_shards, index_split, read_manifest
from mixer_lightning.data.sources.base import DatasetSource, natural_info
from mixer_lightning.data.sources.folder import _decompression_bomb
from mixer_lightning.errors import require


class ShardImages(Dataset):
    """(PIL image, label) pairs of an indexed split (`ShardIndex`), each image one ``pread`` from its shard.

    Shard files are opened lazily in each process (DataLoader workers included) and kept open (at most
    `max_open` at a time, least recently used closed first). ``__getitems__`` reads a batch in shard and
    offset order. ``samples`` names each sample (``'imagenet1k-train-0003.tar', sample 'n0144_12'``) for
    the data module's one-line error on an image that cannot be decoded."""

    def __init__(self, index: ShardIndex, max_open: int = 64):
        self.index = index
        self.max_open = max_open
        self._files: dict[int, int] = {}
        self._pid: int | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def targets(self) -> list[int]:
        """The labels, without reading an image (few-shot draws, class counts)."""
        return self.index.label.tolist()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_files"], state["_pid"] = {}, None  # descriptors stay with the process that opened them
        return state

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

    def decode(self, data: bytes) -> Any:
        from PIL import Image

        from mixer_lightning.data.pil_path import to_mode

        try:
            with Image.open(io.BytesIO(data)) as image:
                return to_mode(image, "RGB")  # 16-bit images scaled to 8 bits, not clipped
        except Image.DecompressionBombError as error:
            raise _decompression_bomb(error) from None

    def __getitem__(self, index: int) -> tuple[Any, int]:
        return self.decode(self.read_bytes(index)), int(self.index.label[index])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, int]]:
        order = sorted(range(len(indices)), key=lambda j: (self.index.shard[indices[j]], self.index.offset[indices[j]]))
        data: list[bytes] = [b""] * len(indices)
        for j in order:
            data[j] = self.read_bytes(int(indices[j]))
        return [(self.decode(d), int(self.index.label[i])) for d, i in zip(data, indices, strict=True)]

    @property
    def samples(self) -> _SampleNames:
        return _SampleNames(self.index)

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files = {}


class _SampleNames:
    """``samples[i] = (where, label)``, as an ImageFolder's (path, class), made when asked."""

    def __init__(self, index: ShardIndex):
        self.index = index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[str, int]:
        shard = Path(self.index.shards[int(self.index.shard[i])]).name
        return f"{shard}, sample {self.index.key_of(int(i))}", int(self.index.label[i])


class WebDataset(DatasetSource):
    """WebDataset tar shards (module docstring): ImageNet-like images (224 px, ImageNet's mean/std).

    The classes: ``data.num_classes`` when given (the hub's ImageNet: 1000), else the manifest of
    `mixer data pack` (with the class names), else one more than the largest label. Every split is
    indexed and checked at construction (once; cached), before anything is written."""

    name = "wds"
    default_size: ClassVar[int] = 224
    sharded: ClassVar[bool] = True
    options: ClassVar[tuple[str, ...]] = ("num_classes", "cache_dir")

    def __init__(self, root: str, download: bool, num_classes: int | None = None, cache_dir: str | None = None):
        super().__init__(root, download)
        from mixer_lightning.data.cache import default_cache_dir

        self.files = find_shards(root)
        folder = self.files["train"][0].parent
        manifest = read_manifest(folder)
        cache = Path(cache_dir) if cache_dir else default_cache_dir(str(folder))
        log = _first_process_print
        self.indices = {}
        for split, files in self.files.items():
            if files:
                self.indices[split] = index_split(files, cache, split, log, labelled=split != "test")
        if "test" in self.indices and (self.indices["test"].label < 0).all():
            del self.indices["test"]  # ImageNet's test labels are not public: the hub's test shards have none
            log("data   wds: the test shards have no labels; the validation shards are the test split")
        self.classes: list[str] | None = None
        if manifest is not None and manifest.get("classes"):
            self.classes = [str(name) for name in manifest["classes"]]
        if num_classes is None:
            num_classes = len(self.classes) if self.classes else int(self.indices["train"].label.max()) + 1
        require(num_classes >= 2, "data.num_classes", f"must be >= 2, got {num_classes}")
        if self.classes is not None and len(self.classes) != num_classes:
            self.classes = None
        for index in self.indices.values():
            index.check_labels(num_classes)
        self.has_val = "val" in self.indices
        self.info = natural_info(num_classes, self.default_size)

    def load(self, split: str) -> Dataset:
        if split == "test" and "test" not in self.indices and "val" in self.indices:
            split = "val"  # ImageNet's test labels are not public: its validation split is the test split
        require(
            split in self.indices,
            "data.root",
            f"no {split} shards in {str(self.files['train'][0].parent)!r}",
            "add them, or set data.val_split to carve validation images from train",
        )
        return ShardImages(self.indices[split])


def _first_process_print(text: str) -> None:
    """Print on the process that owns the console (global rank 0, from the launcher's environment)."""
    if all(os.environ.get(name, "0") in ("", "0") for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK")):
        print(text, flush=True)
