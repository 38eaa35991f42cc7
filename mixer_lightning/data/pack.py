"""``mixer data pack``: an image folder or a Hugging Face dataset → WebDataset tar shards in the hub's
layout (``NAME-train-0000.tar``, ``NAME-validation-0000.tar``; each sample ``KEY.jpg`` (or ``.png``,
``.webp``: the image's own bytes), ``KEY.cls`` (its class) and ``KEY.json`` (file name, label, class
name)), read back by ``data.dataset: wds``. Deterministic: a seeded order across shards, tar headers
without times or owners. A manifest (``manifest.json``) records the classes, per split the counts per
class, per shard its samples, bytes and SHA-256 (``mixer data check`` verifies them). Resumable: every
shard is written atomically and recorded once whole; the same command after a stop keeps the shards
whose checksums hold; a folder packed with other settings or from another source is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mixer_lightning.data.cache import CACHE_FOLDER
from mixer_lightning.data.manifest import MANIFEST, SHARD_SPLITS, read_manifest
from mixer_lightning.data.pil_path import UNREADABLE
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.atomic import atomic_write, remove_orphans, sha256_file, write_text

PACK_VERSION = 1
FOLDER_SPLITS = {"train": ("train",), "val": ("val", "validation"), "test": ("test",)}


def as_shard_image(data: bytes, where: str) -> tuple[bytes, str]:
    """(bytes, extension) to store: JPEG, PNG and WebP as they are; any other image (BMP, TIFF, ...)
    re-encoded as PNG (lossless). Not an image: a one-line error naming it."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:  # the header only: cheap, and catches what is no image
            extension = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}.get(image.format)
            if extension is not None:
                return data, extension
            out = io.BytesIO()
            image.save(out, format="PNG")
            return out.getvalue(), "png"
    except UNREADABLE as error:  # a decompression bomb too (PIL.Image.MAX_IMAGE_PIXELS)
        raise ConfigError("source", f"cannot read the image {where} ({error})", "delete or replace that file") from None


@dataclass
class SplitPlan:
    """One split of the source: how many samples, their labels, names, and how to read a few of them."""

    name: str  # train, val, test
    labels: list[int]
    names: list[str]  # file names (relative) or row numbers, for keys and the json sidecar
    read: Callable[[Sequence[int]], list[bytes]]


def folder_source(root: Path) -> tuple[list[str], list[SplitPlan]]:
    """An ImageFolder (``root/train/<class>/*``, ``root/val/<class>/*``, optional ``root/test``; or the class
    folders directly under `root`: one train split): the classes and the splits."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from mixer_lightning.data.sources.folder import image_files

    folders = {
        split: next((root / n for n in names if (root / n).is_dir()), None) for split, names in FOLDER_SPLITS.items()
    }
    if folders["train"] is None:
        folders = {"train": root, "val": None, "test": None}
    classes = sorted(entry.name for entry in os.scandir(folders["train"]) if entry.is_dir())
    plans = []
    for split, folder in folders.items():
        if folder is None:
            continue
        found = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
        problem = f"the class folders of {str(folder)!r} differ from those of {str(folders['train'])!r}"
        require(found == classes, "source", problem)  # labels are positions in the sorted class folders
        files, labels = [], []
        for label, name in enumerate(classes):
            listed = image_files(folder / name, IMG_EXTENSIONS)
            files += listed
            labels += [label] * len(listed)
        require(bool(files), "source", f"{str(folder)!r} holds no images", "give an image folder")

        def read(indices: Sequence[int], files: list[str] = files) -> list[bytes]:
            return [Path(files[i]).read_bytes() for i in indices]

        names = [os.path.relpath(f, folder) for f in files]
        plans.append(SplitPlan(split, labels, names, read))
    return classes, plans


def hf_source(root: str, image_column: str | None, label_column: str | None) -> tuple[list[str], list[SplitPlan]]:
    """A Hugging Face dataset (`mixer_lightning.data.sources.huggingface.HuggingFace`: its checks of labels and
    columns): the classes and the splits, images read as their stored bytes."""
    import datasets

    from mixer_lightning.data.sources.huggingface import HuggingFace, dataset_folders, row_image

    source = HuggingFace(root, download=True, image_column=image_column, label_column=label_column)
    classes = source.classes or [str(i) for i in range(source.info.num_classes)]
    folders = dataset_folders(root)
    plans = []
    roles = [("train", source.split_names["train"]), ("val", source.split_names["val"])]
    if source.split_names["test"] not in (source.split_names["val"], None):
        roles.append(("test", source.split_names["test"]))
    for role, name in roles:
        if name is None:
            continue
        data = source.splits[name].cast_column(source.image_column, datasets.Image(decode=False))
        labels = [int(v) for v in data.with_format("arrow")[source.label_column].to_pylist()]

        def read(indices: Sequence[int], data: Any = data, column: str = source.image_column) -> list[bytes]:
            return [row_image(row, folders, root, "source") for row in data[list(indices)][column]]

        plans.append(SplitPlan(role, labels, [f"{name}/{i}" for i in range(len(labels))], read))
    return classes, plans


def _key(position: int, name: str) -> str:
    """A sample key: unique (its position), and its file name without dots (webdataset splits keys there)."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(name).stem if "/" in name or "." in name else name)
    return f"{position:08d}_{stem}"[:120]


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o644, 0, 0, "", ""
    tar.addfile(info, io.BytesIO(data))


def _say(text: str) -> None:
    print(text, flush=True)


def _fingerprint(source: str, classes: list[str], plans: list[SplitPlan], settings: dict) -> str:
    digest = hashlib.sha256(json.dumps({"source": source, "classes": classes, "settings": settings}).encode())
    for plan in plans:
        digest.update(json.dumps([plan.name, plan.names, plan.labels]).encode())
    return digest.hexdigest()[:24]


def pack(
    source: str,
    out: str,
    prefix: str | None = None,
    shard_size: int = 1000,
    seed: int = 0,
    shuffle: bool = True,
    image_column: str | None = None,
    label_column: str | None = None,
    log: Callable[[str], None] = _say,
) -> dict:
    """Pack `source` (an image folder, else a Hugging Face hub id or local dataset) into shards in `out`;
    returns the manifest (module docstring)."""
    if Path(source).is_dir() and not any(Path(source).glob("data/*")) and not any(Path(source).glob("*.parquet")):
        classes, plans = folder_source(Path(source))
        kind = "folder"
    else:
        classes, plans = hf_source(source, image_column, label_column)
        kind = "hf"
    target = Path(out)
    prefix = prefix or re.sub(r"[^A-Za-z0-9_]+", "_", target.resolve().name) or "data"
    settings = {"shard_size": shard_size, "seed": seed, "shuffle": shuffle, "prefix": prefix, "version": PACK_VERSION}
    fingerprint = _fingerprint(str(Path(source).resolve()) if kind == "folder" else source, classes, plans, settings)
    manifest_path = target / MANIFEST
    manifest: dict[str, Any]
    found = read_manifest(target, field="out")
    if found is not None:
        manifest = found
        require(
            manifest.get("fingerprint") == fingerprint,
            "out",
            f"{str(target)!r} holds shards packed from another source or with other settings",
            "give an empty folder, or the same source and settings to finish that packing",
        )
        # Only what this packing wrote is replaced: a file it did not record (a shard copied in) stays.
        recorded = {MANIFEST, CACHE_FOLDER} | {s["name"] for e in manifest["splits"].values() for s in e["shards"]}
        remove_orphans(target)
        foreign = sorted(p.name for p in target.iterdir() if p.name not in recorded)
        problem = f"{str(target / foreign[0])!r} is not a file of the packing in {str(target)!r}" if foreign else ""
        require(not foreign, "out", problem, "move it out of the folder")
        log(f"pack   resuming into {target} ({sum(len(s['shards']) for s in manifest['splits'].values())} shards done)")
    else:
        require(
            not target.exists() or not any(target.iterdir()),
            "out",
            f"{str(target)!r} is not empty and holds no {MANIFEST}",
            "give an empty (or new) folder",
        )
        manifest = {
            "format": "webdataset",
            "writer": "mixer data pack",
            "version": PACK_VERSION,
            "source": source,
            "fingerprint": fingerprint,
            "settings": settings,
            "classes": classes,
            "num_classes": len(classes),
            "complete": False,
            "splits": {},
        }
    target.mkdir(parents=True, exist_ok=True)
    remove_orphans(target)
    for plan in plans:
        _pack_split(plan, target, prefix, shard_size, seed, shuffle, classes, manifest, manifest_path, log)
    manifest["complete"] = True
    write_text(manifest_path, json.dumps(manifest, indent=1) + "\n", field="out")
    return manifest


def _pack_split(
    plan: SplitPlan,
    target: Path,
    prefix: str,
    shard_size: int,
    seed: int,
    shuffle: bool,
    classes: list[str],
    manifest: dict,
    manifest_path: Path,
    log: Callable[[str], None] = _say,
) -> None:
    n = len(plan.labels)
    order = (
        np.random.default_rng([seed, list(SHARD_SPLITS).index(plan.name)]).permutation(n) if shuffle else np.arange(n)
    )
    count = math.ceil(n / shard_size)
    width = max(4, len(str(count - 1)))
    split_name = SHARD_SPLITS[plan.name]
    entry = manifest["splits"].setdefault(
        split_name,
        {
            "samples": n,
            "shards": [],
            "bytes": 0,
            "counts_per_class": np.bincount(plan.labels, minlength=len(classes)).tolist(),
        },
    )
    done = {shard["name"]: shard for shard in entry["shards"]}
    start, packed = time.perf_counter(), 0
    for j in range(count):
        name = f"{prefix}-{split_name}-{j:0{width}d}.tar"
        members = order[j * shard_size : (j + 1) * shard_size].tolist()
        path = target / name
        recorded = done.get(name)
        whole = recorded and path.is_file() and path.stat().st_size == recorded["bytes"]
        if whole and sha256_file(path) == recorded["sha256"]:
            log(f"pack   {split_name}: shard {j + 1}/{count} already packed")
            continue
        with (
            atomic_write(path, "wb", field="out") as f,
            tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for position, data in zip(members, plan.read(members), strict=True):
                source_name = plan.names[position]
                data, extension = as_shard_image(data, repr(source_name))
                key = _key(position, source_name)
                label = plan.labels[position]
                _member(tar, f"{key}.{extension}", data)
                _member(tar, f"{key}.cls", str(label).encode())
                sidecar = {"filename": source_name, "label": label, "class_name": classes[label]}
                _member(tar, f"{key}.json", json.dumps(sidecar).encode())
        record = {"name": name, "samples": len(members), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
        entry["shards"] = sorted([s for s in entry["shards"] if s["name"] != name] + [record], key=lambda s: s["name"])
        entry["bytes"] = sum(s["bytes"] for s in entry["shards"])
        write_text(manifest_path, json.dumps(manifest, indent=1) + "\n", field="out")
        packed += len(members)
        rate = packed / max(time.perf_counter() - start, 1e-9)
        log(f"pack   {split_name}: shard {j + 1}/{count} ({rate:,.0f} img/s)")


def verify(folder: Path, log: Callable[[str], None] = _say) -> int:
    """Check every shard the manifest in `folder` lists against its size and SHA-256 (a missing, changed or
    damaged shard: one line naming it); the number checked."""
    manifest_path = folder / MANIFEST
    shards = [shard for entry in read_manifest(folder, "root")["splits"].values() for shard in entry["shards"]]
    for shard in shards:
        path = folder / shard["name"]
        whole = path.is_file() and path.stat().st_size == shard["bytes"] and sha256_file(path) == shard["sha256"]
        fix = "re-run mixer data pack (it rewrites the shard), or restore the file"
        require(whole, "root", f"shard {str(path)!r} is missing or differs from its checksum in {MANIFEST}", fix)
    log(f"check  {len(shards)} shards match the sizes and SHA-256 checksums of {manifest_path}")
    return len(shards)
