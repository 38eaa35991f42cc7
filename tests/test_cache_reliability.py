"""The decoded-tensor cache (`mixer_lightning.data.cache`) through ``mixer fit``: a cache file that does not
hold exactly what decoding gives is decoded again and replaced, with one line; one that cannot be
written keeps the split in memory and says so; the key follows what the readers read (symbolic links)
and not where the cache lies; mixer replaces a cache file by rename, never in place."""

from __future__ import annotations

import argparse
import errno
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from PIL import Image, ImageOps

import mixer_lightning.data.cache as cache
from helpers.fakedata import write_hf, write_image_folder
from mixer_lightning.cli import main


def config(tmp_path: Path, dataset: str, root: Path, **data: object) -> Path:
    """A tiny MLP-Mixer on `dataset` at `root` through the tensor path: one batch of training."""
    path = tmp_path / f"{dataset}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 0,
                "trainer": {
                    "accelerator": "cpu",
                    "fast_dev_run": True,
                    "enable_progress_bar": False,
                    "enable_model_summary": False,
                    "logger": {
                        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                        "init_args": {"save_dir": str(tmp_path / "runs"), "name": dataset},
                    },
                },
                "model": {
                    "net": {
                        "class_path": "mixer_lightning.models.MLPMixer",
                        "init_args": {"patch_size": 8, "channels": 8, "gamma": 2, "num_blocks": 1},
                    },
                },
                "data": {
                    "class_path": "mixer_lightning.data.ImageDataModule",
                    "init_args": {
                        "dataset": dataset,
                        "root": str(root),
                        "val_split": 0,
                        "batch_size": 4,
                        "num_workers": 0,
                        "pipeline": "tensor",
                        **data,
                    },
                },
            }
        )
    )
    return path


def fit(path: Path, *extra: str) -> None:
    main(["fit", "--config", str(path), *extra])


def mixer_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("mixer:")]


# ------------------------------------------------------------------------------ damaged cache files


def entry_offset(path: Path, name: str) -> tuple[int, int]:
    """Where the bytes of the zip entry ending in `name` start in `path`, and how many there are."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(name))
    raw = path.read_bytes()
    start = info.header_offset
    name_length, extra_length = (
        int.from_bytes(raw[start + 26 : start + 28], "little"),
        int.from_bytes(raw[start + 28 : start + 30], "little"),
    )
    return start + 30 + name_length + extra_length, info.file_size


def resave(path: Path, obj: object) -> None:
    """torch.save `obj` over `path` by rename (as a user's copy would arrive; never in place)."""
    temporary = path.with_name("tampered.tmp")
    torch.save(obj, temporary)
    os.replace(temporary, path)


def rewrite(path: Path, change: Callable[[dict], object]) -> None:
    resave(path, change(torch.load(path, weights_only=True)))


def with_checksum(saved: dict) -> dict:
    """`saved` with a checksum and shape recomputed for its (changed) content: only the other checks can tell."""
    meta = {"shape": list(saved["images"].shape), "sha256": cache.checksum(saved["images"], saved["labels"])}
    return {**saved, "meta": meta}


def invert_pixels(path: Path) -> None:
    start, size = entry_offset(path, "data/0")  # the images' storage (the first tensor saved)
    raw = bytearray(path.read_bytes())
    for i in range(start + size // 4, start + size // 4 + 200):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


def flip_pickle_bit(path: Path) -> None:
    start, size = entry_offset(path, "data.pkl")
    raw = bytearray(path.read_bytes())
    raw[start + size // 2] ^= 0x04
    path.write_bytes(bytes(raw))


def compress(path: Path) -> None:
    """The same archive with every entry deflated (torch.load(mmap=True) would map the compressed bytes)."""
    temporary = path.with_name("deflated.tmp")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
    os.replace(temporary, path)


TAMPERINGS: dict[str, Callable[[Path], None]] = {
    "zeroed_images_labels_3": lambda p: rewrite(
        p, lambda s: {**s, "images": torch.zeros_like(s["images"]), "labels": torch.full_like(s["labels"], 3)}
    ),
    "zeroed_with_a_new_checksum": lambda p: rewrite(
        p, lambda s: with_checksum({**s, "images": torch.zeros_like(s["images"])})
    ),
    "pixels_inverted_in_the_file": invert_pixels,
    "bit_flipped_in_the_pickle": flip_pickle_bit,
    "extra_global": lambda p: rewrite(p, lambda s: {**s, "extra": argparse.Namespace()}),
    "labels_as_a_list": lambda p: rewrite(p, lambda s: {**s, "labels": s["labels"].tolist()}),
    "smaller_images": lambda p: rewrite(p, lambda s: with_checksum({**s, "images": s["images"][:, :, :8, :8].clone()})),
    "one_channel": lambda p: rewrite(p, lambda s: with_checksum({**s, "images": s["images"][:, :1].clone()})),
    "fewer_images_than_labels": lambda p: rewrite(p, lambda s: {**s, "images": s["images"][:6].clone()}),
    "label_99": lambda p: rewrite(p, lambda s: with_checksum({**s, "labels": torch.full_like(s["labels"], 99)})),
    "float_images": lambda p: rewrite(p, lambda s: {**s, "images": s["images"].float()}),
    "compressed_entries": compress,
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:1000]),
    "not_a_dict": lambda p: resave(p, [1, 2, 3]),
    "no_checksum": lambda p: rewrite(p, lambda s: {k: v for k, v in s.items() if k != "meta"}),
}


@pytest.mark.parametrize("tampering", TAMPERINGS)
def test_a_damaged_cache_is_decoded_again_and_replaced(
    tampering: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_hf(tmp_path / "hf", train=12, test=4, size=16)
    path = config(tmp_path, "hf", root)
    fit(path)
    (train,) = (root / ".mixer_cache").glob("hf-train-*.pt")
    original = torch.load(train, weights_only=True)
    TAMPERINGS[tampering](train)
    capsys.readouterr()

    fit(path)
    lines = mixer_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mixer: warning: data.cache_dir: the cache {str(train)!r} was damaged (")
    assert lines[0].endswith("); decoded again and replaced")
    replaced = torch.load(train, weights_only=True, mmap=True)
    assert torch.equal(replaced["images"], original["images"]) and torch.equal(replaced["labels"], original["labels"])
    assert sorted(p.name for p in (root / ".mixer_cache").iterdir()) == sorted(
        p.name for p in (root / ".mixer_cache").glob("hf-*.pt")
    )  # no temporary left
    fit(path)  # the replacement is read back without a word
    assert mixer_lines(capsys.readouterr().err) == []


# --------------------------------------------------------------------- a cache that cannot be written


def failing_save(kind: str) -> Callable:
    """torch.save that writes part of a cache file and then fails as a full disk does (`kind`)."""
    original = torch.save

    def save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        if not (isinstance(obj, dict) and "images" in obj):  # checkpoints and everything else: as they are
            return original(obj, f, *args, **kwargs)
        f.write(b"PK" + b"\0" * 4000)
        if kind == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 960 vs 854")

    return save


def filling(atomic_write: Callable) -> Callable:
    """atomic_write whose file fills the disk after 3,000 bytes: torch's zip writer, writing through it,
    fails with a RuntimeError of its own ("unexpected pos …")."""

    class Full:
        def __init__(self, f: Any) -> None:
            self.f, self.written = f, 0

        def write(self, data: bytes) -> int:
            if self.written + len(data) > 3000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self.f.write(data)

        def flush(self) -> None:
            self.f.flush()

    @contextmanager
    def write(target: Path, mode: str, field: str) -> Iterator[Full]:
        with atomic_write(target, mode, field) as f:
            yield Full(f)

    return write


@pytest.mark.parametrize("kind", ["oserror", "full_disk_under_torch", "runtime_error", "not_a_folder"])
def test_a_cache_that_cannot_be_written_keeps_the_splits_in_memory(
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = write_hf(tmp_path / "hf", train=12, test=4, size=16)
    cache_dir = tmp_path / "cache"
    if kind == "not_a_folder":
        cache_dir.write_text("a file where the cache folder would be")
        cache_dir = cache_dir / "sub"
    elif kind == "full_disk_under_torch":
        cache_dir.mkdir()
        monkeypatch.setattr(cache, "atomic_write", filling(cache.atomic_write))
    else:
        cache_dir.mkdir()
        monkeypatch.setattr(torch, "save", failing_save(kind))
    fit(config(tmp_path, "hf", root, cache_dir=str(cache_dir)))  # returns: the run went on
    out, err = capsys.readouterr()
    lines = mixer_lines(err)
    assert len(lines) == 1 and lines[0].startswith("mixer: warning: data.cache_dir: "), lines
    assert "kept in memory only" in lines[0]
    assert "cached in" not in out + err + caplog.text  # (Lightning's info lines go to its own handler)
    if kind != "not_a_folder":
        assert list(cache_dir.iterdir()) == []  # neither a half file nor a temporary


def test_temporaries_of_killed_cache_writers_are_removed(tmp_path: Path) -> None:
    """A writer killed mid-write leaves ``.NAME.tmp-PID`` (a whole copy of a split); the next write in
    that folder removes it."""
    root = write_hf(tmp_path / "hf", train=12, test=4, size=16)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    dead = cache_dir / f".hf-train-{'a' * 24}.pt.tmp-999999999"  # no such process
    dead.write_bytes(b"half a split")
    fit(config(tmp_path, "hf", root, cache_dir=str(cache_dir)))
    assert not dead.exists()
    assert len(list(cache_dir.glob("hf-*.pt"))) == 2


# ------------------------------------------------------------------------------------------ the key


def test_the_cache_follows_symlinks_as_the_readers_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A class folder that is a symbolic link, swapped for another with as many files: the readers read
    the new images, so the cache must not give the old ones."""
    a = write_image_folder(tmp_path / "A", classes=2, per_class=4, size=(32, 32))
    b = write_image_folder(tmp_path / "B", classes=2, per_class=4, size=(32, 32))
    for image in sorted((b / "train" / "n00000000").iterdir()):
        ImageOps.invert(Image.open(image).convert("RGB")).save(image, quality=90)
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "n00000000").symlink_to(a / "train" / "n00000000")
    os.symlink(a / "train" / "n00000001", data / "train" / "n00000001")
    os.symlink(a / "val", data / "val")
    path = config(tmp_path, "folder", data, image_size=32, train_crop="random_crop")
    fit(path)
    (data / "train" / "n00000000").unlink()
    (data / "train" / "n00000000").symlink_to(b / "train" / "n00000000")
    fit(path)

    newest = max((data / ".mixer_cache").glob("folder-train-*.pt"), key=lambda p: p.stat().st_mtime_ns)
    cached = torch.load(newest, weights_only=True)["images"]
    first = sorted((b / "train" / "n00000000").iterdir())[0]  # the first sample: class 0, B's first image
    expected = torch.from_numpy(np.array(Image.open(first).convert("RGB")).transpose(2, 0, 1).copy())
    assert torch.equal(cached[0], expected)
    assert len(list((data / ".mixer_cache").glob("folder-train-*.pt"))) == 2


def test_a_cache_dir_inside_the_data_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the cache lies is no part of its key: a cache folder inside the data folder is read back,
    not decoded again (and copied again) on every run."""
    root = write_hf(tmp_path / "hf", train=12, test=4, size=16)
    decoded: list[int] = []
    original = cache.decode
    monkeypatch.setattr(cache, "decode", lambda base, prefix: decoded.append(len(base)) or original(base, prefix))
    path = config(tmp_path, "hf", root, cache_dir=str(root / "data" / "mycache"))
    fit(path)
    fit(path)
    assert decoded == [12, 4]
    assert len(list((root / "data" / "mycache").glob("hf-*.pt"))) == 2


# ------------------------------------------------------------------------------------- mapped files


def test_a_cache_file_is_replaced_by_rename_never_in_place(tmp_path: Path) -> None:
    """A run maps its cache file; a later run that replaces it (damaged, say) writes a new file and renames
    it over the old one, so the mapping of the first run keeps its pages (truncating a mapped file in place
    would kill that run with SIGBUS: docs/reliability.md)."""
    root = write_hf(tmp_path / "hf", train=12, test=4, size=16)
    path = config(tmp_path, "hf", root)
    fit(path)
    (train,) = (root / ".mixer_cache").glob("hf-train-*.pt")
    mapped = torch.load(train, weights_only=True, mmap=True)  # what a running run holds
    copy = mapped["images"].clone()
    inode = train.stat().st_ino
    TAMPERINGS["no_checksum"](train)
    fit(path)  # replaces the damaged file
    assert train.stat().st_ino != inode
    assert torch.equal(mapped["images"], copy)
