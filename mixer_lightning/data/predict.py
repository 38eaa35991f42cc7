"""Prediction on image files (a folder, at any depth, or a list of files), without the training data.

A checkpoint written by ``mixer fit`` carries the facts of its data (`data_facts`, written by
`mixer_lightning.callbacks.DataFacts` under the checkpoint's ``data`` key): the classes and their
names, the image size and channels, the normalisation and the evaluation crop (Mixer supplementary
C), the input permutation (Mixer Sec. 3.4). `PredictionData` is a data module made of those facts
alone, so ``mixer predict --ckpt_path best.ckpt --data.predict_root photos/`` needs no data config and
no training data; `ImageDataModule` serves the same files through `files_loader` when a config gives
it a ``predict_root``.

Each image is read with PIL, converted to the model's channels (RGB or grey) and pre-processed as the
evaluation images of training were (`prediction_transform`); a batch is (images, file indices).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from mixer_lightning.data.pil_path import to_mode
from mixer_lightning.data.sampling import worker_options
from mixer_lightning.data.transforms import INTERPOLATIONS, EvalCrop, InputPermutation, PermutationMode, eval_transform
from mixer_lightning.errors import ConfigError, require

special_file_kind = lambda path: None  # TEMPORARY (house-lead): H4 drops the FIFO guard

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# The facts a checkpoint carries about its data (the checkpoint's ``data`` entry), all plain values.
FACT_KEYS = (
    "dataset",
    "num_classes",
    "class_names",
    "image_size",
    "in_chans",
    "mean",
    "std",
    "eval_crop",
    "eval_crop_pct",
    "interpolation",
    "input_permutation",
    "permutation_patch_size",
    "permutation_seed",
)


# First characters that make a spreadsheet read a cell as a formula (OWASP "CSV Injection"), and their
# full-width forms, which some spreadsheets read as formulas too.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_text(text: str) -> str:
    """`text` (a file or class name) as a CSV cell no spreadsheet runs: prefixed with ``'`` when it starts
    like a formula (``=1+1.png`` → ``'=1+1.png``), as OWASP advises; any other text as it is."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def list_images(root: str | Sequence[str], field: str = "data.predict_root") -> tuple[list[str], list[str]]:
    """The image files of `root` (a folder, read at any depth in sorted order, a file, or a list of
    either) and their names as the CSV shows them (relative to a folder given). Errors name `field`."""
    from mixer_lightning.data.sources.folder import image_files

    entries = [root] if isinstance(root, (str, os.PathLike)) else list(root)
    require(bool(entries), field, "no folder or file given", "give a folder of images or a list of image files")
    paths: list[str] = []
    names: list[str] = []
    for entry in map(str, entries):
        path = Path(entry)
        kind = special_file_kind(path)
        if kind is not None:  # /dev/zero would be read forever, a FIFO would wait for a writer
            raise ConfigError(
                field, f"{entry!r} is {kind}, not an image file or a folder", "give a folder of images or image files"
            )
        if os.path.isdir(path):  # os.path: a name over 255 bytes is no folder (pathlib raises ENAMETOOLONG)
            try:
                found = image_files(path, IMAGE_EXTENSIONS)
            except ConfigError as error:
                raise ConfigError(field, error.problem, error.fix) from None
            paths += found
            names += [os.path.relpath(file, path) for file in found]
        elif os.path.isfile(path):
            paths.append(entry)
            names.append(entry)
        else:
            raise ConfigError(field, f"no such file or folder {entry!r}", "give a folder of images or image files")
    require(
        bool(paths),
        field,
        f"{entries[0]!r} holds no images ({', '.join(IMAGE_EXTENSIONS)})",
        "give a folder that holds images",
    )
    return paths, names


class ImageFiles(Dataset):
    """(image, index) for each file of `paths`: read with PIL, converted to `mode` (``RGB`` or ``L``),
    then `transform`. An unreadable file is a one-line error naming it."""

    def __init__(self, paths: Sequence[str], names: Sequence[str], transform: Callable, mode: str):
        self.paths, self.names, self.transform, self.mode = list(paths), list(names), transform, mode

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path = self.paths[index]
        try:
            with Image.open(path) as image:
                image = to_mode(image, self.mode)  # 16-bit images scaled to 8 bits, not clipped
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(
                "data.predict_root", f"cannot read image {path!r} ({reason})", "delete or replace that file"
            ) from None
        return self.transform(image), index


def prediction_transform(facts: dict[str, Any]) -> Callable:
    """PIL image → the model's input: the evaluation pre-processing of `facts` (resized whatever the
    file's size), then the input permutation the model was trained with, if any."""
    size = int(facts["image_size"])
    # native size 0: the files have any size, so the "resize" crop always resizes to size × size.
    steps: list[Callable] = [
        eval_transform(
            size,
            0,
            facts["eval_crop"],
            float(facts["eval_crop_pct"]),
            facts["interpolation"],
            facts["mean"],
            facts["std"],
        )
    ]
    if facts.get("input_permutation", "none") not in (None, "none"):
        steps.append(
            InputPermutation(
                facts["input_permutation"], size, int(facts["permutation_patch_size"]), int(facts["permutation_seed"])
            )
        )
    return steps[0] if len(steps) == 1 else T.Compose(steps)


def class_names(datamodule: Any) -> list[str]:
    """The names of the classes of `datamodule` (an `ImageDataModule`): a folder dataset's folder
    names, a Hugging Face dataset's ClassLabel names, a torchvision dataset's ``classes``; the class
    numbers as text where the dataset names none (the digits: 0..9)."""
    num_classes = int(datamodule.num_classes)
    names = getattr(datamodule, "class_names", None)
    source = getattr(datamodule, "source", None)
    if names is None:
        names = getattr(source, "classes", None)  # folder, imagenet
    if names is None and getattr(source, "splits", None) is not None:  # hf: the label's ClassLabel feature
        try:
            feature = source.splits[source.split_names["train"]].features[source.label_column]
            names = getattr(feature, "names", None)
        except (KeyError, AttributeError, TypeError):
            names = None
    for role in ("train_set", "val_set", "test_set"):  # torchvision datasets already read
        if names is None:
            names = getattr(getattr(getattr(datamodule, role, None), "base", None), "classes", None)
    if names is None and source is not None and hasattr(source, "_open"):  # torchvision, on the tensor path
        try:
            names = getattr(source.load("test"), "classes", None)
        except ConfigError:
            names = None
    names = [str(name) for name in names] if names is not None else None
    return names if names is not None and len(names) == num_classes else [str(i) for i in range(num_classes)]


def data_facts(datamodule: Any) -> dict[str, Any] | None:
    """The facts of `datamodule` a checkpoint carries (`FACT_KEYS`), as plain values; None for a data
    module that exposes none of them."""
    if isinstance(datamodule, PredictionData):
        return dict(datamodule.facts)
    needed = ("num_classes", "image_size", "in_chans", "mean", "std")
    if datamodule is None or not all(hasattr(datamodule, name) for name in needed):
        return None
    hparams = getattr(datamodule, "hparams", {}) or {}
    return {
        "dataset": str(getattr(datamodule, "dataset", type(datamodule).__name__)),
        "num_classes": int(datamodule.num_classes),
        "class_names": class_names(datamodule),
        "image_size": int(datamodule.image_size),
        "in_chans": int(datamodule.in_chans),
        "mean": [float(v) for v in datamodule.mean],
        "std": [float(v) for v in datamodule.std],
        "eval_crop": str(getattr(datamodule, "eval_crop", "resize")),
        "eval_crop_pct": float(getattr(datamodule, "eval_crop_pct", 0.875)),
        "interpolation": str(getattr(datamodule, "interpolation", "bilinear")),
        "input_permutation": str(hparams.get("input_permutation", "none")),
        "permutation_patch_size": int(hparams.get("permutation_patch_size", 16)),
        "permutation_seed": int(hparams.get("permutation_seed", 0)),
    }


def files_dataset(facts: dict[str, Any], root: str | Sequence[str]) -> ImageFiles:
    paths, names = list_images(root)
    return ImageFiles(paths, names, prediction_transform(facts), "L" if int(facts["in_chans"]) == 1 else "RGB")


def files_loader(datamodule: Any, root: str | Sequence[str]) -> DataLoader:
    """The predict loader of an `ImageDataModule` given ``predict_root``: its files, pre-processed as its
    evaluation images (kept as ``datamodule.predict_set`` for the prediction writer)."""
    facts = data_facts(datamodule)
    assert facts is not None
    datamodule.predict_set = files_dataset(facts, root)
    workers = getattr(datamodule, "num_workers", 0) or 0
    return DataLoader(
        datamodule.predict_set,
        batch_size=datamodule.eval_batch_size,
        shuffle=False,
        num_workers=workers,
        pin_memory=bool(getattr(datamodule, "pin_memory", False)),
        **worker_options(workers, getattr(datamodule, "trainer", None)),
    )


class PredictionData(LightningDataModule):
    """Image files to predict, pre-processed as a checkpoint's evaluation images (module docstring).

    ``mixer predict --ckpt_path CKPT --data.predict_root DIR`` (no ``--config``) fills every argument
    but ``predict_root`` from the checkpoint's ``data`` entry; any of them may be given to differ.

    Args:
        predict_root: a folder of images (read at any depth), an image file, or a list of either.
        num_classes: classes of the model.
        image_size: side of the square inputs.
        in_chans: 1 (grey) or 3 (RGB).
        mean: normalisation mean, one per channel.
        std: normalisation standard deviation, one per channel.
        class_names: the name of each class (default: the class numbers).
        eval_crop: ``resize``, ``resize_crop`` or ``resmall_crop`` (`ImageDataModule`'s).
        eval_crop_pct: the crop's s / resize side.
        interpolation: resize interpolation.
        input_permutation: ``none``, ``patch_pixel`` or ``global`` (Mixer Sec. 3.4).
        permutation_patch_size: patch side of ``patch_pixel``.
        permutation_seed: seed of the permutation.
        dataset: the name of the data the model was trained on (shown, not read).
        batch_size: images per batch.
        num_workers: DataLoader worker processes (default: min(8, CPUs)).
    """

    def __init__(
        self,
        predict_root: str | list[str],
        num_classes: int,
        image_size: int,
        in_chans: int = 3,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        class_names: list[str] | None = None,
        eval_crop: EvalCrop = "resize",
        eval_crop_pct: float = 0.875,
        interpolation: str = "bilinear",
        input_permutation: PermutationMode = "none",
        permutation_patch_size: int = 16,
        permutation_seed: int = 0,
        dataset: str = "images",
        batch_size: int = 64,
        num_workers: int | None = None,
    ):
        super().__init__()
        require(num_classes > 0, "data.num_classes", f"must be positive, got {num_classes}")
        require(image_size > 0, "data.image_size", f"must be positive, got {image_size}")
        require(in_chans in (1, 3), "data.in_chans", f"must be 1 or 3, got {in_chans}")
        require(batch_size > 0, "data.batch_size", f"must be positive, got {batch_size}")
        require(
            interpolation in INTERPOLATIONS,
            "data.interpolation",
            f"unknown interpolation {interpolation!r}",
            f"choose one of {', '.join(INTERPOLATIONS)}",
        )
        mean = tuple(mean) if mean is not None else (0.5,) * in_chans
        std = tuple(std) if std is not None else (0.5,) * in_chans
        for name, values in (("mean", mean), ("std", std)):
            require(
                len(values) == in_chans,
                f"data.{name}",
                f"has {len(values)} values for {in_chans} channels",
                f"give {in_chans}",
            )
        if class_names is not None:
            require(
                len(class_names) == num_classes,
                "data.class_names",
                f"has {len(class_names)} names for {num_classes} classes",
                f"give {num_classes} names",
            )
        self.predict_root = predict_root
        self.dataset = dataset
        self.batch_size = batch_size
        self.eval_batch_size = batch_size
        self.num_workers = min(8, os.cpu_count() or 1) if num_workers is None else num_workers
        self.class_names = [str(name) for name in class_names] if class_names is not None else None
        self.facts = {
            "dataset": dataset,
            "num_classes": num_classes,
            "class_names": self.class_names or [str(i) for i in range(num_classes)],
            "image_size": image_size,
            "in_chans": in_chans,
            "mean": list(mean),
            "std": list(std),
            "eval_crop": eval_crop,
            "eval_crop_pct": eval_crop_pct,
            "interpolation": interpolation,
            "input_permutation": input_permutation,
            "permutation_patch_size": permutation_patch_size,
            "permutation_seed": permutation_seed,
        }
        self.predict_set: ImageFiles | None = None

    # Linked into the model by the CLI, as ImageDataModule's.
    @property
    def num_classes(self) -> int:
        return int(self.facts["num_classes"])

    @property
    def image_size(self) -> int:
        return int(self.facts["image_size"])

    @property
    def in_chans(self) -> int:
        return int(self.facts["in_chans"])

    def setup(self, stage: str | None = None) -> None:
        if self.predict_set is None:
            self.predict_set = files_dataset(self.facts, self.predict_root)

    def predict_dataloader(self) -> DataLoader:
        self.setup("predict")
        return DataLoader(
            self.predict_set,
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            **worker_options(self.num_workers, self.trainer),
        )

    @staticmethod
    def arguments_from(facts: dict[str, Any]) -> dict[str, Any]:
        """PredictionData's arguments from a checkpoint's ``data`` entry (unknown keys are left out)."""
        return {key: facts[key] for key in FACT_KEYS if key in facts and facts[key] is not None}
