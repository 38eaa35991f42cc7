"""High-bit-depth images: a 16-bit image is read as its top 8 bits (PIL's ``convert``
clips it to nearly white), by `mixer predict` and by folder datasets on both data paths; an image whose
range is unknown (32-bit integers, floats) is refused in one line naming the file."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_cache_reliability import config

from helpers import field_of, one_line_error, run_dirs
from mixer_lightning.cli import main


def sixteen_bit(eight: np.ndarray, seed: int) -> np.ndarray:
    """A 16-bit image whose top 8 bits are `eight` (the low 8 random: they must not matter)."""
    low = np.random.default_rng(seed).integers(0, 256, eight.shape)
    return (eight.astype(np.uint16) << 8) | low.astype(np.uint16)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_predict_reads_a_16_bit_image_as_its_8_bit_rendering(
    trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixer_lightning.data.sources.builtin import Digits

    best = trained("mixer")  # digits: grey 8×8
    digit = (Digits("data", False).load("test").tensors[0][0, 0].numpy() * 255).round().astype(np.uint8)
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(digit, "L").save(photos / "a_8bit.png")
    Image.fromarray(sixteen_bit(digit, 0)).save(photos / "b_16bit.png")  # mode I;16
    Image.fromarray(sixteen_bit(digit, 1).astype(">u2")).save(photos / "c_16bit_big_endian.tif")  # mode I;16B
    assert [Image.open(photos / name).mode for name in ("b_16bit.png", "c_16bit_big_endian.tif")] == ["I;16", "I;16B"]

    args = ["predict", "--ckpt_path", best, "--data.predict_root", "photos", "--prediction_writer.topk", "10"]
    main([*args, "--prediction_writer.output", "out.csv"])
    rows = read_csv(tmp_path / "out.csv")
    assert [row.pop("file") for row in rows] == ["a_8bit.png", "b_16bit.png", "c_16bit_big_endian.tif"]
    assert rows[1] == rows[0] and rows[2] == rows[0]  # every class's probability, to 6 digits

    # 32-bit integers: no range to scale from; refused, naming the file.
    Image.fromarray(sixteen_bit(digit, 2).astype(np.int32)).save(photos / "d_32bit.tif")
    capsys.readouterr()
    line = one_line_error(capsys, [*args, "--prediction_writer.output", "again.csv"])
    assert field_of(line) == "data.predict_root" and "d_32bit.tif" in line  # the file named
    assert not (tmp_path / "again.csv").exists()


def image_folders(tmp_path: Path) -> tuple[Path, Path]:
    """The same images twice, as 8-bit grey PNGs and as 16-bit PNGs whose top 8 bits are those."""
    rng = np.random.default_rng(0)
    roots = tmp_path / "d8", tmp_path / "d16"
    for split in ("train", "val"):
        for c in range(2):
            for i in range(4):
                eight = rng.integers(0, 256, (16, 16)).astype(np.uint8)
                images = Image.fromarray(eight, "L"), Image.fromarray(sixteen_bit(eight, i))
                for root, image in zip(roots, images, strict=True):
                    folder = root / split / f"class{c}"
                    folder.mkdir(parents=True, exist_ok=True)
                    image.save(folder / f"{i}.png")
    return roots


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_folder_of_16_bit_images_trains_as_its_8_bit_rendering(pipeline: str, tmp_path: Path) -> None:
    """One training step on the 16-bit folder gives the weights of one on the 8-bit copies, on either path."""
    d8, d16 = image_folders(tmp_path)
    states = []
    for root in (d8, d16):
        path = config(tmp_path, "folder", root, image_size=16, train_crop="random_crop", pipeline=pipeline)
        args = ["--trainer.fast_dev_run", "false", "--trainer.max_epochs", "1", "--trainer.deterministic", "true"]
        args += ["--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]
        main(["fit", "--config", str(path), *args, "--trainer.logger.init_args.name", root.name])
        (run,) = run_dirs(root.name)
        states.append(torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"])
    assert states[0].keys() == states[1].keys()
    for name in states[0]:
        assert torch.equal(states[0][name], states[1][name]), name


def test_a_folder_image_of_unknown_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d8, _ = image_folders(tmp_path)
    bad = d8 / "train" / "class1" / "float.tif"
    Image.fromarray(np.zeros((16, 16), np.float32)).save(bad)  # mode F
    path = config(tmp_path, "folder", d8, image_size=16, train_crop="random_crop", pipeline="pil")
    line = one_line_error(capsys, ["fit", "--config", str(path)])
    assert field_of(line) == "data.root" and str(bad) in line  # the file named
