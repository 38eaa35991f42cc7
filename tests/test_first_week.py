"""A researcher's first week (issue 46), through the real `mixer` command: small images in a folder dataset are
CIFAR-like (their own size, pad-and-crop, no evaluation crop), a run validated on the test split says so and
names last.ckpt for its test, plain progress lines come early in a slow epoch, `mixer predict` reads a folder in
path order, and a folder dataset's missing class folders are quoted whole."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from helpers import TEST_CONFIGS, field_of, one_line_error, read_json, run_dirs
from helpers.fakedata import write_image_folder
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
# One epoch of 8 px patches (a 224 px upscale, as before the fix, stays affordable).
ONE_EPOCH = [
    "--trainer.max_epochs",
    "1",
    "--data.num_workers",
    "0",
    "--data.batch_size",
    "4",
    "--model.net.patch_size",
    "8",
]


def header_line(out: str, prefix: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(prefix))


@pytest.mark.parametrize("given", [[], ["--data.image_size", "32"]])
def test_a_folder_of_32px_images_trains_at_32px_as_cifar(given: list[str], tmp_path: Path, capsys) -> None:
    """docs/notes/data-api.md: pad-and-crop training and a plain resize for evaluation at <= 96 px, the image
    size the data's own; a folder of 32 px images had ImageNet's random-resized crop and 87.5 % centre crop,
    and without data.image_size was upscaled to 224."""
    root = write_image_folder(tmp_path / "small", classes=3, per_class=4, size=(32, 32))
    main(["fit", "--config", TINY, "--data.dataset", "folder", "--data.root", str(root), *ONE_EPOCH, *given])
    data = header_line(capsys.readouterr().out, "data   ")
    assert "32×32×3" in data and data.endswith("crops: train random_crop, eval resize")
    (run,) = run_dirs("digits_mixer")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["data"]["image_size"] == 32 and checkpoint["data"]["eval_crop"] == "resize"
    assert yaml.safe_load((run / "hparams.yaml").read_text())["image_size"] == 32


def test_a_folder_of_large_images_keeps_the_imagenet_crops(tmp_path: Path, capsys) -> None:
    root = write_image_folder(tmp_path / "large", classes=2, per_class=2, size=(128, 128))
    main(["fit", "--config", TINY, "--data.dataset", "folder", "--data.root", str(root), *ONE_EPOCH,
          "--data.image_size", "32"])  # fmt: skip
    assert header_line(capsys.readouterr().out, "data   ").endswith("train random_resized_crop, eval resmall_crop")


def test_a_folder_of_images_of_several_sides_needs_an_image_size(tmp_path: Path, capsys) -> None:
    root = write_image_folder(tmp_path / "wide", classes=2, per_class=2, size=(48, 40))
    line = one_line_error(capsys, ["fit", "--config", TINY, "--data.dataset", "folder", "--data.root", str(root)])
    assert field_of(line) == "data.image_size"


def test_missing_class_folders_are_quoted_whole(tmp_path: Path, capsys) -> None:
    """The message quoted ``'/x/nope'/train and /val``: each folder is one quoted path."""
    root = tmp_path / "nope"
    line = one_line_error(capsys, ["fit", "--config", TINY, "--data.dataset", "folder", "--data.root", str(root)])
    assert field_of(line) == "data.root"
    assert repr(str((root / "train").resolve())) in line and repr(str((root / "val").resolve())) in line


def test_a_run_validated_on_the_test_split_says_so_and_names_last_ckpt(tmp_path: Path, capsys) -> None:
    """val_split 0 on a dataset without a validation split (the papers' configs): best.ckpt is chosen on the
    test images, so the run says it as it starts and names last.ckpt as the checkpoint to test."""
    main(["fit", "--config", TINY, "--data.val_split", "0", "--trainer.max_epochs", "1"])
    out = capsys.readouterr().out
    assert any(line.startswith("val    ") for line in out.splitlines())
    (run,) = run_dirs("digits_mixer")
    summary = read_json(run / "fit_summary.json")
    assert summary["validated_on"] == "test" and summary["test_checkpoint"] == "checkpoints/last.ckpt"
    assert f"mixer test --ckpt_path {run / 'checkpoints' / 'last.ckpt'}" in out
    main(["test", "--ckpt_path", str(run / summary["test_checkpoint"])])
    assert read_json(run / "test_metrics.json")["checkpoint"]["path"] == "checkpoints/last.ckpt"


def test_a_run_with_a_held_out_validation_split_tests_best_ckpt(tmp_path: Path, capsys) -> None:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    out = capsys.readouterr().out
    assert not any(line.startswith("val    ") for line in out.splitlines())
    summary = read_json(run_dirs("digits_mixer")[0] / "fit_summary.json")
    assert summary["validated_on"] == "val" and summary["test_checkpoint"] == "checkpoints/best.ckpt"


def test_plain_progress_lines_come_by_time_in_a_slow_epoch(tmp_path: Path, capsys) -> None:
    """Lines came every 50 steps only: a CPU run of slow steps said nothing for many minutes. A line is also
    due once `progress.every_n_seconds` have passed (here: at once, so every step has one)."""
    lines = ["--trainer.enable_progress_bar", "true", "--progress.mode", "lines"]
    main(["fit", "--config", TINY, *lines, "--progress.every_n_seconds", "1e-9"])  # 2 epochs × 4 steps
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ") and " step " in line]
    assert [line.split()[3] for line in steps] == [f"{n}/8" for n in range(1, 9)]


def test_predict_reads_a_folder_in_path_order(trained, tmp_path: Path) -> None:
    """docs/usage.md: a folder read at any depth, sorted; the files of a folder came before its sub-folders'."""
    photos = tmp_path / "photos"
    for name in ("b.png", "a/z.png", "a/b/x.png", "a0.png"):
        (photos / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 8), 128, np.uint8), "L").save(photos / name)
    main(["predict", "--ckpt_path", trained("mixer"), "--data.predict_root", "photos",
          "--prediction_writer.output", "out.csv"])  # fmt: skip
    with open(tmp_path / "out.csv", newline="") as f:
        files = [row["file"] for row in csv.DictReader(f)]
    assert files == ["a/b/x.png", "a/z.png", "a0.png", "b.png"]
