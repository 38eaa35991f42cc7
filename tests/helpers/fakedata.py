"""Tiny datasets in the real on-disk formats (torchvision's, ImageFolder, Hugging Face parquet).

Tests read them through the same code paths as the real datasets. torchvision checks the md5 sums
of its files: `patch_torchvision_checks` disables that check, in tests only.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image


def _images(n: int, height: int, width: int, channels: int, seed: int) -> np.ndarray:
    """Images with structure (a gradient plus noise), so every augmentation op has something to do."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, width)[None, None, :, None] * np.ones((n, height, 1, channels))
    noise = rng.integers(0, 96, (n, height, width, channels))
    return ((ramp * rng.uniform(0.3, 1.0, (n, 1, 1, channels)) + noise) % 256).astype(np.uint8)


def write_cifar10(root: Path, per_batch: int = 20) -> Path:
    """``root/cifar-10-batches-py``: 5 training batches and a test batch of `per_batch` images."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for seed, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        images = _images(per_batch, 32, 32, 3, seed).transpose(0, 3, 1, 2).reshape(per_batch, 3072)
        batch = {"data": images, "labels": [int(v) for v in rng.integers(0, 10, per_batch)]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)
    return root


def write_cifar100(root: Path, train: int = 100, test: int = 20) -> Path:
    """``root/cifar-100-python``: train, test and meta pickles (fine and coarse labels)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for seed, (name, n) in enumerate([("train", train), ("test", test)]):
        images = _images(n, 32, 32, 3, seed).transpose(0, 3, 1, 2).reshape(n, 3072)
        fine = [int(v) for v in rng.integers(0, 100, n)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": images, "fine_labels": fine, "coarse_labels": [v // 5 for v in fine]}, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"fine{i}" for i in range(100)], "coarse_label_names": []}, f)
    return root


def write_stl10(root: Path, train: int = 30, test: int = 20) -> Path:
    """``root/stl10_binary``: the labelled splits as raw uint8 (column-major 96×96 planes, labels 1..10)."""
    folder = root / "stl10_binary"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    for seed, (split, n) in enumerate([("train", train), ("test", test)]):
        # torchvision reads (N, 3, 96, 96) and transposes the last two axes (the files are column-major).
        _images(n, 96, 96, 3, seed).transpose(0, 3, 2, 1).tofile(folder / f"{split}_X.bin")
        rng.integers(1, 11, n).astype(np.uint8).tofile(folder / f"{split}_y.bin")
    np.zeros((0,), np.uint8).tofile(folder / "unlabeled_X.bin")
    (folder / "class_names.txt").write_text("\n".join(f"class{i}" for i in range(10)) + "\n")
    (folder / "fold_indices.txt").write_text(" ".join(map(str, range(train))) + "\n")
    return root


def write_mnist(root: Path, train: int = 60, test: int = 20) -> Path:
    """``root/MNIST/raw``: idx files (big-endian headers), as torchvision expects after download."""
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for seed, (prefix, n) in enumerate([("train", train), ("t10k", test)]):
        images = _images(n, 28, 28, 1, seed)[..., 0]
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        labels = rng.integers(0, 10, n).astype(np.uint8)
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())
    return root


def write_image_folder(root: Path, classes: int = 3, per_class: int = 4, size: tuple[int, int] = (48, 40)) -> Path:
    """``root/{train,val}/<class>/*.jpg`` (ImageNet layout), JPEGs of `size` (width, height) and one grey one."""
    for seed, split in enumerate(["train", "val"]):
        for c in range(classes):
            folder = root / split / f"n0{c:07d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i, pixels in enumerate(_images(per_class, size[1], size[0], 3, 10 * seed + c)):
                image = Image.fromarray(pixels)
                if i == 0 and c == 0:
                    image = image.convert("L")  # ImageNet holds a few grey JPEGs
                image.save(folder / f"img{i}.jpg", quality=90)
    return root


def write_hf(root: Path, train: int = 40, test: int = 20, size: int = 32, classes: int = 10) -> Path:
    """A local Hugging Face dataset in the hub's layout: ``root/data/{train,test}-00000-of-00001.parquet``,
    image column ``img`` (PNG bytes) and ClassLabel column ``label``, like ``uoft-cs/cifar10``."""
    import datasets

    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=[f"c{i}" for i in range(classes)])}
    )
    (root / "data").mkdir(parents=True, exist_ok=True)
    for seed, (split, n) in enumerate([("train", train), ("test", test)]):
        images = [Image.fromarray(pixels) for pixels in _images(n, size, size, 3, seed)]
        labels = [i % classes for i in range(n)]
        table = datasets.Dataset.from_dict({"img": images, "label": labels}, features=features)
        table.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


WRITERS = {
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
    "stl10": write_stl10,
    "mnist": write_mnist,
    "imagenet": write_image_folder,
    "folder": write_image_folder,
    "hf": write_hf,
}


def write_fine_tune_config(path: Path, init_from: str, data_root: Path) -> Path:
    """A one-step fine-tuning config: the MLP-Mixer of ``init_from`` on a 5-class 32×32 HF dataset written
    under ``data_root``, logged to runs/hub."""
    write_hf(data_root, train=16, test=8, size=32, classes=5)
    config = {
        "model": {"net": {"class_path": "mixer_lightning.models.MLPMixer"}, "init_from": init_from},
        "data": {
            "class_path": "mixer_lightning.data.ImageDataModule",
            "init_args": {"dataset": "hf", "root": str(data_root), "batch_size": 8, "val_split": 0},
        },
        "trainer": {
            "max_epochs": 1,
            "limit_train_batches": 1,
            "limit_val_batches": 1,
            "enable_progress_bar": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": "runs", "name": "hub"},
            },
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


def patch_torchvision_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision verifies md5 sums of the real files; the fakes have other sums (tests only)."""
    for module in ("cifar", "stl10"):
        monkeypatch.setattr(f"torchvision.datasets.{module}.check_integrity", lambda *args, **kwargs: True)


def write_hf_labels(root: Path, train: list, test: list | None, label_type: str = "int64", size: int = 8) -> Path:
    """A local Hugging Face dataset whose labels are given as they are (plain `label_type` values, no
    ClassLabel): labels that lie (-1, too large, strings). ``test=None``: a test split without a label
    column."""
    import datasets

    (root / "data").mkdir(parents=True, exist_ok=True)
    for seed, (split, labels) in enumerate([("train", train), ("test", test)]):
        n = len(train) if labels is None else len(labels)
        columns = {"img": [Image.fromarray(pixels) for pixels in _images(n, size, size, 3, seed)]}
        features = {"img": datasets.Image()}
        if labels is not None:
            columns["label"], features["label"] = labels, datasets.Value(label_type)
        table = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
        table.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def write_png_header(path: Path, width: int, height: int) -> Path:
    """A PNG that claims `width` × `height` pixels in a few bytes (no pixel data): PIL refuses it as a
    decompression bomb when it is opened, before decoding anything."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )
    return path


# Sizes (width, height) of the synthetic ImageNet's JPEGs: landscape, portrait and square, as ImageNet's vary.
IMAGENET_SIZES = ((48, 36), (36, 48), (40, 40), (56, 42), (44, 60), (64, 48))


def write_imagenet_folder(root: Path, classes: int = 4, train: int = 8, val: int = 3) -> Path:
    """A tiny synthetic ImageNet as an ImageFolder: ``root/{train,val}/n0000000k/*.JPEG``, per class
    `train` and `val` JPEGs of varied sizes (`IMAGENET_SIZES`), one of them grey."""
    for split, count in (("train", train), ("val", val)):
        for c in range(classes):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                width, height = IMAGENET_SIZES[(i + c) % len(IMAGENET_SIZES)]
                image = Image.fromarray(_images(1, height, width, 3, 1000 * len(split) + 100 * c + i)[0])
                if i == 1 and c == 0:
                    image = image.convert("L")
                image.save(folder / f"n{c:08d}_{i}.JPEG", quality=85)
    return root


def _tar_member(tar, name: str, data: bytes) -> None:
    import io
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_wds(
    root: Path,
    prefix: str = "imagenet1k",
    classes: int = 4,
    train: int = 32,
    val: int = 8,
    per_shard: int = 8,
    labels: dict[str, bytes | None] | None = None,
) -> Path:
    """WebDataset shards in the hub's layout (``timm/imagenet-1k-wds``), written directly with tarfile:
    ``root/PREFIX-train-0000.tar …``, ``root/PREFIX-validation-00.tar …``, each sample ``KEY.jpg`` (varied
    sizes), ``KEY.cls`` (its class number as text) and ``KEY.json``. `labels` overrides the ``.cls``
    bytes of the samples it names (None: no .cls at all), for bad shards."""
    import io
    import json
    import tarfile

    root.mkdir(parents=True, exist_ok=True)
    labels = labels or {}
    for split, count, width in (("train", train, 4), ("validation", val, 2)):
        for shard in range(-(-count // per_shard)):
            with tarfile.open(root / f"{prefix}-{split}-{shard:0{width}d}.tar", "w") as tar:
                for i in range(shard * per_shard, min(count, (shard + 1) * per_shard)):
                    key = f"{split}_{i:05d}"
                    label = (7 * i + 3) % classes
                    w, h = IMAGENET_SIZES[i % len(IMAGENET_SIZES)]
                    out = io.BytesIO()
                    Image.fromarray(_images(1, h, w, 3, 10_000 * len(split) + i)[0]).save(
                        out, format="JPEG", quality=85
                    )
                    _tar_member(tar, f"{key}.jpg", out.getvalue())
                    cls = labels.get(key, str(label).encode())
                    if cls is not None:
                        _tar_member(tar, f"{key}.cls", cls)
                    _tar_member(tar, f"{key}.json", json.dumps({"filename": f"{key}.JPEG", "label": label}).encode())
    return root


def write_hf_files(
    root: Path, train: int = 48, test: int = 16, files: int = 4, size: int = 16, classes: int = 4
) -> Path:
    """A local Hugging Face dataset split into several parquet files per split, as the hub's big datasets
    are (``root/data/train-0000k-of-0000N.parquet``): what streaming splits across ranks and workers."""
    import datasets

    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[f"c{i}" for i in range(classes)])}
    )
    (root / "data").mkdir(parents=True, exist_ok=True)
    for seed, (split, n) in enumerate([("train", train), ("test", test)]):
        per_file = -(-n // files)
        for k in range(files):
            rows = range(k * per_file, min(n, (k + 1) * per_file))
            images = [Image.fromarray(pixels) for pixels in _images(len(rows), size, size, 3, 100 * seed + k)]
            table = datasets.Dataset.from_dict(
                {"image": images, "label": [i % classes for i in rows]}, features=features
            )
            table.to_parquet(str(root / "data" / f"{split}-{k:05d}-of-{files:05d}.parquet"))
    return root
