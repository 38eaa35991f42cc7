"""`ImageDataModule`: splits, transforms, linked facts and the on-disk formats."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from mixer_lightning.data import ImageDataModule
from mixer_lightning.errors import ConfigError


def test_digits_splits_are_fixed_disjoint_and_complete() -> None:
    data = ImageDataModule("digits", val_split=0.1, batch_size=16)
    assert (data.num_classes, data.image_size, data.in_chans) == (10, 8, 1)
    data.setup()
    sizes = len(data.train_set), len(data.val_set), len(data.test_set)
    assert sum(sizes) == 1797 and sizes[2] == 359 and sizes[1] == round(0.1 * 1438)

    def images(dataset) -> set[bytes]:
        return {dataset[i][0].numpy().tobytes() + bytes([dataset[i][1]]) for i in range(len(dataset))}

    train, val, test = images(data.train_set), images(data.val_set), images(data.test_set)
    assert not (val & test) and len(train | val | test) >= 1790  # a few digits are exact duplicates
    again = ImageDataModule("digits", val_split=0.1)
    again.setup()
    assert images(again.val_set) == val  # the split does not depend on the training seed


def test_normalised_batches() -> None:
    data = ImageDataModule("digits", batch_size=64, val_split=100)
    data.setup("fit")
    assert len(data.val_set) == 100
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == (64, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.long
    assert abs(float(x.mean())) < 0.2 and 0.8 < float(x.std()) < 1.2


def test_bad_data_arguments() -> None:
    with pytest.raises(ConfigError, match="data.dataset: unknown dataset 'imagenet22k'"):
        ImageDataModule("imagenet22k")
    data = ImageDataModule("digits", val_split=5000)
    with pytest.raises(ConfigError, match="data.val_split"):
        data.setup("fit")


def write_fake_cifar10(root: Path, per_batch: int = 20) -> None:
    """A tiny CIFAR-10 in torchvision's on-disk format (cifar-10-batches-py pickles)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        batch = {
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "labels": [int(v) for v in rng.integers(0, 10, per_batch)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)


def test_cifar10_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_fake_cifar10(tmp_path / "data")
    # torchvision checks the md5 sums of the real files: patched here, in the test only.
    monkeypatch.setattr("torchvision.datasets.cifar.check_integrity", lambda *args, **kwargs: True)
    data = ImageDataModule("cifar10", root=str(tmp_path / "data"), download=False, batch_size=8, num_workers=0)
    assert (data.num_classes, data.image_size, data.in_chans) == (10, 32, 3)
    data.setup()
    assert (len(data.train_set), len(data.val_set), len(data.test_set)) == (90, 10, 20)
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == (8, 3, 32, 32) and y.shape == (8,)


def test_missing_cifar10_without_download_says_how_to_get_it(tmp_path: Path) -> None:
    data = ImageDataModule("cifar10", root=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(ConfigError, match="data.root: no cifar10 data under .*set data.download: true"):
        data.setup("fit")
