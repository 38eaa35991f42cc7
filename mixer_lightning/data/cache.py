"""The decoded-tensor cache of the tensor path: each split decoded once into an (N, C, H, W) uint8 tensor
(`decode`), kept on disk keyed by what the readers read (real paths, sizes, times and inodes of the
files, or a hub dataset's Arrow files), the transform's prefix and `LOADER_VERSION` (`cache_key`).

A cache file is checked before use, since a run would train on whatever it holds (its SHA-256, count,
and first and last images decoded again from the source): a mismatch decodes again and replaces it.
Written whole (`safety.atomic.atomic_write`: renamed over the file, never changed in place, so a run that
memory-maps it keeps its pages); a write that fails keeps the split in memory."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from mixer_lightning.data.batched import BatchedPlan
from mixer_lightning.data.pil_path import TransformedDataset
from mixer_lightning.errors import ConfigError, ResourceError
from mixer_lightning.safety.atomic import atomic_write, remove_orphans

# Bump when decoding changes what a cache file holds: every cache file of an older version is ignored.
LOADER_VERSION = 2
CACHE_FOLDER = ".mixer_cache"
DECODE_CHUNK = 1000
# Cache files (`cache_file`) and their temporaries (``.NAME.tmp-PID``): no part of a source's fingerprint.
CACHE_NAME = re.compile(r"^\.?.+-[0-9a-f]{24}\.pt(\.tmp-\d+)?$")


class NotDecodable(Exception):
    """A split the tensor path cannot hold: images of several shapes after the prefix, images that are not
    8-bit, or a dataset type it cannot fingerprint."""


def _to_array(prefix: Sequence[Callable]) -> Callable[[Any], np.ndarray]:
    def convert(image: Any) -> np.ndarray:
        for step in prefix:
            image = step(image)
        array = np.array(image)  # a writable copy (torch.from_numpy warns on read-only arrays)
        if array.dtype != np.uint8:
            raise NotDecodable(f"a {array.dtype} image (mode {getattr(image, 'mode', '?')}), not 8-bit")
        return array[:, :, None] if array.ndim == 2 else array

    return convert


def _chw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def decode(base: Dataset, prefix: Sequence[Callable]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of `base` through `prefix` into an (N, C, H, W) uint8 tensor, and the (N,) labels, read
    as the PIL path reads (whole chunks through ``__getitems__``, an undecodable file named)."""
    reader = TransformedDataset(base, _to_array(prefix))
    n = len(reader)
    images = torch.empty((0, 1, 1, 1), dtype=torch.uint8)
    labels = torch.empty(n, dtype=torch.long)
    for start in range(0, n, DECODE_CHUNK):
        for i, (array, label) in enumerate(
            reader.__getitems__(list(range(start, min(n, start + DECODE_CHUNK)))), start
        ):
            if i == 0:
                images = torch.empty((n, array.shape[2], array.shape[0], array.shape[1]), dtype=torch.uint8)
            if tuple(array.shape) != (images.shape[2], images.shape[3], images.shape[1]):
                raise NotDecodable(f"image {i} is {array.shape[1]}×{array.shape[0]} where the first is "
                                   f"{images.shape[3]}×{images.shape[2]}")  # fmt: skip
            images[i], labels[i] = _chw(array), int(label)
    return images, labels


def _stat(path: str) -> list[Any]:
    """What changes when a file's content may have: real path, size, modification and change times, inode."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    return [real, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _files(folder: Path) -> list[list[Any]]:
    """(relative path, `_stat`) of every file under `folder`, links followed as the readers follow them;
    our cache folders and cache files left out."""
    found = []
    for directory, subdirs, names in os.walk(folder, followlinks=True):
        subdirs[:] = sorted(d for d in subdirs if d != CACHE_FOLDER)
        for name in sorted(n for n in names if not CACHE_NAME.match(n)):
            path = os.path.join(directory, name)
            try:
                found.append([os.path.relpath(path, folder), *_stat(path)])
            except OSError:  # a dangling link: the readers cannot read it either
                found.append([os.path.relpath(path, folder), None])
    return found


def source_fingerprint(base: Dataset, root: str) -> dict[str, Any]:
    """What identifies the data a split is read from: the files its reader reads (a folder dataset: its
    samples and labels; a torchvision dataset or a local Hugging Face folder: every file of its folder), or
    a hub dataset's Arrow files (`datasets.Dataset.cache_files`)."""
    from torchvision.datasets import DatasetFolder

    from mixer_lightning.data.sources.huggingface import HFImages

    if isinstance(base, HFImages):
        columns = [base.image_column, base.label_column, base.mode]
        if Path(root).is_dir():
            return {"folder": str(Path(root).resolve()), "files": _files(Path(root)), "columns": columns}
        files = [_stat(entry["filename"]) for entry in base.dataset.cache_files]
        if not files:
            raise NotDecodable(f"the hub dataset {root!r} has no files to fingerprint")
        return {"hub": root, "files": files, "columns": columns}
    if isinstance(base, DatasetFolder):
        samples = [[os.path.relpath(path, base.root), label, *_stat(path)] for path, label in base.samples]
        return {"folder": str(Path(base.root).resolve()), "classes": list(base.classes), "samples": samples}
    folder = getattr(base, "raw_folder", None)  # torchvision MNIST
    if folder is None and hasattr(base, "base_folder"):  # torchvision CIFAR-10/100, STL-10
        folder = os.path.join(base.root, base.base_folder)
    if folder is None:
        raise NotDecodable(f"cannot fingerprint a {type(base).__name__}")
    split = getattr(base, "train", getattr(base, "split", None))
    return {"folder": str(Path(folder).resolve()), "split": split, "files": _files(Path(folder))}


def cache_key(base: Dataset, root: str, split: str, plan: BatchedPlan) -> str:
    content = {
        "version": LOADER_VERSION,
        "split": split,
        "prefix": plan.prefix_key(),
        "source": source_fingerprint(base, root),
        "type": type(base).__name__,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:24]


def default_cache_dir(root: str) -> Path:
    """``$MIXER_CACHE_DIR``; else beside the data (``<data.root>/.mixer_cache``) when that folder is
    writable (and has write bits: root may write anywhere); else ``~/.cache/mixer_lightning``."""
    if os.environ.get("MIXER_CACHE_DIR"):
        return Path(os.environ["MIXER_CACHE_DIR"])
    if Path(root).is_dir() and os.access(root, os.W_OK) and os.stat(root).st_mode & 0o222:
        return Path(root) / CACHE_FOLDER
    return Path.home() / ".cache" / "mixer_lightning"


def cache_file(cache_dir: Path, dataset: str, split: str, key: str) -> Path:
    return cache_dir / f"{dataset}-{split}-{key}.pt"


def checksum(images: torch.Tensor, labels: torch.Tensor) -> str:
    """SHA-256 of the images' shape and bytes and the labels (as little-endian int64)."""
    digest = hashlib.sha256(json.dumps(list(images.shape)).encode())
    digest.update(memoryview(np.ascontiguousarray(images.numpy())).cast("B"))  # hashlib releases the GIL
    digest.update(np.ascontiguousarray(labels.numpy(), dtype="<i8").tobytes())
    return digest.hexdigest()


@dataclass
class Loaded:
    """A decoded split, why the cache file found was not used (`damaged`), why it was not written (`unwritten`)."""

    images: torch.Tensor
    labels: torch.Tensor
    damaged: str | None = None
    unwritten: str | None = None


class Damaged(Exception):
    """A cache file that does not hold what decoding gives (the message says how)."""


def _read(path: Path, reader: TransformedDataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The images and labels of the cache file `path`, once its checks (module docstring) hold."""
    saved = torch.load(path, weights_only=True, mmap=True)
    images, labels = saved["images"], saved["labels"]
    if saved["version"] != LOADER_VERSION:
        raise Damaged(f"it is of version {saved['version']!r}, not {LOADER_VERSION}")
    if saved["meta"]["sha256"] != checksum(images, labels):
        raise Damaged("checksum mismatch")
    if len(images) != len(reader) or len(labels) != len(reader):
        raise Damaged(f"it holds {len(images)} images where the split has {len(reader)}")
    for index in dict.fromkeys((0, len(reader) - 1)) if len(reader) else ():  # the source's images, decoded again
        array, label = reader[index]
        if int(labels[index]) != label or not torch.equal(images[index], _chw(array)):
            raise Damaged(f"its image {index} differs from the data's")
    return images, labels


def _write(path: Path, images: torch.Tensor, labels: torch.Tensor) -> str | None:
    """Write the cache file `path` atomically; None, or why it could not be written."""
    meta = {"shape": list(images.shape), "sha256": checksum(images, labels)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(path.parent)  # temporaries of writers that were killed
        with atomic_write(path, "wb", field="data.cache_dir") as f:
            torch.save({"version": LOADER_VERSION, "images": images, "labels": labels, "meta": meta}, f)
    except (ConfigError, ResourceError) as error:  # atomic_write's word for an OSError
        return error.problem
    except (OSError, RuntimeError) as error:  # mkdir, or torch.save failing in its own way
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
        return f"cannot write {str(path)!r}: {reason[:200]}"
    return None


def load_or_decode(base: Dataset, prefix: Sequence[Callable], path: Path | None) -> Loaded:
    """The decoded split from the cache file `path` when it holds exactly what decoding gives, else
    decoded and written there. Loaded memory-mapped: parallel runs on one machine share the page cache."""
    damaged = None
    if path is not None and path.is_file():
        try:
            return Loaded(*_read(path, TransformedDataset(base, _to_array(prefix))))
        except Damaged as problem:
            damaged = str(problem)
        except (ConfigError, NotDecodable):
            raise  # the source itself cannot be read: decoding it would say the same
        except Exception as error:  # noqa: BLE001 - a file that cannot be read is decoded again
            damaged = f"unreadable: {type(error).__name__}: {str(error).strip()[:120]}"
    images, labels = decode(base, prefix)
    unwritten = _write(path, images, labels) if path is not None else None
    return Loaded(images, labels, damaged, unwritten)


class DecodedSplit:
    """A decoded split (uint8 images, labels) and its copies on the devices that asked for it."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device.type == "cpu":
            return self.images, self.labels
        if device not in self._on:  # copied once per device, kept there for the whole run
            self._on[device] = (self.images.to(device), self.labels.to(device))
        return self._on[device]

    def __getstate__(self) -> dict:  # worker processes get the CPU tensors only
        return {"images": self.images, "labels": self.labels, "_on": {}}
