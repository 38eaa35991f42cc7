"""Dataset sources: where the images of each named dataset come from, and what they are.

A source knows its facts (`DatasetInfo`: classes, image size, channels, normalisation) at
construction, cheaply (constants, class-folder names, or a Hugging Face dataset's features and first
image), so the CLI can link them into the model before any image is decoded, and it loads its
official splits as datasets of ``(image, label)`` pairs. Images are PIL images, or tensors for the
in-memory ``digits``. Adding a dataset is one class and one entry in `DATASETS`.

=========== ===================================================== ====== ======= =====
name        on disk (under ``data.root``)                          size   classes val
=========== ===================================================== ====== ======= =====
digits      nothing (scikit-learn's bundled 8×8 digits)            8      10      no
cifar10     torchvision: ``cifar-10-batches-py/``                  32     10      no
cifar100    torchvision: ``cifar-100-python/`` (fine labels)        32     100     no
stl10       torchvision: ``stl10_binary/`` (labelled train/test)   96     10      no
mnist       torchvision: ``MNIST/raw/``                            28     10      no
imagenet    ImageFolder: ``train/<class>/…``, ``val/<class>/…``    224    1000    yes
folder      ImageFolder: ``train/``, ``val/`` (``test/`` optional) 224    folders yes
hf          a Hugging Face hub id, or a local folder in its layout first   feature  if any
=========== ===================================================== ====== ======= =====
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch.utils.data import Dataset, TensorDataset

from mixer_lightning.errors import ConfigError, require

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class DatasetInfo:
    num_classes: int
    image_size: int
    in_chans: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    small: bool = True  # CIFAR-like: pad-crop training, no evaluation crop (else ImageNet-like)
    natural: bool = True  # natural photographs: horizontal flips keep the label (not digits)


class DatasetSource:
    """A named dataset. Subclasses set `info` (class attribute or in ``__init__``) and implement `load`."""

    name: ClassVar[str]
    info: DatasetInfo
    in_memory: ClassVar[bool] = False  # already decoded tensors: no PIL transforms, no workers needed
    has_val: bool = False  # an official validation split exists

    def __init__(self, root: str, download: bool):
        self.root = root
        self.download = download

    def load(self, split: str) -> Dataset:
        """The official `split` ("train", "val" if `has_val`, "test") as (image, label) pairs."""
        raise NotImplementedError


class Digits(DatasetSource):
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes, grey levels 0-16).

    It ships inside scikit-learn, so it needs no download: the embedded default dataset of the
    quickstart. It has no official split; a fixed permutation (seed 0, independent of the training
    seed) puts 20% in the test split.
    """

    name = "digits"
    info = DatasetInfo(num_classes=10, image_size=8, in_chans=1, mean=(0.3053,), std=(0.3760,), natural=False)
    in_memory = True
    test_fraction = 0.2

    def load(self, split: str) -> Dataset:
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.from_numpy(np.random.default_rng(0).permutation(len(labels)))
        num_test = round(self.test_fraction * len(labels))
        index = order[:num_test] if split == "test" else order[num_test:]
        return TensorDataset(images[index], labels[index])


class TorchvisionSource(DatasetSource):
    """A dataset in torchvision's on-disk format under `root` (downloaded there when `download`)."""

    how_to_get: ClassVar[str] = ""

    def _missing(self, error: Exception) -> ConfigError:
        return ConfigError(
            "data.root",
            f"no {self.name} data under {str(Path(self.root).resolve())!r} ({error})",
            f"set data.download: true to fetch it, or {self.how_to_get}",
        )

    def _open(self, split: str) -> Dataset:
        raise NotImplementedError

    def load(self, split: str) -> Dataset:
        try:
            return self._open(split)
        except (RuntimeError, OSError) as error:  # "Dataset not found or corrupted", or no network
            raise self._missing(error) from None


class CIFAR10(TorchvisionSource):
    name = "cifar10"
    info = DatasetInfo(
        num_classes=10, image_size=32, in_chans=3, mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616)
    )
    how_to_get = "place torchvision's cifar-10-batches-py folder under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import CIFAR10 as TV

        return TV(self.root, train=split == "train", download=self.download)


class CIFAR100(TorchvisionSource):
    """CIFAR-100 with its 100 fine labels (the papers' CIFAR-100)."""

    name = "cifar100"
    info = DatasetInfo(
        num_classes=100, image_size=32, in_chans=3, mean=(0.5071, 0.4865, 0.4409), std=(0.2673, 0.2564, 0.2762)
    )
    how_to_get = "place torchvision's cifar-100-python folder under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import CIFAR100 as TV

        return TV(self.root, train=split == "train", download=self.download)


class STL10(TorchvisionSource):
    """STL-10's labelled splits: 5,000 training and 8,000 test images of 96×96 (the unlabelled
    100,000 are not used; Hayase & Karakida resize to 32, or 90 in App. D.6: ``data.image_size``)."""

    name = "stl10"
    info = DatasetInfo(
        num_classes=10, image_size=96, in_chans=3, mean=(0.4467, 0.4398, 0.4066), std=(0.2603, 0.2566, 0.2713)
    )
    how_to_get = "place torchvision's stl10_binary folder under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import STL10 as TV

        return TV(self.root, split="train" if split == "train" else "test", download=self.download)


class MNIST(TorchvisionSource):
    """MNIST, 28×28 grey digits (Hayase & Karakida Fig. 2d's shallow Kronecker/Monarch MLPs)."""

    name = "mnist"
    info = DatasetInfo(num_classes=10, image_size=28, in_chans=1, mean=(0.1307,), std=(0.3081,), natural=False)
    how_to_get = "place torchvision's MNIST/raw folder under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import MNIST as TV

        return TV(self.root, train=split == "train", download=self.download)


def _decompression_bomb(error: Exception) -> OSError:
    """PIL refuses an image of more than 2 × ``PIL.Image.MAX_IMAGE_PIXELS`` pixels (a decompression bomb)
    with an error of its own; as an OSError, the data module names the file like any unreadable image."""
    return OSError(f"{str(error).rstrip('.')}; PIL.Image.MAX_IMAGE_PIXELS sets the limit")


def image_files(folder: Path, extensions: tuple[str, ...]) -> list[str]:
    """The image files under `folder` (any depth), in torchvision ImageFolder's order (sorted by folder,
    then by name). Symbolic links to folders are followed at most once: a folder is read once however
    many links lead to it, and a link to a folder it lies in (a loop, which torchvision follows until
    the path is too long, reading the same images again and again) is not followed, with a warning."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    stack = [str(folder)]
    while stack:
        current = stack.pop()
        real = os.path.realpath(current)
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError as error:
            raise ConfigError("data.root", f"cannot read the folder {current!r} ({error.strerror})") from None
        for entry in entries:
            if entry.is_dir():  # follows links
                target = os.path.realpath(entry.path)
                if entry.is_symlink() and (real == target or real.startswith(target + os.sep)):
                    warnings.warn(
                        f"data.root: {entry.path!r} links to {target!r}, a folder it lies in: not followed",
                        stacklevel=2,
                    )
                    continue
                stack.append(entry.path)
            elif entry.is_file() and entry.name.lower().endswith(extensions):
                found.append((current, entry.name))
    return [os.path.join(directory, name) for directory, name in sorted(found)]


class RGBImageFolder(Dataset):
    """Images in class folders (torchvision's ImageFolder layout, ``root/<class>/**/*.jpg``), converted
    to RGB (ImageNet holds a few grey and CMYK JPEGs).

    The files are listed by `image_files` (a symlink loop is read once); a class folder without images,
    a split without any, and a decompression bomb are one-line errors naming the path."""

    def __init__(self, root: str):
        from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

        self.root = Path(root)
        self.classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        require(
            bool(self.classes),
            "data.root",
            f"{root!r} holds no class folders",
            "put each class's images in a folder of its own under it",
        )
        files = [image_files(self.root / name, IMG_EXTENSIONS) for name in self.classes]
        kinds = ", ".join(IMG_EXTENSIONS)
        require(
            any(files),
            "data.root",
            f"{root!r} holds no images ({kinds}) in its class folders",
            "point data.root at the image folders",
        )
        self.samples: list[tuple[str, int]] = []
        for index, (name, found) in enumerate(zip(self.classes, files, strict=True)):
            require(
                bool(found),
                "data.root",
                f"the class folder {str(self.root / name)!r} holds no images ({kinds})",
                "add its images, or remove the folder (every split needs the same classes)",
            )
            self.samples.extend((path, index) for path in found)
        self.targets = [label for _, label in self.samples]  # labels without decoding (few-shot draws)
        self.loader = default_loader  # converts to RGB

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.samples[index]
        try:
            return self.loader(path), label
        except Image.DecompressionBombError as error:
            raise _decompression_bomb(error) from None


class Folder(DatasetSource):
    """Images in class folders (torchvision ImageFolder): ``root/train/<class>/*``, ``root/val/<class>/*``,
    optionally ``root/test/<class>/*`` (else the test split is ``val``).

    The classes are the folder names of ``root/train``, read at construction without opening an image.
    """

    name = "folder"
    default_size: ClassVar[int] = 224
    has_val = True

    def __init__(self, root: str, download: bool):
        super().__init__(root, download)
        train = Path(root) / "train"
        require(
            train.is_dir() and (Path(root) / "val").is_dir(),
            "data.root",
            f"{self.name} needs class folders under {str(Path(root).resolve())!r}/train and /val",
            "point data.root at the folder holding train/ and val/ (download is not possible for folders)",
        )
        self.classes = sorted(entry.name for entry in os.scandir(train) if entry.is_dir())
        require(
            len(self.classes) > 1,
            "data.root",
            f"{str(train)!r} holds {len(self.classes)} class folders, need at least 2",
            "put each class's images in a folder of its own under it",
        )
        self.info = DatasetInfo(
            num_classes=len(self.classes),
            image_size=self.default_size,
            in_chans=3,
            mean=IMAGENET_DEFAULT_MEAN,
            std=IMAGENET_DEFAULT_STD,
            small=False,
        )

    def load(self, split: str) -> Dataset:
        folder = Path(self.root) / split
        if split == "test" and not folder.is_dir():
            folder = Path(self.root) / "val"
        dataset = RGBImageFolder(str(folder))
        require(
            dataset.classes == self.classes,
            "data.root",
            f"the class folders of {folder} differ from those of {Path(self.root) / 'train'}",
            "every split needs the same class folders",
        )
        return dataset


class ImageNet(Folder):
    """ImageNet-1k as an ImageFolder (``root/train/n01440764/*.JPEG``, ``root/val/n01440764/*.JPEG``,
    the usual layout after extracting ILSVRC2012 and sorting val into class folders). The test split
    is ``val`` (ImageNet's test labels are not public), as in both papers."""

    name = "imagenet"


# Column names of image and label in the Hugging Face datasets the papers use (CIFAR-10 has
# `img`/`label`, CIFAR-100 `img`/`fine_label`, ImageNet-1k `image`/`label`).
HF_IMAGE_COLUMNS = ("img", "image")
HF_LABEL_COLUMNS = ("label", "fine_label", "labels")
HF_SPLITS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}


class HFImages(Dataset):
    """(PIL image, label) pairs of a Hugging Face `datasets.Dataset`; `__getitems__` reads a whole batch
    in one Arrow query, as ``Dataset.with_transform`` does."""

    def __init__(self, dataset: Any, image_column: str, label_column: str, mode: str):
        self.dataset = dataset
        self.image_column, self.label_column, self.mode = image_column, label_column, mode

    def __len__(self) -> int:
        return len(self.dataset)

    def _convert(self, image: Any) -> Any:
        return image if image.mode == self.mode else image.convert(self.mode)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        try:
            row = self.dataset[int(index)]
        except Image.DecompressionBombError as error:
            raise _decompression_bomb(error) from None
        return self._convert(row[self.image_column]), int(row[self.label_column])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, int]]:
        from PIL import Image

        try:
            rows = self.dataset[list(map(int, indices))]
        except Image.DecompressionBombError as error:
            raise _decompression_bomb(error) from None
        return [
            (self._convert(image), int(label))
            for image, label in zip(rows[self.image_column], rows[self.label_column], strict=True)
        ]


class HuggingFace(DatasetSource):
    """A Hugging Face dataset: a hub id (``uoft-cs/cifar10``) or a local folder in the hub's layout
    (``data/train-*.parquet``, ``data/test-*.parquet``), read with `datasets.load_dataset` (Arrow,
    memory-mapped: nothing is decoded until a batch is read).

    The image column is ``img`` or ``image``, the label column ``label``, ``fine_label`` or ``labels``
    (or ``image_column`` / ``label_column``); ``num_classes`` comes from the label's ClassLabel feature,
    ``image_size`` and ``in_chans`` from the first training image. Splits: ``train``, ``validation``
    (also ``valid``/``val``) when present, and ``test`` (``validation`` when there is no labelled test).
    """

    name = "hf"

    def __init__(self, root: str, download: bool, image_column: str | None = None, label_column: str | None = None):
        super().__init__(root, download)
        import datasets

        try:
            self.splits = datasets.load_dataset(root)
        except Exception as error:  # a missing folder or hub id, no network, no data files
            raise ConfigError(
                "data.root",
                f"cannot load the Hugging Face dataset {root!r} ({type(error).__name__}: {error})",
                "give a hub id or a local folder in the hub's layout (e.g. data/train-*.parquet)",
            ) from None
        if isinstance(self.splits, datasets.Dataset):
            self.splits = datasets.DatasetDict(train=self.splits)
        self.split_names = {split: self._find_split(names) for split, names in HF_SPLITS.items()}
        require(
            self.split_names["train"] is not None,
            "data.root",
            f"{root!r} has no train split (it has {', '.join(self.splits)})",
        )
        train = self.splits[self.split_names["train"]]
        features = train.features
        self.image_column = self._column(features, image_column, HF_IMAGE_COLUMNS, "image_column", "Image")
        self.label_column = self._column(features, label_column, HF_LABEL_COLUMNS, "label_column", "ClassLabel")
        label = features[self.label_column]
        self._check_label_type(self.split_names["train"])
        if isinstance(label, datasets.ClassLabel):
            num_classes = label.num_classes
        else:  # plain integers: count them (one integer column, cheap in Arrow)
            num_classes = int(self._label_range(self.split_names["train"])[1]) + 1
        unlabelled_test = None
        if self.split_names["test"] is not None and self._unlabelled(self.split_names["test"]):
            unlabelled_test = self.split_names["test"]  # e.g. ImageNet-1k on the hub: test labels are -1
            self.split_names["test"] = None
        if self.split_names["test"] is None:
            self.split_names["test"] = self.split_names["val"]
        if self.split_names["test"] is None:
            why = (
                f"its split {unlabelled_test!r} has no labels (column {self.label_column!r})"
                if unlabelled_test
                else f"it has {', '.join(self.splits)}"
            )
            raise ConfigError(
                "data.root",
                f"{root!r} has no labelled test or validation split ({why})",
                "give a dataset with a labelled test (or validation) split",
            )
        for split in dict.fromkeys(name for name in self.split_names.values() if name is not None):
            self._check_labels(split, num_classes)
        self.has_val = self.split_names["val"] is not None and self.split_names["val"] != self.split_names["test"]
        first = train[0][self.image_column]
        self.mode = "L" if first.mode in ("1", "L", "I", "I;16", "F") else "RGB"
        width, height = first.size
        self.info = DatasetInfo(
            num_classes=num_classes,
            image_size=max(width, height),
            in_chans=1 if self.mode == "L" else 3,
            mean=(0.5,) if self.mode == "L" else IMAGENET_DEFAULT_MEAN,
            std=(0.5,) if self.mode == "L" else IMAGENET_DEFAULT_STD,
            small=max(width, height) <= 96,
        )
        self.square = width == height

    def _find_split(self, names: tuple[str, ...]) -> str | None:
        return next((name for name in names if name in self.splits), None)

    def _unlabelled(self, split: str) -> bool:
        """Whether `split` has no labels: no label column, or nothing but -1 (the hub's mark)."""
        data = self.splits[split]
        if self.label_column not in data.column_names:
            return True
        if data._indices is None and data.data.column(self.label_column).null_count == len(data):
            return True  # a split saved without labels beside labelled ones: the column is all null
        self._check_label_type(split)
        low, high = self._label_range(split)
        return high is not None and high < 0

    def _check_label_type(self, split: str) -> None:
        import datasets

        data = self.splits[split]
        where = f"split {split!r} of {self.root!r}, column {self.label_column!r}"
        if self.label_column not in data.column_names:
            raise ConfigError(
                "data.label_column",
                f"{where}: no such column (it has {', '.join(data.column_names)})",
                "label every split, or name the label column with data.label_column",
            )
        feature = data.features[self.label_column]
        if isinstance(feature, datasets.ClassLabel):
            return
        dtype = getattr(feature, "dtype", type(feature).__name__)
        if not (isinstance(feature, datasets.Value) and str(dtype).startswith(("int", "uint"))):
            raise ConfigError(
                "data.label_column",
                f"{where} holds {dtype} values, not class numbers",
                "encode them as class numbers, e.g. dataset.class_encode_column(column) (a ClassLabel)",
            )

    def _label_range(self, split: str) -> tuple[int | None, int | None]:
        """The smallest and largest label of `split` (an Arrow reduction: no image is decoded)."""
        import pyarrow.compute as pc

        data = self.splits[split]
        values = (
            data.data.column(self.label_column)
            if data._indices is None
            else data.with_format("arrow")[self.label_column]
        )
        found = pc.min_max(values)
        return found["min"].as_py(), found["max"].as_py()

    def _check_labels(self, split: str, num_classes: int) -> None:
        """Every label of `split` is a class number 0..num_classes-1 (checked once, before training)."""
        self._check_label_type(split)
        where = f"split {split!r} of {self.root!r}, column {self.label_column!r}"
        data = self.splits[split]
        missing = data.data.column(self.label_column).null_count if data._indices is None else 0
        require(missing == 0, "data.label_column", f"{where}: {missing} rows have no label", "label them or drop them")
        low, high = self._label_range(split)
        if low is not None and low < 0:
            raise ConfigError(
                "data.label_column",
                f"{where} holds the label {low}; labels are 0..{num_classes - 1}",
                "drop or label those rows (-1 marks an unlabelled image)",
            )
        if high is not None and high >= num_classes:
            raise ConfigError(
                "data.label_column",
                f"{where} holds the label {high}, but there are {num_classes} classes (0..{num_classes - 1})",
                "fix those labels (or the names of the ClassLabel feature)",
            )

    def _column(self, features: Any, given: str | None, candidates: tuple[str, ...], field: str, kind: str) -> str:
        if given is not None:
            require(
                given in features,
                f"data.{field}",
                f"no column {given!r} in {self.root!r}",
                f"choose one of {', '.join(features)}",
            )
            return given
        for name in candidates:
            if name in features:
                return name
        for name, feature in features.items():  # any column of the right feature type
            if type(feature).__name__ == kind:
                return name
        raise ConfigError(
            f"data.{field}",
            f"cannot tell which column of {self.root!r} holds the {field.split('_')[0]} (columns: {', '.join(features)})",
            f"set data.{field}",
        )

    def load(self, split: str) -> Dataset:
        return HFImages(self.splits[self.split_names[split]], self.image_column, self.label_column, self.mode)


DATASETS: dict[str, Callable[..., DatasetSource]] = {
    cls.name: cls for cls in (Digits, CIFAR10, CIFAR100, STL10, MNIST, ImageNet, Folder, HuggingFace)
}


def get_source(name: str, root: str, download: bool, **options: Any) -> DatasetSource:
    """The source `name` reading from `root`; `options` (hf's column names) go to the sources that take them."""
    if name not in DATASETS:
        raise ConfigError("data.dataset", f"unknown dataset {name!r}", f"choose one of {', '.join(DATASETS)}")
    if name == HuggingFace.name:
        return HuggingFace(root, download, **options)
    for option, value in options.items():
        require(value is None, f"data.{option}", f"only the hf dataset takes it, not {name}", "remove it")
    return DATASETS[name](root, download)
