"""WebDataset tar shards found, scanned, checked and indexed for random access (``data.dataset: wds``;
``mixer data check``): the hub's ImageNet as distributed (``timm/imagenet-1k-wds``: each sample a
``KEY.jpg`` and a ``KEY.cls`` holding its class number), or what ``mixer data pack`` writes.

A tar shard is uncompressed, so every member lies at a byte offset that one scan of its headers finds.
`index_split` scans each shard once, checks it (a truncated tar, a sample without an image or a label,
a label out of range: one line naming the shard and the sample, so that no run trains on a damaged or
wrong shard) and caches the index, keyed by the shards' names, sizes and modification times.

``data.root`` is a folder (its ``*.tar`` files, each split by a word of its name: ``train``;
``validation``, ``valid``, ``val``; ``test``), or a brace pattern (``imagenet1k-train-{0000..0099}.tar``)
or one ``.tar`` file: the training shards, the other splits' being those of its folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mixer_lightning.data.sources.base import say
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.atomic import atomic_write

# Words in a shard's name that say its split (the hub's imagenet1k-{train,validation}-NNNN.tar).
SPLIT_WORDS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
MANIFEST = "manifest.json"  # what `mixer data pack` writes beside its shards: classes and counts
INDEX_VERSION = 2  # bump when the index format changes: older index files are ignored


def expand_braces(pattern: str) -> list[str]:
    """``a-{000..002}.tar`` → ``a-000.tar, a-001.tar, a-002.tar`` (zero-padded to the width of the
    bounds), ``{x,y}`` → both; several groups multiply, left to right (webdataset's brace notation)."""
    found = re.search(r"\{([^{}]*)\}", pattern)
    if found is None:
        return [pattern]
    head, body, tail = pattern[: found.start()], found.group(1), pattern[found.end() :]
    span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if span:
        low, high = span.group(1), span.group(2)
        width = len(low) if low.startswith("0") or len(low) == len(high) else 0
        items = [f"{i:0{width}d}" for i in range(int(low), int(high) + 1)]
    else:
        items = body.split(",")
    return [expanded for item in items for expanded in expand_braces(head + item + tail)]


def split_of(name: str) -> str | None:
    """The split a shard's file name says (``imagenet1k-validation-07.tar`` → ``val``), or None."""
    words = set(re.split(r"[-_.]", name.lower()))
    return next((split for split, names in SPLIT_WORDS.items() if words & set(names)), None)


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def find_shards(root: str) -> dict[str, list[Path]]:
    """The shards of each split under `root` (module docstring), sorted naturally."""
    is_pattern = "{" in root or root.endswith(".tar")
    folder = Path(root).parent if is_pattern else Path(root)
    require(folder.is_dir(), "data.root", f"{str(folder)!r} is not a folder", "give the folder of the .tar shards")
    listed = sorted((p for p in folder.iterdir() if p.suffix == ".tar" and p.is_file()), key=_natural)
    splits: dict[str, list[Path]] = {split: [] for split in SPLIT_WORDS}
    for path in listed:
        if split_of(path.name) is not None:
            splits[split_of(path.name)].append(path)
    if is_pattern:
        splits["train"] = [Path(name) for name in expand_braces(root)]
        missing = [str(path) for path in splits["train"] if not path.is_file()]
        require(not missing, "data.root", f"{len(missing)} shards of {root!r} are missing (the first: {missing[:1]})")
    elif not any(splits.values()):
        splits["train"] = listed  # shards named without a split: all of them train
    require(bool(splits["train"]), "data.root", f"{str(folder)!r} holds no training shards (*train*.tar)")
    return {split: [path.resolve() for path in files] for split, files in splits.items()}


def bad_shard(shard: Path | str, sample: str | None, problem: str) -> ConfigError:
    """A shard that cannot be read as it should: one line naming the shard and the sample."""
    where = f"shard {str(shard)!r}" + (f", sample {sample!r}" if sample is not None else "")
    fix = "re-download or re-pack that shard (mixer data pack), or leave it out of data.root"
    return ConfigError("data.root", f"{where}: {problem}", fix)


@dataclass
class ShardSample:
    key: str
    image: tuple[int, int] | None = None  # (offset, size) in the shard
    ext: str = ""
    label: str | None = None


def scan_shard(path: Path, labelled: bool = True) -> list[ShardSample]:
    """The samples of one shard in their order (tar headers and ``.cls`` labels only); an error for a
    truncated tar, a sample without an image or (when `labelled`) a label, or a label that is not a
    whole number. Not `labelled`: a sample without a label has label -1."""
    size = path.stat().st_size
    samples: dict[str, ShardSample] = {}
    last, end = None, 0
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                # webdataset's sample key: the path up to the first dot of the file name; the rest is the type.
                directory, _, name = member.name.rpartition("/")
                stem, _, ext = name.partition(".")
                last, ext = (f"{directory}/{stem}" if directory else stem), ext.lower()
                end = member.offset_data + member.size
                if end > size:
                    raise bad_shard(path, last, f"truncated: {member.name} runs past the end of the file")
                sample = samples.setdefault(last, ShardSample(last))
                if ext in IMAGE_EXTENSIONS and sample.image is None:
                    sample.image, sample.ext = (member.offset_data, member.size), ext
                elif ext == "cls":
                    sample.label = tar.extractfile(member).read(64).decode("utf-8", "replace").strip()
    except tarfile.ReadError as error:
        after = f" (after sample {last!r})" if last is not None else ""
        raise bad_shard(path, None, f"not a readable tar{after}: {error}") from None
    # A whole tar ends with two zero blocks after its last member: without them it was cut short.
    with open(path, "rb") as f:
        f.seek(-(-end // 512) * 512)
        tail = f.read(1024)
    if samples and (len(tail) < 1024 or any(tail)):
        raise bad_shard(path, last, "truncated: the file ends without the tar's end-of-archive marker")
    for sample in samples.values():
        if sample.image is None:
            raise bad_shard(path, sample.key, f"has no image ({'/'.join(IMAGE_EXTENSIONS)})")
        if sample.label is None and labelled:
            raise bad_shard(path, sample.key, "has no label (.cls)")
        if not re.fullmatch(r"-?\d+", sample.label or "-1"):
            raise bad_shard(path, sample.key, f"its label {sample.label!r} is not a class number")
    return list(samples.values())


@dataclass
class ShardIndex:
    """Where every sample of a split lies: its shard, byte offset and size, image type, label and key."""

    shards: list[str]
    shard: np.ndarray  # (N,) int32: position in `shards`
    offset: np.ndarray  # (N,) int64
    size: np.ndarray  # (N,) int64
    ext: np.ndarray  # (N,) uint8: position in IMAGE_EXTENSIONS
    label: np.ndarray  # (N,) int64
    key: np.ndarray  # (N,) bytes (UTF-8): for messages only

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def from_samples(cls, shards: Sequence[Path], per_shard: list[list[ShardSample]]) -> ShardIndex:
        rows = [(i, s) for i, samples in enumerate(per_shard) for s in samples]
        return cls(
            shards=[str(path) for path in shards],
            shard=np.array([i for i, _ in rows], dtype=np.int32),
            offset=np.array([s.image[0] for _, s in rows], dtype=np.int64),
            size=np.array([s.image[1] for _, s in rows], dtype=np.int64),
            ext=np.array([IMAGE_EXTENSIONS.index(s.ext) for _, s in rows], dtype=np.uint8),
            label=np.array([int(s.label or -1) for _, s in rows], dtype=np.int64),
            key=np.array([s.key.encode() for _, s in rows], dtype=bytes),
        )

    def key_of(self, i: int) -> str:
        return bytes(self.key[i]).decode("utf-8", "replace")

    def check_labels(self, num_classes: int) -> None:
        """Every label is a class number 0..num_classes-1; else one line naming the shard and sample."""
        bad = np.flatnonzero((self.label < 0) | (self.label >= num_classes))
        if len(bad):
            i = int(bad[0])
            problem = f"its label {int(self.label[i])} is out of range: there are {num_classes} classes"
            raise bad_shard(self.shards[self.shard[i]], self.key_of(i), problem)

    def save(self, path: Path) -> None:
        arrays = {name: getattr(self, name) for name in ("shard", "offset", "size", "ext", "label", "key")}
        with atomic_write(path, "wb", field="data.cache_dir") as f:
            np.savez(f, version=np.array(INDEX_VERSION), shards=np.array(self.shards, dtype=str), **arrays)

    @classmethod
    def load(cls, path: Path) -> ShardIndex | None:
        try:
            with np.load(path, allow_pickle=False) as saved:
                if int(saved["version"]) != INDEX_VERSION:
                    return None
                names = ("shard", "offset", "size", "ext", "label", "key")
                return cls(shards=[str(s) for s in saved["shards"]], **{name: saved[name] for name in names})
        except (OSError, ValueError, KeyError):
            return None  # unreadable: index again and replace it


def index_key(files: Sequence[Path]) -> str:
    """A digest of the shards' paths, sizes and modification times: a changed shard is indexed again."""
    digest = hashlib.sha256(str(INDEX_VERSION).encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def index_split(files: Sequence[Path], cache_dir: Path | None, split: str, labelled: bool = True) -> ShardIndex:
    """The index of the shards `files`, read from `cache_dir` when it is there, else built (threads: one
    shard each) and written there atomically. While one process builds it, the others wait for it (a
    file lock) instead of scanning too. Not `labelled`: samples may lack their ``.cls`` (label -1)."""
    from filelock import FileLock

    path = cache_dir / f"wds-{split}-{index_key(files)}.npz" if cache_dir is not None else None
    found = ShardIndex.load(path) if path is not None and path.is_file() else None
    if found is not None:  # (without the lock: a read-only cache folder is read too)
        return found
    lock = None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(f"{path}.lock")
            lock.acquire()
        except OSError:  # a cache folder that cannot be written: index without it
            path, lock = None, None
    try:
        found = ShardIndex.load(path) if path is not None and path.is_file() else None
        if found is not None:
            return found
        if len(files) > 8:
            say(f"data   indexing {len(files):,} {split} shards (once; cached in {cache_dir})")
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            per_shard = list(pool.map(lambda shard: scan_shard(shard, labelled), files))
        require(any(per_shard), "data.root", f"the {split} shards ({files[0]}, ...) hold no samples")
        index = ShardIndex.from_samples(files, per_shard)
        if path is not None:
            try:
                index.save(path)
            except (ConfigError, RuntimeError, OSError):
                pass  # a cache that cannot be written: index again next time
        return index
    finally:
        if lock is not None:
            lock.release()


def read_manifest(folder: Path) -> dict | None:
    """`mixer data pack`'s manifest beside the shards (classes, counts, checksums), if there is one."""
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None
