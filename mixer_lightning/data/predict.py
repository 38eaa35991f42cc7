"""Prediction on image files (a folder, at any depth, or files), without the training data: a checkpoint
carries the facts of its data (`data_facts`: classes and names, image size and channels, normalisation,
evaluation crop, input permutation), of which `PredictionData` is made, so ``mixer predict --ckpt_path
best.ckpt --data.predict_root photos/`` needs no data config; `ImageDataModule` serves the same files
through `files_loader` when its config gives a ``predict_root``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from jsonargparse.typing import ClosedUnitInterval, PositiveFloat, PositiveInt
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from mixer_lightning.data.pil_path import UNREADABLE, to_mode
from mixer_lightning.data.sampling import worker_options
from mixer_lightning.data.transforms import EvalCrop, InputPermutation, Interpolation, PermutationMode, eval_transform
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.hardware import usable_cpus

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# The facts a checkpoint carries about its data (the checkpoint's ``data`` entry), all plain values.
FACT_KEYS = tuple(
    "dataset num_classes class_names image_size in_chans mean std eval_crop eval_crop_pct interpolation "
    "input_permutation permutation_patch_size permutation_seed".split()
)
# First characters that make a spreadsheet read a cell as a formula (OWASP "CSV Injection"), and their
# full-width forms, which some spreadsheets read as formulas too.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_text(text: str) -> str:
    """`text` (a file or class name) as a CSV cell no spreadsheet runs: prefixed with ``'`` when it starts
    like a formula (``=1+1.png`` → ``'=1+1.png``), as OWASP advises."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def list_images(root: str | Sequence[str], field: str = "data.predict_root") -> tuple[list[str], list[str]]:
    """The image files of `root` (a folder, read at any depth in sorted order, a file, or a list of either)
    and their names as the CSV shows them (relative to a folder given)."""
    from mixer_lightning.data.sources.folder import image_files

    paths: list[str] = []
    names: list[str] = []
    for entry in [root] if isinstance(root, (str, os.PathLike)) else list(root):
        entry = str(entry)
        if os.path.isdir(entry):
            found = sorted(image_files(entry, IMAGE_EXTENSIONS))  # in path order (docs/usage.md): a/b/x.png, a/y.png
            paths += found
            names += [os.path.relpath(file, entry) for file in found]
        elif os.path.isfile(entry):
            paths.append(entry)
            names.append(entry)
        else:
            raise ConfigError(field, f"no such file or folder {entry!r}")
    require(bool(paths), field, f"{root!r} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
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
        except UNREADABLE as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError("data.predict_root", f"cannot read image {path!r} ({reason})") from None
        return self.transform(image), index


def prediction_transform(facts: dict[str, Any]) -> Callable:
    """PIL image → the model's input: the evaluation pre-processing of `facts` (resized whatever the file's
    size: native size 0), then the input permutation the model was trained with, if any."""
    size = int(facts["image_size"])
    crop, pct, interpolation = facts["eval_crop"], float(facts["eval_crop_pct"]), facts["interpolation"]
    transform = eval_transform(size, 0, crop, pct, interpolation, facts["mean"], facts["std"])
    if facts.get("input_permutation", "none") in (None, "none"):
        return transform
    patch, seed = int(facts["permutation_patch_size"]), int(facts["permutation_seed"])
    return T.Compose([transform, InputPermutation(facts["input_permutation"], size, patch, seed)])


def class_names(datamodule: Any) -> list[str]:
    """The names of the classes of `datamodule`: its own (`PredictionData`), its source's (folder names, a
    ClassLabel's names, a shard manifest's), a torchvision dataset's ``classes``; else the class numbers."""
    num_classes = int(datamodule.num_classes)
    source = getattr(datamodule, "source", None)
    names = getattr(datamodule, "class_names", None) or getattr(source, "classes", None)
    if names is None and source is not None and hasattr(source, "_open"):  # torchvision: read from its files
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


def files_loader(files: ImageFiles, batch_size: int, workers: int, pin_memory: bool, trainer: Any) -> DataLoader:
    """The predict loader of the image `files` (`files_dataset`), in their order."""
    options = worker_options(workers, trainer)
    return DataLoader(
        files, batch_size=batch_size, shuffle=False, num_workers=workers, pin_memory=pin_memory, **options
    )


class PredictionData(LightningDataModule):
    """Image files to predict, pre-processed as a checkpoint's evaluation images (module docstring).
    ``mixer predict --ckpt_path CKPT --data.predict_root DIR`` fills every argument but ``predict_root``
    from the checkpoint's ``data`` entry; any of them may be given to differ.

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
        num_classes: PositiveInt,
        image_size: PositiveInt,
        in_chans: Literal[1, 3] = 3,
        mean: tuple[float, ...] | None = None,
        std: tuple[PositiveFloat, ...] | None = None,
        class_names: list[str] | None = None,
        eval_crop: EvalCrop = "resize",
        eval_crop_pct: ClosedUnitInterval = 0.875,
        interpolation: Interpolation = "bilinear",
        input_permutation: PermutationMode = "none",
        permutation_patch_size: PositiveInt = 16,
        permutation_seed: int = 0,
        dataset: str = "images",
        batch_size: PositiveInt = 64,
        num_workers: int | None = None,
    ):
        super().__init__()
        mean = tuple(mean) if mean is not None else (0.5,) * in_chans
        std = tuple(std) if std is not None else (0.5,) * in_chans
        for name, values in (("mean", mean), ("std", std)):  # else broadcast silently over the channels
            require(len(values) == in_chans, f"data.{name}", f"has {len(values)} values for {in_chans} channels")
        names = [str(name) for name in class_names] if class_names is not None else None
        require(names is None or len(names) == num_classes, "data.class_names", f"are not {num_classes} names")
        self.predict_root, self.dataset, self.class_names = predict_root, dataset, names
        self.batch_size = self.eval_batch_size = int(batch_size)
        self.num_workers = min(8, usable_cpus()) if num_workers is None else num_workers
        self.facts = {
            "dataset": dataset,
            "num_classes": int(num_classes),
            "class_names": names or [str(i) for i in range(num_classes)],
            "image_size": int(image_size),
            "in_chans": int(in_chans),
            "mean": [float(v) for v in mean],
            "std": [float(v) for v in std],
            "eval_crop": eval_crop,
            "eval_crop_pct": float(eval_crop_pct),
            "interpolation": interpolation,
            "input_permutation": input_permutation,
            "permutation_patch_size": int(permutation_patch_size),
            "permutation_seed": int(permutation_seed),
        }
        # Linked into the model by the CLI, as ImageDataModule's.
        self.num_classes, self.image_size, self.in_chans = (
            self.facts[k] for k in ("num_classes", "image_size", "in_chans")
        )
        self.predict_set: ImageFiles | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.predict_set is None:
            self.predict_set = files_dataset(self.facts, self.predict_root)

    def predict_dataloader(self) -> DataLoader:
        self.setup("predict")
        return files_loader(self.predict_set, self.batch_size, self.num_workers, False, self.trainer)

    @staticmethod
    def arguments_from(facts: dict[str, Any]) -> dict[str, Any]:
        """PredictionData's arguments from a checkpoint's ``data`` entry (unknown keys are left out)."""
        return {key: facts[key] for key in FACT_KEYS if key in facts and facts[key] is not None}
