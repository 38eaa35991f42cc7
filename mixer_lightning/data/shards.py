"""WebDataset tar shards found, scanned, checked and indexed for random access (``data.dataset: wds``,
whose source is `mixer_lightning.data.sources.webdataset`; ``mixer data check``): the hub's ImageNet as
it is distributed (``timm/imagenet-1k-wds``: ``imagenet1k-train-0000.tar …``, each sample a ``KEY.jpg``
and a ``KEY.cls`` holding its class number), or what ``mixer data pack`` writes.

Design (docs/notes/cluster-data.md): a tar shard is uncompressed, so every member lies at a byte offset
that one scan of its headers finds. `index_split` scans each shard once (headers only, the few bytes of
each ``.cls`` label), checks it (a truncated tar, a sample without an image or a label, a label out of
range: one line naming the shard and the sample) and caches the index beside the data (or in
``$MIXER_CACHE_DIR``), keyed by the shards' names, sizes and modification times. The source's
`ShardImages` is then a map-style dataset: a sample is one ``pread`` from a shard file kept open, so
the data module's seeded samplers give this source every guarantee the image folders have (the same
samples whatever the number of workers, exact resume), and `mixer_lightning.data.shard_order.ShardOrder` draws the
training order so that each window of a few shards is read at a time (locality on a shared file
system) and splits it across the ranks.

Shards are found from ``data.root``:

- a folder: its ``*.tar`` files, each split by a word of its name (``train``; ``validation``,
  ``valid``, ``val``; ``test``), as in ``imagenet1k-train-0000.tar``, ``imagenet1k-validation-00.tar``;
- a brace pattern (``/data/imagenet1k-train-{0000..0099}.tar``) or one ``.tar`` file: the training
  shards; the validation and test shards are those of the same folder named as above.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.atomic import atomic_write

# Words in a shard's name that say its split (the hub's imagenet1k-{train,validation}-NNNN.tar).
SPLIT_WORDS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
LABEL_EXTENSION = "cls"
MANIFEST = "manifest.json"  # what `mixer data pack` writes beside its shards: classes and counts
# Bump when the index format changes: older index files are ignored.
INDEX_VERSION = 2
FIX = "re-download or re-pack that shard (mixer data pack), or leave it out of data.root"


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
        require(
            int(low) <= int(high), "data.root", f"the range {{{body}}} of {pattern!r} is empty", "write {low..high}"
        )
        items = [f"{i:0{width}d}" for i in range(int(low), int(high) + 1)]
    else:
        items = body.split(",")
    return [expanded for item in items for expanded in expand_braces(head + item + tail)]


def split_of(name: str) -> str | None:
    """The split a shard's file name says (``imagenet1k-validation-07.tar`` → ``val``), or None."""
    words = set(re.split(r"[-_.]", name.lower()))
    for split, names in SPLIT_WORDS.items():
        if words & set(names):
            return split
    return None


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def find_shards(root: str) -> dict[str, list[Path]]:
    """The shards of each split under `root` (module docstring): ``{"train": [...], "val": [...],
    "test": [...]}``, sorted naturally; a `ConfigError` naming what is missing."""
    is_pattern = "{" in root or root.endswith(".tar")
    folder = Path(root).parent if is_pattern else Path(root)
    require(
        folder.is_dir(),
        "data.root",
        f"{str(folder)!r} is not a folder",
        "give the folder of the .tar shards, or a brace pattern such as /data/imagenet1k-train-{0000..1023}.tar",
    )
    listed = sorted((p for p in folder.iterdir() if p.suffix == ".tar" and p.is_file()), key=_natural)
    splits: dict[str, list[Path]] = {split: [] for split in SPLIT_WORDS}
    for path in listed:
        split = split_of(path.name)
        if split is not None:
            splits[split].append(path)
    if is_pattern:
        files = [Path(name) for name in expand_braces(root)]
        missing = [str(path) for path in files if not path.is_file()]
        require(
            not missing,
            "data.root",
            f"{len(missing)} of the {len(files)} shards of {root!r} are missing (the first: {missing[:1]})",
            "give a pattern of shards that exist",
        )
        splits["train"] = files
    elif not splits["train"] and listed and not any(splits.values()):
        splits["train"] = listed  # shards named without a split: all of them train
    require(
        bool(splits["train"]),
        "data.root",
        f"{str(folder)!r} holds no training shards (*train*.tar)",
        "give the folder of the shards (e.g. the hub's timm/imagenet-1k-wds) or a brace pattern",
    )
    return {split: [path.resolve() for path in files] for split, files in splits.items()}


class BadShard(ConfigError):
    """A shard that cannot be read as it should: one line naming the shard and the sample."""

    def __init__(self, shard: Path | str, sample: str | None, problem: str, field: str = "data.root"):
        where = f"shard {str(shard)!r}" + (f", sample {sample!r}" if sample is not None else "")
        super().__init__(field, f"{where}: {problem}", FIX)


def _sample_name(member: str) -> tuple[str, str]:
    """A tar member's (sample key, extension), as webdataset splits them: the key is the path up to the
    first dot of the file name, the extension the rest (``a/n0144_1.jpg`` → ``a/n0144_1``, ``jpg``)."""
    directory, _, name = member.rpartition("/")
    stem, dot, extension = name.partition(".")
    return (f"{directory}/{stem}" if directory else stem), extension.lower() if dot else ""


@dataclass
class ShardSample:
    key: str
    image: tuple[int, int] | None = None  # (offset, size) in the shard
    ext: str = ""
    label: int | None = None
    label_text: str | None = None


def scan_shard(path: Path, labelled: bool = True) -> list[ShardSample]:
    """The samples of one shard in their order (tar headers and ``.cls`` labels only): `BadShard` for a
    truncated tar, a member running past the end of the file, a missing end-of-archive marker, or a
    sample without an image or (when `labelled`) a label, or with a label that is not a whole number.
    A sample without a label has label -1 when not `labelled`."""
    size = path.stat().st_size
    samples: dict[str, ShardSample] = {}
    last: str | None = None
    end = 0
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = _sample_name(member.name)
                last = key
                end = member.offset_data + member.size
                if end > size:
                    raise BadShard(path, key, f"truncated: {member.name} runs past the end of the file")
                sample = samples.setdefault(key, ShardSample(key))
                if ext in IMAGE_EXTENSIONS and sample.image is None:
                    sample.image, sample.ext = (member.offset_data, member.size), ext
                elif ext == LABEL_EXTENSION:
                    extracted = tar.extractfile(member)
                    sample.label_text = (extracted.read(64) if extracted else b"").decode("utf-8", "replace").strip()
    except tarfile.ReadError as error:
        after = f" (after sample {last!r})" if last is not None else ""
        raise BadShard(path, None, f"not a readable tar{after}: {error}") from None
    except OSError as error:
        raise BadShard(path, last, f"cannot be read ({error.strerror or error})") from None
    # A whole tar ends with two zero blocks after its last member: without them it was cut short.
    end = -(-end // 512) * 512
    with open(path, "rb") as f:
        f.seek(end)
        tail = f.read(1024)
    if samples and (len(tail) < 1024 or any(tail)):
        raise BadShard(path, last, "truncated: the file ends without the tar's end-of-archive marker")
    for sample in samples.values():
        if sample.image is None:
            kinds = "/".join(f".{e}" for e in IMAGE_EXTENSIONS)
            raise BadShard(path, sample.key, f"has no image ({kinds})")
        if sample.label_text is None and not labelled:
            sample.label_text = "-1"
        if sample.label_text is None:
            raise BadShard(path, sample.key, "has no label (.cls)")
        try:
            sample.label = int(sample.label_text)
        except ValueError:
            raise BadShard(path, sample.key, f"its label {sample.label_text!r} is not a class number") from None
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
    key: np.ndarray  # (N,) bytes (UTF-8): for messages only, so one byte a character

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def from_samples(cls, shards: list[Path], per_shard: list[list[ShardSample]]) -> ShardIndex:
        rows = [(i, s) for i, samples in enumerate(per_shard) for s in samples]
        return cls(
            shards=[str(path) for path in shards],
            shard=np.array([i for i, _ in rows], dtype=np.int32),
            offset=np.array([s.image[0] for _, s in rows], dtype=np.int64),
            size=np.array([s.image[1] for _, s in rows], dtype=np.int64),
            ext=np.array([IMAGE_EXTENSIONS.index(s.ext) for _, s in rows], dtype=np.uint8),
            label=np.array([s.label for _, s in rows], dtype=np.int64),
            key=np.array([s.key.encode() for _, s in rows], dtype=bytes),
        )

    def key_of(self, i: int) -> str:
        return bytes(self.key[i]).decode("utf-8", "replace")

    def check_labels(self, num_classes: int, field: str = "data.root") -> None:
        """Every label is a class number 0..num_classes-1; else one line naming the shard and sample."""
        bad = np.flatnonzero((self.label < 0) | (self.label >= num_classes))
        if len(bad):
            i = int(bad[0])
            raise BadShard(
                self.shards[self.shard[i]],
                self.key_of(i),
                f"its label {int(self.label[i])} is out of range: there are {num_classes} classes (0..{num_classes - 1})",
                field,
            )

    def save(self, path: Path) -> None:
        with atomic_write(path, "wb", field="data.cache_dir") as f:
            np.savez(
                f,
                version=np.array(INDEX_VERSION),
                shards=np.array(self.shards, dtype=str),
                shard=self.shard,
                offset=self.offset,
                size=self.size,
                ext=self.ext,
                label=self.label,
                key=self.key,
            )

    @classmethod
    def load(cls, path: Path) -> ShardIndex | None:
        try:
            with np.load(path, allow_pickle=False) as saved:
                if int(saved["version"]) != INDEX_VERSION:
                    return None
                return cls(
                    shards=[str(s) for s in saved["shards"]],
                    **{name: saved[name] for name in ("shard", "offset", "size", "ext", "label", "key")},
                )
        except (OSError, ValueError, KeyError):
            return None  # unreadable: index again and replace it


def index_key(files: Sequence[Path]) -> str:
    """A digest of the shards' paths, sizes and modification times: a changed shard is indexed again."""
    digest = hashlib.sha256(str(INDEX_VERSION).encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def index_split(
    files: Sequence[Path],
    cache_dir: Path | None,
    split: str,
    log: Callable[[str], None] = print,
    labelled: bool = True,
) -> ShardIndex:
    """The index of the shards `files`, read from `cache_dir` when it is there, else built (threads: one
    shard each; the few reads of a scan wait on the file system) and written there atomically. While one
    process builds it, others of this machine wait for it (a lock file) instead of scanning too. Not
    `labelled`: samples may lack their ``.cls`` (label -1), for a test split without labels."""
    path = cache_dir / f"wds-{split}-{index_key(files)}.npz" if cache_dir is not None else None
    if path is not None and path.is_file():
        found = ShardIndex.load(path)
        if found is not None:
            return found
    with _IndexLock(path):
        if path is not None and path.is_file():
            found = ShardIndex.load(path)
            if found is not None:
                return found
        start = time.perf_counter()
        if len(files) > 8:
            log(f"data   indexing {len(files):,} {split} shards (once; cached in {cache_dir})")
        done = [0]
        lock = threading.Lock()

        def scan(shard: Path) -> list[ShardSample]:
            samples = scan_shard(shard, labelled)
            with lock:
                done[0] += 1
                if len(files) > 64 and done[0] % max(1, len(files) // 10) == 0:
                    log(
                        f"data   indexed {done[0]:,}/{len(files):,} {split} shards ({time.perf_counter() - start:.0f} s)"
                    )
            return samples

        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            per_shard = list(pool.map(scan, files))
        require(
            any(per_shard),
            "data.root",
            f"the {split} shards ({files[0]}, ...) hold no samples",
            "give shards that hold images and .cls labels",
        )
        index = ShardIndex.from_samples(list(files), per_shard)
        if path is not None:
            try:
                index.save(path)
            except (ConfigError, RuntimeError):
                pass  # a cache that cannot be written: index again next time
        return index


class _IndexLock:
    """An advisory lock beside the index file while it is built (none where the file system has no flock)."""

    def __init__(self, path: Path | None):
        self.path = path.with_suffix(".lock") if path is not None else None
        self.fd: int | None = None

    def __enter__(self) -> _IndexLock:
        if self.path is None:
            return self
        try:
            import fcntl

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            if self.fd is not None:
                os.close(self.fd)
            self.fd = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock; the lock file stays (harmless, reused)


def read_manifest(folder: Path) -> dict | None:
    """`mixer data pack`'s manifest beside the shards (classes, counts, checksums), if there is one."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError("data.root", f"cannot read {str(path)!r} ({error})", "re-run mixer data pack") from None
