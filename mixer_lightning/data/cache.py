"""The decoded-tensor cache of the tensor path: each split decoded once, through the prefix of its
`BatchedPlan`, into an (N, C, H, W) uint8 tensor (`decode`), and kept on disk (`load_or_decode`) keyed
by the files the readers read (real paths, sizes, modification and change times, inodes; symbolic
links followed as the readers follow them) or a Hugging Face dataset's fingerprint, the prefix and
`LOADER_VERSION` (`cache_key`): a changed source or prefix decodes again. Where the cache lies is no
part of the key (a cache folder inside the data is left out of it).

A cache file is never trusted: it holds a SHA-256 of its images and labels, and on reading, its
archive (entries stored, not compressed, within the file), its keys, dtypes, shapes, channels, count
and label range, the checksum and the first and last images (decoded again from the source) are
checked; any mismatch decodes the split again and replaces the file (`Loaded.damaged` says why).
Written through `safety.atomic.atomic_write` (a temporary renamed over the file, so a reader never
sees half of one); a write that fails (a full disk, a read-only folder) keeps the split in memory
(`Loaded.unwritten` says why). Loaded memory-mapped, so parallel runs on one machine share the page
cache: a file is only ever replaced by rename, never changed in place (a mapped file truncated by
someone else kills the run with SIGBUS: docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import zipfile
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
# 2: the checksum and facts in the file ("meta"); 16-bit images scaled to 8 bits (were clipped).
LOADER_VERSION = 2
CACHE_FOLDER = ".mixer_cache"
DECODE_CHUNK = 1000
# What a cache file holds, exactly.
CACHE_KEYS = {"version", "images", "labels", "meta"}
# Names of cache files (`cache_file`), their temporaries (`atomic_write`'s ``.NAME.tmp-PID``) and those
# of version 1 (mkstemp's ``.NAME.XXXXXXXX.tmp``): never part of a source's fingerprint, wherever they lie.
CACHE_NAME = re.compile(r"^\.?.+-[0-9a-f]{24}\.pt(\.tmp-\d+|\.[A-Za-z0-9_]{8}\.tmp)?$")
OLD_TEMPORARY = re.compile(r"^\..+-[0-9a-f]{24}\.pt\.[A-Za-z0-9_]{8}\.tmp$")


class NotDecodable(Exception):
    """A split the tensor path cannot hold: images of several shapes after the prefix (no single tensor
    holds them), images that are not 8-bit, or a dataset type it cannot fingerprint."""


def _to_array(prefix: Sequence[Callable]) -> Callable[[Any], np.ndarray]:
    def convert(image: Any) -> np.ndarray:
        for step in prefix:
            image = step(image)
        array = np.array(image)  # a writable copy (torch.from_numpy warns on read-only arrays)
        if array.dtype != np.uint8:
            raise NotDecodable(f"a {array.dtype} image (mode {getattr(image, 'mode', '?')}), not 8-bit")
        return array[:, :, None] if array.ndim == 2 else array

    return convert


def decode(base: Dataset, prefix: Sequence[Callable]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of `base` through `prefix` into an (N, C, H, W) uint8 tensor, and the (N,) labels.

    Read as the PIL path reads (`pil_path.TransformedDataset`: whole chunks through the base
    dataset's ``__getitems__``, a `ConfigError` naming an undecodable file)."""
    reader = TransformedDataset(base, _to_array(prefix))
    n = len(reader)
    images: torch.Tensor | None = None
    labels = torch.empty(n, dtype=torch.long)
    for start in range(0, n, DECODE_CHUNK):
        chunk = reader.__getitems__(list(range(start, min(n, start + DECODE_CHUNK))))
        for offset, (array, label) in enumerate(chunk):
            if images is None:
                images = torch.empty((n, array.shape[2], array.shape[0], array.shape[1]), dtype=torch.uint8)
            if tuple(array.shape) != (images.shape[2], images.shape[3], images.shape[1]):
                h, w, c = array.shape
                raise NotDecodable(
                    f"image {start + offset} is {w}×{h}×{c} where the first is "
                    f"{images.shape[3]}×{images.shape[2]}×{images.shape[1]}"
                )
            images[start + offset] = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
            labels[start + offset] = int(label)
    if images is None:
        images = torch.empty((0, 1, 1, 1), dtype=torch.uint8)
    return images, labels


def _stat(path: str) -> list[Any]:
    """What changes when a file's content may have: real path, size, modification and change times, inode."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    return [real, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _files(folder: Path) -> list[list[Any]]:
    """(relative path, `_stat`) of every file under `folder`, following symbolic links as the readers do
    (a folder is read once, whatever links lead to it); our cache folders and cache files left out."""
    found = []
    seen: set[str] = set()
    for directory, subdirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(directory)
        if real in seen:  # a link loop, or a second link to a folder already read
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs[:] = sorted(d for d in subdirs if d != CACHE_FOLDER)
        for name in sorted(names):
            if CACHE_NAME.match(name):
                continue
            path = os.path.join(directory, name)
            try:
                found.append([os.path.relpath(path, folder), *_stat(path)])
            except OSError:  # a dangling link: the readers cannot read it either
                found.append([os.path.relpath(path, folder), None])
    return found


def source_fingerprint(base: Dataset, root: str) -> dict[str, Any]:
    """What identifies the data a split is read from: the files its reader reads (for a folder dataset,
    exactly its list of samples and labels; else every file of its folder; for a Hugging Face dataset,
    of its local folder `root`), or a hub dataset's fingerprint."""
    from mixer_lightning.data.sources.folder import RGBImageFolder
    from mixer_lightning.data.sources.huggingface import HFImages

    if isinstance(base, HFImages):
        columns = [base.image_column, base.label_column, base.mode]
        if Path(root).is_dir():
            return {"folder": str(Path(root).resolve()), "files": _files(Path(root)), "columns": columns}
        return {"hub": root, "fingerprint": base.dataset._fingerprint, "columns": columns}
    if isinstance(base, RGBImageFolder):
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
    writable; else ``~/.cache/mixer_lightning``."""
    env = os.environ.get("MIXER_CACHE_DIR")
    if env:
        return Path(env)
    if Path(root).is_dir() and os.access(root, os.W_OK) and os.stat(root).st_mode & 0o222:
        # (a folder without write bits is read-only data, also for root, whom os.access lets write anywhere)
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
    """A decoded split, and what happened to its cache file: `cached` is where the split is on disk
    (read from or written to; None: in memory only), `damaged` why the file found there was not used,
    `unwritten` why the split could not be written there."""

    images: torch.Tensor
    labels: torch.Tensor
    cached: Path | None
    damaged: str | None = None
    unwritten: str | None = None


class Damaged(Exception):
    """A cache file that does not hold what decoding gives (the message says how)."""


def _check_archive(path: Path) -> None:
    """`path` is a zip archive whose entries are stored whole inside it: a compressed entry would be
    memory-mapped as its compressed bytes (torch.load(mmap=True) does not inflate it)."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as archive:
        for entry in archive.infolist():
            if entry.compress_type != zipfile.ZIP_STORED or entry.compress_size != entry.file_size:
                raise Damaged(f"its entry {entry.filename!r} is compressed")
            if entry.header_offset + entry.compress_size > size:
                raise Damaged(f"its entry {entry.filename!r} reaches past the end of the file")


def _read(
    path: Path, reader: TransformedDataset, in_chans: int | None, num_classes: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The images and labels of the cache file `path`, once every check of the module docstring holds
    (`Damaged` says which did not; any other exception: the file cannot be read)."""
    _check_archive(path)
    saved = torch.load(path, weights_only=True, mmap=True)
    if not isinstance(saved, dict) or set(saved) != CACHE_KEYS:
        keys = sorted(map(str, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise Damaged(f"it holds {keys}, not {sorted(CACHE_KEYS)}")
    if saved["version"] != LOADER_VERSION:
        raise Damaged(f"it is of version {saved['version']!r}, not {LOADER_VERSION}")
    images, labels, meta = saved["images"], saved["labels"], saved["meta"]
    n = len(reader)
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4:
        raise Damaged("its images are not a 4-dimensional uint8 tensor")
    if images.shape[0] != n:
        raise Damaged(f"it holds {images.shape[0]} images where the split has {n}")
    if in_chans is not None and n and images.shape[1] != in_chans:
        raise Damaged(f"its images have {images.shape[1]} channels, not {in_chans}")
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.long or labels.shape != (n,):
        raise Damaged(f"its labels are not {n} int64 numbers")
    if n and (int(labels.min()) < 0 or (num_classes is not None and int(labels.max()) >= num_classes)):
        raise Damaged(f"its labels span {int(labels.min())}..{int(labels.max())}, not 0..{num_classes}")
    if not isinstance(meta, dict) or meta.get("shape") != list(images.shape):
        raise Damaged("its recorded shape differs from its images'")
    if meta.get("sha256") != checksum(images, labels):
        raise Damaged("checksum mismatch")
    for index in dict.fromkeys((0, n - 1)) if n else ():  # the source's own images, decoded again
        array, label = reader[index]
        if int(labels[index]) != label or not torch.equal(
            images[index], torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
        ):
            raise Damaged(f"its image {index} differs from the data's")
    return images, labels


class _Writes:
    """A file object for torch.save that remembers the first `OSError` of a write: torch's zip writer
    swallows it and fails later with a RuntimeError of its own ("unexpected pos 960 vs 854"), which says
    nothing of a full disk."""

    def __init__(self, f: Any):
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.f.flush()


def _write(path: Path, images: torch.Tensor, labels: torch.Tensor) -> str | None:
    """Write the cache file `path` atomically; None, or why it could not be written."""
    meta = {"shape": list(images.shape), "sha256": checksum(images, labels)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_killed_writers(path.parent)
        with atomic_write(path, "wb", field="data.cache_dir") as f:
            writes = _Writes(f)
            try:
                torch.save({"version": LOADER_VERSION, "images": images, "labels": labels, "meta": meta}, writes)
            except RuntimeError:
                if writes.error is not None:
                    raise writes.error from None  # the real cause, which atomic_write translates (ENOSPC …)
                raise
    except (ConfigError, ResourceError) as error:  # atomic_write's translation of an OSError
        return error.problem
    except (OSError, RuntimeError) as error:  # mkdir, or torch.save failing in its own way
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
        return f"cannot write {str(path)!r}: {reason[:200]}"
    return None


def _remove_killed_writers(directory: Path) -> None:
    """Temporaries of writers that died: atomic_write's (their process is gone) and version 1's
    (mkstemp names, no process id: a day old)."""
    remove_orphans(directory)
    for entry in directory.iterdir():
        try:
            if OLD_TEMPORARY.match(entry.name) and time.time() - entry.stat().st_mtime > 86400:
                entry.unlink()
        except OSError:
            pass


def load_or_decode(
    base: Dataset,
    prefix: Sequence[Callable],
    path: Path | None,
    in_chans: int | None = None,
    num_classes: int | None = None,
) -> Loaded:
    """The decoded split from the cache file `path` when it holds exactly what decoding gives (module
    docstring), else decoded and written there. Loaded memory-mapped."""
    reader = TransformedDataset(base, _to_array(prefix))
    damaged = None
    if path is not None and path.is_file():
        try:
            images, labels = _read(path, reader, in_chans, num_classes)
            return Loaded(images, labels, path)
        except Damaged as problem:
            damaged = str(problem)
        except (ConfigError, NotDecodable):
            raise  # the source itself cannot be read: decoding it would say the same
        except Exception as error:  # noqa: BLE001 - any failure to read a file we did not check yet
            text = str(error).strip().splitlines()
            damaged = f"unreadable: {type(error).__name__}" + (f": {text[0][:120]}" if text else "")
    images, labels = decode(base, prefix)
    if path is None:
        return Loaded(images, labels, None, damaged)
    unwritten = _write(path, images, labels)
    return Loaded(images, labels, None if unwritten else path, damaged, unwritten)


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
