"""The decoded-tensor cache of the tensor path: each split decoded once, through the prefix of its
`BatchedPlan`, into an (N, C, H, W) uint8 tensor (`decode`), and kept on disk (`load_or_decode`) keyed
by the source files' names, sizes and modification times (or a Hugging Face dataset's fingerprint), the
prefix and `LOADER_VERSION` (`cache_key`): a changed source or prefix decodes again. Loaded
memory-mapped, so parallel runs on one machine share the page cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from mixer_lightning.data.batched import BatchedPlan
from mixer_lightning.data.pil_path import TransformedDataset

# Bump when decoding changes what a cache file holds: every cache file of an older version is ignored.
LOADER_VERSION = 1
CACHE_FOLDER = ".mixer_cache"
DECODE_CHUNK = 1000


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


def _files(folder: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime in ns) of every file under `folder`, our cache folder left out."""
    found = []
    for directory, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if d != CACHE_FOLDER)
        for name in sorted(names):
            path = Path(directory, name)
            stat = path.stat()
            found.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return found


def source_fingerprint(base: Dataset, root: str) -> dict[str, Any]:
    """What identifies the data a split is read from: its files (names, sizes, modification times; for
    a Hugging Face dataset, every file of its local folder `root`), or a hub dataset's fingerprint."""
    from mixer_lightning.data.sources.folder import RGBImageFolder
    from mixer_lightning.data.sources.huggingface import HFImages

    if isinstance(base, HFImages):
        columns = [base.image_column, base.label_column, base.mode]
        if Path(root).is_dir():
            return {"folder": str(Path(root).resolve()), "files": _files(Path(root)), "columns": columns}
        return {"hub": root, "fingerprint": base.dataset._fingerprint, "columns": columns}
    if isinstance(base, RGBImageFolder):
        return {"folder": str(Path(base.root).resolve()), "files": _files(Path(base.root))}
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


def load_or_decode(base: Dataset, prefix: Sequence[Callable], path: Path | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoded split from `path` when it is there, else decoded and written there (atomically:
    a temporary file renamed, so concurrent runs never read half a file). Loaded memory-mapped."""
    if path is not None and path.is_file():
        try:
            saved = torch.load(path, weights_only=True, mmap=True)
            if saved.get("version") == LOADER_VERSION and len(saved["labels"]) == len(base):
                return saved["images"], saved["labels"]
        except (OSError, RuntimeError, KeyError, AttributeError):
            pass  # unreadable (another torch, a truncated copy): decode again and replace it
    images, labels = decode(base, prefix)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(handle)
            try:
                torch.save({"version": LOADER_VERSION, "images": images, "labels": labels}, temporary)
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide it from other users' runs
                os.replace(temporary, path)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        except OSError:
            pass  # a read-only place: keep the decoded split in memory only
    return images, labels


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
