"""A researcher's data set-up: CIFAR without a network or files is one line on data.root, so is the
Hugging Face overlay offline (a local copy is passed as ``--data.root``), and a copy of CIFAR in the
hub's layout is normalised with CIFAR's statistics."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path
from urllib.error import URLError

import pytest
import torch

from helpers import CONFIGS, ROOT, TEST_CONFIGS, error_field, run_dirs
from helpers.fakedata import _images
from mixer_lightning.cli import main
from mixer_lightning.data.sources.builtin import CIFAR10, CIFAR100

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
# Real CIFAR-10 in the Hugging Face layout: under $MIXER_DATA_ROOT, else <checkout>/../shared/data.
SHARED_CIFAR10 = Path(os.environ.get("MIXER_DATA_ROOT") or ROOT.parent / "shared" / "data") / "cifar10"


def write_hf_named(root: Path, names: list[str], size: int = 32, train: int = 24, test: int = 8) -> Path:
    """A local Hugging Face dataset (``data/{train,test}-*.parquet``) whose ClassLabel has `names`."""
    import datasets
    from PIL import Image

    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    (root / "data").mkdir(parents=True, exist_ok=True)
    for seed, (split, n) in enumerate([("train", train), ("test", test)]):
        images = [Image.fromarray(pixels) for pixels in _images(n, size, size, 3, seed)]
        table = datasets.Dataset.from_dict(
            {"img": images, "label": [i % len(names) for i in range(n)]}, features=features
        )
        table.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def fit_data_facts(root: Path, *extra: str) -> dict:
    """The data facts (mean, std, ...) the checkpoint of a one-step `mixer fit` on the hf dataset at `root` carries."""
    main(
        [
            "fit",
            "--config",
            TINY,
            "--data.dataset",
            "hf",
            "--data.root",
            str(root),
            "--data.num_workers",
            "0",
            "--model.net.patch_size",
            "8",
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "1",
            "--trainer.limit_val_batches",
            "1",
            *extra,
        ]
    )
    checkpoint = torch.load(run_dirs("digits_mixer")[-1] / "checkpoints" / "last.ckpt", weights_only=False)
    return checkpoint["data"]


# ----------------------------------------------------------------------------- CIFAR without a network


def test_cifar10_download_without_a_network_is_one_line_on_the_data_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_network(*args, **kwargs):
        raise URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", no_network)  # torchvision's download asks urlopen
    root = tmp_path / "fresh" / "data"
    args = ["fit", "--config", TINY, "--data.dataset", "cifar10", "--data.root", str(root), "--data.download", "true"]
    assert error_field(capsys, args) == "data.root"
    assert not Path("runs").exists()


def test_cifar10_missing_without_download_is_one_line_on_the_data_root(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--config", TINY, "--data.dataset", "cifar10", "--data.root", "nowhere", "--data.download", "false"]
    assert error_field(capsys, args) == "data.root"


# ----------------------------------------------------------------------------- the hf overlay


def test_the_hf_overlay_offline_fails_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hub id in huggingface_hub's offline mode (``HF_HUB_OFFLINE=1``, read when the libraries are
    imported: set here as they read it), with nothing in its cache: one line on data.root, at once."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(Path.cwd() / "empty_hf_home"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", Path.cwd() / "empty_hf_home" / "datasets")
    args = [
        "fit",
        "--config",
        str(CONFIGS / "cifar10_fig5_s_mixer.yaml"),
        "--config",
        str(CONFIGS / "data" / "cifar10_hf.yaml"),
    ]
    assert error_field(capsys, [*args, "--trainer.fast_dev_run", "true"]) == "data.root"


# ----------------------------------------------------------------------------- statistics of hub datasets


def test_a_hub_copy_of_cifar10_is_normalised_with_cifar_statistics(tmp_path: Path) -> None:
    names = "airplane automobile bird cat deer dog frog horse ship truck".split()  # uoft-cs/cifar10's ClassLabel
    root = write_hf_named(tmp_path / "my_cifar10", names)
    facts = fit_data_facts(root)
    assert tuple(facts["mean"]) == CIFAR10.info.mean and tuple(facts["std"]) == CIFAR10.info.std


def test_a_hub_copy_of_cifar100_is_normalised_with_cifar100_statistics(tmp_path: Path) -> None:
    root = write_hf_named(tmp_path / "my_cifar100", list(CIFAR100.known_classes), train=100, test=10)
    facts = fit_data_facts(root)
    assert tuple(facts["mean"]) == CIFAR100.info.mean and tuple(facts["std"]) == CIFAR100.info.std


def test_imagenet_statistics_on_small_hub_images_are_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_hf_named(tmp_path / "other", [f"kind{i}" for i in range(10)])
    facts = fit_data_facts(root)
    assert tuple(facts["mean"]) == (0.485, 0.456, 0.406)  # ImageNet's: nothing says these are CIFAR
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "ImageNet's mean/std" in line]
    assert notes == [
        f"data   normalised with ImageNet's mean/std: the hf dataset {str(root)!r} has 32 px colour images; "
        "set data.mean and data.std if its own differ"
    ]
    fit_data_facts(root, "--data.mean", "[0.5, 0.5, 0.5]", "--data.std", "[0.25, 0.25, 0.25]")
    assert "ImageNet's mean/std" not in capsys.readouterr().out  # given: nothing to say


@pytest.mark.skipif(not (SHARED_CIFAR10 / "data").is_dir(), reason="no real CIFAR-10 (set MIXER_DATA_ROOT)")
def test_the_real_hub_cifar10_gets_cifar_statistics_without_the_overlay(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/data.md's ``--data.dataset hf --data.root <CIFAR-10>``, on the real data: CIFAR's statistics."""
    facts = fit_data_facts(
        SHARED_CIFAR10, "--data.train_subset", "64", "--data.val_split", "64", "--data.pipeline", "pil"
    )
    assert tuple(facts["mean"]) == CIFAR10.info.mean and tuple(facts["std"]) == CIFAR10.info.std
    out = capsys.readouterr().out
    assert "ImageNet's mean/std" not in out and "data   hf (10 classes, 32×32×3)" in out


def test_the_hyper_parameters_are_the_arguments_as_given_flat_and_plain() -> None:
    """Configs and checkpoints write the data module's arguments flat (`data.arguments` groups them inside):
    every argument as given (``train_crop`` None: the dataset's default is not saved), restricted numbers as
    plain ones (checkpoints load with weights_only), tuples as lists (safe YAML), the resolved facts."""
    import inspect

    from jsonargparse.typing import PositiveInt

    from mixer_lightning.data import ImageDataModule

    data = ImageDataModule(batch_size=PositiveInt(16), mean=(0.5,), std=(0.25,), crop_scale=(0.5, 1.0))
    assert set(data.hparams) == set(inspect.signature(ImageDataModule).parameters)
    assert type(data.hparams["batch_size"]) is int and data.hparams["batch_size"] == 16
    assert data.hparams["mean"] == [0.5] and data.hparams["crop_scale"] == [0.5, 1.0]
    assert data.hparams["train_crop"] is None and data.augmentation.train_crop == "resize"  # digits: a resize
    assert (data.hparams["image_size"], data.hparams["num_classes"]) == (8, 10)
