"""WebDataset tar shards found, scanned, checked and indexed for random access (``data.dataset: wds``;
``mixer data check``): the hub's ImageNet as distributed (``timm/imagenet-1k-wds``: each sample a
``KEY.jpg`` and a ``KEY.cls`` holding its class number), or what ``mixer data pack`` writes.

A tar shard is uncompressed, so every member lies at a byte offset that one scan of its headers finds.
`index_split` scans each shard once, checks it (a truncated tar, a sample without an image or a label,
a label out of range: one line naming the shard and the sample, so that no run trains on a damaged or
wrong shard) and caches the index, keyed by the shards' names, sizes and modification times; a cache
that does not load or does not agree with its shards is made again.

``data.root`` is a folder, or a brace pattern (``imagenet1k-train-{0000..0099}.tar``) or one ``.tar``
file of training shards, the other splits' being those of its folder. A folder with `mixer data pack`'s
``manifest.json`` holds exactly the shards it lists, split as it lists them, and a finished pack only;
without one, a shard's split is the word just before its number (``PREFIX-train-0000.tar``,
``PREFIX-validation-00.tar``; ``train``, ``validation``/``valid``/``val``, ``test``), never a word of
its prefix; a folder of shards none of whose names say a split is all training shards.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from mixer_lightning.data.manifest import (
    SHARD_SPLITS,
    manifest_shards,
    natural_order,
    read_manifest,
    split_of,
)
from mixer_lightning.data.sources.base import say
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.atomic import atomic_write

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
INDEX_VERSION = 3  # bump when the index format changes: older index files are ignored
LABEL = re.compile(rb"\s*(-?[0-9]{1,18})\s*")  # a class number in ASCII digits (int() also takes "0_1", "٣")


def expand_braces(pattern: str) -> Iterator[str]:
    """``a-{000..002}.tar`` → ``a-000.tar, a-001.tar, a-002.tar`` (zero-padded to the width of the
    bounds), ``{x,{y,z}}`` → x, y, z; several groups multiply, left to right (webdataset's brace
    notation). Lazily: a caller takes as many names as it will accept."""
    start, end, depth = pattern.find("{"), -1, 0
    for i in range(max(start, 0), len(pattern) if start >= 0 else 0):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if depth == 0:
            end = i
            break
    if end < 0:  # no group (or an unclosed one): the name itself
        yield pattern
        return
    head, body, tail = pattern[:start], pattern[start + 1 : end], pattern[end + 1 :]
    span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if span:
        low, high = span.group(1), span.group(2)
        width = len(low) if low.startswith("0") or len(low) == len(high) else 0
        items: Iterator[str] = (f"{i:0{width}d}" for i in range(int(low), int(high) + 1))
    else:
        parts, depth, last = [], 0, 0
        for i, char in enumerate(body):
            depth += (char == "{") - (char == "}")
            if char == "," and depth == 0:
                parts.append(body[last:i])
                last = i + 1
        items = (name for item in [*parts, body[last:]] for name in expand_braces(item))
    for item in items:
        for rest in expand_braces(tail):
            yield head + item + rest


def find_shards(root: str) -> dict[str, list[Path]]:
    """The shards of each split under `root` (module docstring), sorted naturally."""
    is_pattern = "{" in root or root.endswith(".tar")
    folder = Path(root).parent if is_pattern else Path(root)
    require(folder.is_dir(), "data.root", f"{str(folder)!r} is not a folder", "give the folder of the .tar shards")
    listed = sorted((p.name for p in folder.iterdir() if p.suffix == ".tar" and p.is_file()), key=natural_order)
    manifest = read_manifest(folder)
    if manifest is not None:
        splits = manifest_shards(folder, manifest, listed)
    else:
        splits = {split: [name for name in listed if split_of(name) == split] for split in SHARD_SPLITS}
        unsplit = [name for name in listed if split_of(name) is None]
        problem = f"{str(folder / unsplit[0])!r} names no split, beside shards that do" if unsplit else ""
        require(not (unsplit and any(splits.values())), "data.root", problem, "move it out of the folder")
        splits["train"] = splits["train"] or unsplit  # shards named without a split: all of them train
    if is_pattern:
        groups = Path(root).name.count("{")  # each is a level of `expand_braces`: far below Python's recursion limit
        require(groups <= 64, "data.root", f"{root!r} has {groups} brace groups", "name the shards with at most 64")
        # Never more names than the folder has shards: each must be one of them (a pattern of a billion names
        # is refused before it is written out).
        named = list(islice(expand_braces(Path(root).name), len(listed) + 1))
        many = f"{root!r} names more shards than the {len(listed)} in {str(folder)!r}"
        require(len(named) <= len(listed), "data.root", many, "give a pattern of the training shards")
        twice = [name for name, count in Counter(named).items() if count > 1]
        require(not twice, "data.root", f"{root!r} names the shard {twice[:1]} twice", "name each shard once")
        missing = [name for name in named if name not in listed]
        require(not missing, "data.root", f"{len(missing)} shards of {root!r} are missing (the first: {missing[:1]})")
        others = [name for name in named if name not in splits["train"]]
        problem = f"{root!r} names {others[:1]}, not a training shard"
        require(not others, "data.root", problem, "give training shards (the other splits are found beside them)")
        splits["train"] = named
    require(bool(splits["train"]), "data.root", f"{str(folder)!r} holds no training shards (*-train-*.tar)")
    return {split: [(folder / name).resolve() for name in names] for split, names in splits.items()}


@dataclass
class ShardSample:
    key: str
    image: tuple[int, int] | None = None  # (offset, size) in the shard
    ext: str = ""
    label: int | None = None


def scan_shard(path: Path, labelled: bool = True) -> list[ShardSample]:
    """The samples of one shard in their order (tar headers and ``.cls`` labels only); an error for a
    truncated tar, a key met twice, a sample without an image or (when `labelled`) a label, or a label
    that is not a class number. Not `labelled`: a sample without a label has label -1."""
    size = path.stat().st_size
    samples: dict[str, ShardSample] = {}
    last, end, types = None, 0, set()
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
            for member in tar:
                # webdataset's sample key: the path up to the first dot of the file name; the rest is the type.
                # A sample's members come together: a key met again after another is a second sample of that
                # key, which webdataset reads as another sample and an index keyed by it would merge.
                directory, _, name = member.name.rpartition("/")
                stem, _, ext = name.partition(".")
                key, ext = (f"{directory}/{stem}" if directory else stem), ext.lower()
                end = member.offset_data + member.size  # of any member: a folder or a link may come last
                if end > size:
                    where = key if member.isfile() else last
                    raise bad_shard(path, where, f"truncated: {member.name} runs past the end of the file")
                if not member.isfile():
                    continue
                if member.issparse():  # its bytes are not one run of the file
                    raise bad_shard(path, key, "is a sparse file")
                if key != last and key in samples:
                    raise bad_shard(path, key, "its key comes twice in the shard (two samples of one key)")
                if key != last:
                    last, types = key, set()
                if ext in types:
                    raise bad_shard(path, key, f"has two .{ext} members")
                types.add(ext)
                sample = samples.setdefault(key, ShardSample(key))
                if ext in IMAGE_EXTENSIONS and sample.image is None:
                    sample.image, sample.ext = (member.offset_data, member.size), ext
                elif ext == "cls":
                    data = tar.extractfile(member).read(64) if member.size <= 64 else b"(a long text)"
                    found = LABEL.fullmatch(data)
                    if found is None:
                        text = data[:24].decode("utf-8", "replace")
                        raise bad_shard(path, key, f"its label {text!r} is not a class number")
                    sample.label = int(found.group(1))
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
    return list(samples.values())


INDEX_ARRAYS = ("shard", "offset", "size", "ext", "label", "key_start", "keys")


@dataclass
class ShardIndex:
    """Where every sample of a split lies: its shard, byte offset and size, image type, label and key."""

    shards: list[str]
    shard: np.ndarray  # (N,) int32: position in `shards`
    offset: np.ndarray  # (N,) int64
    size: np.ndarray  # (N,) int64
    ext: np.ndarray  # (N,) uint8: position in IMAGE_EXTENSIONS
    label: np.ndarray  # (N,) int64
    key_start: np.ndarray  # (N + 1,) int64: sample i's key is keys[key_start[i]:key_start[i + 1]]
    keys: np.ndarray  # uint8: the keys (UTF-8) one after another, for messages only (not padded to the longest)

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def from_samples(cls, shards: Sequence[Path], per_shard: list[list[ShardSample]]) -> ShardIndex:
        rows = [(i, s) for i, samples in enumerate(per_shard) for s in samples]
        keys = [s.key.encode("utf-8", "surrogateescape") for _, s in rows]  # a tar name need not be UTF-8
        return cls(
            shards=[str(path) for path in shards],
            shard=np.array([i for i, _ in rows], dtype=np.int32),
            offset=np.array([s.image[0] for _, s in rows], dtype=np.int64),
            size=np.array([s.image[1] for _, s in rows], dtype=np.int64),
            ext=np.array([IMAGE_EXTENSIONS.index(s.ext) for _, s in rows], dtype=np.uint8),
            label=np.array([-1 if s.label is None else s.label for _, s in rows], dtype=np.int64),
            key_start=np.cumsum([0] + [len(k) for k in keys], dtype=np.int64),
            keys=np.frombuffer(b"".join(keys), dtype=np.uint8),
        )

    def key_of(self, i: int) -> str:
        return self.keys[self.key_start[i] : self.key_start[i + 1]].tobytes().decode("utf-8", "replace")

    def check_labels(self, num_classes: int) -> None:
        """Every label is a class number 0..num_classes-1; else one line naming the shard and sample."""
        bad = np.flatnonzero((self.label < 0) | (self.label >= num_classes))
        if len(bad):
            i = int(bad[0])
            problem = f"its label {int(self.label[i])} is out of range: there are {num_classes} classes"
            raise bad_shard(self.shards[self.shard[i]], self.key_of(i), problem)

    def agrees_with(self, files: Sequence[Path]) -> bool:
        """The index is of `files` and every image it points to lies inside its shard."""
        n, sizes = len(self.label), np.array([path.stat().st_size for path in files], dtype=np.int64)
        arrays = [getattr(self, name) for name in INDEX_ARRAYS]
        return bool(
            self.shards == [str(path) for path in files]
            and all(a.ndim == 1 and a.dtype.kind in "iu" for a in arrays)
            and all(len(a) == n for a in (self.shard, self.offset, self.size, self.ext))
            and len(self.key_start) == n + 1
            and self.key_start[0] == 0
            and self.key_start[-1] == len(self.keys)
            and (np.diff(self.key_start) >= 0).all()
            and ((self.shard >= 0) & (self.shard < len(files))).all()
            and ((self.offset >= 0) & (self.size >= 0) & (self.ext < len(IMAGE_EXTENSIONS))).all()
            and (self.offset + self.size <= sizes[self.shard]).all()
        )

    def save(self, path: Path) -> None:
        arrays = {name: getattr(self, name) for name in INDEX_ARRAYS}
        with atomic_write(path, "wb", field="data.cache_dir") as f:
            np.savez(f, version=np.array(INDEX_VERSION), shards=np.array(self.shards, dtype=str), **arrays)

    @classmethod
    def load(cls, path: Path, files: Sequence[Path]) -> ShardIndex | None:
        """The index cached at `path`, or None where it is absent, of another version, does not load or
        does not agree with `files`: it is then made again (a cache is only ever a copy)."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                if int(saved["version"]) != INDEX_VERSION:
                    return None
                index = cls(shards=[str(s) for s in saved["shards"]], **{name: saved[name] for name in INDEX_ARRAYS})
            return index if index.agrees_with(files) else None
        except Exception:  # a damaged file fails in zipfile, numpy's header parser or the arrays: any of them
            return None


def index_key(files: Sequence[Path]) -> str:
    """A digest of the shards' paths, sizes and modification times: a changed shard is indexed again."""
    digest = hashlib.sha256(str(INDEX_VERSION).encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def index_split(
    files: Sequence[Path], cache_dir: Path | None, split: str, labelled: bool = True, rescan: bool = False
) -> ShardIndex:
    """The index of the shards `files`, read from `cache_dir` when it is there (unless `rescan`: then the
    shards are scanned and the cache replaced), else built (threads: one shard each) and written there
    atomically. While one process builds it, the others wait for it (a file lock) instead of scanning too.
    Not `labelled`: samples may lack their ``.cls`` (label -1)."""
    from filelock import FileLock

    path = cache_dir / f"wds-{split}-{index_key(files)}.npz" if cache_dir is not None else None
    found = ShardIndex.load(path, files) if path is not None and path.is_file() and not rescan else None
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
        found = ShardIndex.load(path, files) if path is not None and path.is_file() and not rescan else None
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


def bad_shard(shard: Path | str, sample: str | None, problem: str) -> ConfigError:
    """A shard that cannot be read as it should: one line naming the shard and the sample."""
    where = f"shard {str(shard)!r}" + (f", sample {sample!r}" if sample is not None else "")
    fix = "re-download or re-pack that shard (mixer data pack), or leave it out of data.root"
    return ConfigError("data.root", f"{where}: {problem}", fix)
