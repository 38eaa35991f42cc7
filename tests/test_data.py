"""`ImageDataModule`: splits, transforms, linked facts and the on-disk formats."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import TEST_CONFIGS, error_field
from helpers.fakedata import WRITERS, patch_torchvision_checks, write_cifar10, write_hf, write_image_folder, write_stl10
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule
from mixer_lightning.errors import ConfigError

# Real CIFAR-10 in the Hugging Face layout: under $MIXER_DATA_ROOT, else <checkout>/../shared/data.
DATA_ROOT = Path(os.environ.get("MIXER_DATA_ROOT") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
SHARED_CIFAR10 = DATA_ROOT / "cifar10"


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


def field_of_error(make, *args, **kwargs) -> str:
    """The field of the `ConfigError` that ``make(*args, **kwargs)`` raises."""
    with pytest.raises(ConfigError) as error:
        make(*args, **kwargs)
    return error.value.field


def test_bad_data_arguments() -> None:
    assert field_of_error(ImageDataModule, "imagenet22k") == "data.dataset"
    assert field_of_error(ImageDataModule("digits", val_split=5000).setup, "fit") == "data.val_split"


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
    assert field_of_error(data.setup, "fit") == "data.root"


# --- every on-disk format, the facts known at construction, subsets and splits -----------------------

FORMATS = {  # dataset: (num_classes, image_size, in_chans, train, val, test) of the tests/helpers/fakedata.py fakes
    "cifar100": (100, 32, 3, 90, 10, 20),
    "stl10": (10, 96, 3, 27, 3, 20),
    "mnist": (10, 28, 1, 54, 6, 20),
    "imagenet": (3, 224, 3, 12, 12, 12),
    "folder": (3, 48, 3, 12, 12, 12),  # its images' side (48 × 40: given, as they are not square)
    "hf": (10, 32, 3, 36, 4, 20),
}


@pytest.mark.parametrize("name", FORMATS)
def test_every_dataset_reads_its_on_disk_format(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_torchvision_checks(monkeypatch)
    root = WRITERS[name](tmp_path / name)
    classes, size, chans, *lengths = FORMATS[name]
    given = {"image_size": size} if name == "folder" else {}
    data = ImageDataModule(name, root=str(root), download=False, batch_size=4, num_workers=0, **given)
    assert (data.num_classes, data.image_size, data.in_chans) == (classes, size, chans)
    data.setup()
    assert [len(data.train_set), len(data.val_set), len(data.test_set)] == lengths
    for loader in (data.train_dataloader(), data.val_dataloader(), data.test_dataloader()):
        x, y = next(iter(loader))
        # (evaluation batches: 4 × batch_size on the tensor path, which reads them straight from the tensor)
        assert x.shape[1:] == (chans, size, size) and len(x) == min(loader.batch_size or 4, len(loader.dataset))
        assert len(y) == len(x)
        assert x.dtype == torch.float32 and y.dtype == torch.long
        assert int(y.min()) >= 0 and int(y.max()) < classes


def test_stl10_resized_as_in_the_paper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_torchvision_checks(monkeypatch)
    root = str(write_stl10(tmp_path))
    for size in (32, 90):  # Hayase & Karakida C.4 (32) and D.6 (90)
        data = ImageDataModule("stl10", root=root, download=False, image_size=size, batch_size=4, num_workers=0)
        assert data.image_size == size
        data.setup()
        assert next(iter(data.train_dataloader()))[0].shape == (4, 3, size, size)
        assert next(iter(data.test_dataloader()))[0].shape == (4 * 4, 3, size, size)  # evaluation: 4 × batch_size


def test_folder_facts_come_from_folder_names_without_opening_an_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_image_folder(tmp_path / "imagenet", classes=5, per_class=2)
    monkeypatch.setattr("PIL.Image.open", lambda *a, **k: pytest.fail("an image was opened at construction"))
    data = ImageDataModule("imagenet", root=str(root), download=False)
    assert (data.num_classes, data.image_size, data.in_chans) == (5, 224, 3)


def test_hf_facts_decode_one_image_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from mixer_lightning.data.sources import huggingface

    root = write_hf(tmp_path / "hf", train=30, test=10)
    decoded = []
    for module, name in ((datasets.Image, "decode_example"), (huggingface, "row_image")):  # datasets' and ours
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, original=original, **k: decoded.append(1) or original(*a, **k))
    data = ImageDataModule("hf", root=str(root))
    assert (data.num_classes, data.image_size, data.in_chans) == (10, 32, 3) and len(decoded) == 1


def test_hf_columns_labels_and_mistakes(tmp_path: Path) -> None:
    import datasets

    def write(path: Path, features: dict, columns: dict, size: tuple[int, int] = (16, 16)) -> str:
        (path / "data").mkdir(parents=True)
        images = [Image.new("RGB", size, (i * 20, 0, 0)) for i in range(6)]
        table = datasets.Dataset.from_dict(
            {**columns, features["image"]: images},
            features=datasets.Features(
                {features["image"]: datasets.Image(), **{k: v for k, v in features.items() if k != "image"}}
            ),
        )
        table.to_parquet(str(path / "data" / "train-00000-of-00001.parquet"))
        table.to_parquet(str(path / "data" / "test-00000-of-00001.parquet"))
        return str(path)

    # CIFAR-100's layout: `img` + `fine_label` (ClassLabel) next to `coarse_label`.
    cifar100 = write(
        tmp_path / "c100",
        {
            "image": "img",
            "fine_label": datasets.ClassLabel(num_classes=100),
            "coarse_label": datasets.ClassLabel(num_classes=20),
        },
        {"fine_label": [0, 1, 2, 3, 4, 99], "coarse_label": [0] * 6},
    )
    data = ImageDataModule("hf", root=cifar100)
    assert (data.num_classes, data.image_size) == (100, 16)
    assert ImageDataModule("hf", root=cifar100, label_column="coarse_label").num_classes == 20
    # Plain integer labels: the classes are counted.
    plain = write(
        tmp_path / "plain", {"image": "image", "label": datasets.Value("int64")}, {"label": [0, 1, 2, 6, 1, 0]}
    )
    assert ImageDataModule("hf", root=plain).num_classes == 7
    # Images that are not square: the side must be given.
    wide = write(
        tmp_path / "wide", {"image": "image", "label": datasets.Value("int64")}, {"label": [0, 1] * 3}, (24, 16)
    )
    assert field_of_error(ImageDataModule, "hf", root=wide) == "data.image_size"
    assert ImageDataModule("hf", root=wide, image_size=16, train_crop="random_resized_crop").image_size == 16
    assert field_of_error(ImageDataModule, "hf", root=plain, label_column="nope") == "data.label_column"
    assert field_of_error(ImageDataModule, "hf", root=str(tmp_path / "missing")) == "data.root"
    assert field_of_error(ImageDataModule, "cifar10", image_column="img") == "data.image_column"
    # Labels that are not class numbers 0..num_classes-1 stop the run before it trains on them.
    texts = write(tmp_path / "texts", {"image": "image", "label": datasets.Value("string")}, {"label": ["a", "b"] * 3})
    assert field_of_error(ImageDataModule, "hf", root=texts) == "data.label_column"
    negative = write(
        tmp_path / "negative", {"image": "image", "label": datasets.Value("int64")}, {"label": [0, 1, -1, 2, 1, 0]}
    )
    assert field_of_error(ImageDataModule, "hf", root=negative) == "data.label_column"


def test_train_subset_and_validation_on_the_test_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_torchvision_checks(monkeypatch)
    root = str(write_cifar10(tmp_path))  # 100 training, 20 test images

    def split(**kwargs) -> tuple[list[int], ImageDataModule]:
        data = ImageDataModule("cifar10", root=root, download=False, num_workers=0, **kwargs)
        data.setup("fit")
        return data.train_set.indices, data

    full, _ = split(val_split=10)
    half, _ = split(val_split=10, train_subset=0.5)
    assert len(half) == 45 and set(half) <= set(full)
    assert split(val_split=10, train_subset=0.5)[0] == half  # fixed by split_seed, not the training seed
    assert split(val_split=10, train_subset=0.5, split_seed=1)[0] != half
    assert len(split(val_split=10, train_subset=20)[0]) == 20
    # val_split 0: every training image trains, validation reads the test split.
    indices, data = split(val_split=0)
    assert len(indices) == 100 and len(data.val_set) == 20


@pytest.mark.parametrize(
    "flag, value",
    [
        ("batch_size", "0"),
        ("num_workers", "-1"),
        ("val_split", "-0.1"),
        ("interpolation", "cubic"),
        ("random_erasing", "1.5"),
        ("crop_scale", "[0.5, 1.5]"),
        ("eval_crop_pct", "1.5"),
        ("mixup_prob", "2"),
        ("mean", "[0.5, 0.5]"),  # digits are grey: one value
        ("hflip", "0.5"),  # digits are tensors: no image augmentation
    ],
)
def test_bad_data_flags_name_their_field(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), f"--data.{flag}", value]
    assert error_field(capsys, args) == f"data.{flag}"


def test_hf_cifar10_through_the_command_line(tmp_path: Path) -> None:
    """``--data.dataset hf --data.root <the real CIFAR-10 in the hub's layout>``, one batch each way."""
    if not SHARED_CIFAR10.is_dir():
        pytest.skip(f"no real CIFAR-10 under {SHARED_CIFAR10} (set MIXER_DATA_ROOT)")
    main(
        [
            "fit",
            "--config",
            str(TEST_CONFIGS / "digits_mixer.yaml"),
            "--data.dataset",
            "hf",
            "--data.root",
            str(SHARED_CIFAR10),
            "--data.num_workers",
            "0",
            "--data.auto_augment",
            "original",
            "--model.net.patch_size",
            "4",
            "--trainer.fast_dev_run",
            "true",
        ]
    )
