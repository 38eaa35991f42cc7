"""A Hugging Face dataset (``hf``): a hub id or a local folder in the hub's layout, read with
`datasets.load_dataset` (Arrow, memory-mapped). Without a network, huggingface_hub retries for about
half a minute; ``HF_HUB_OFFLINE=1`` reads its cache at once."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetInfo, DatasetSource, first_image_info, say
from mixer_lightning.data.sources.builtin import CIFAR10, CIFAR100
from mixer_lightning.errors import ConfigError, require

# Column names of image and label in the datasets the papers use (CIFAR-10 `img`/`label`, CIFAR-100
# `img`/`fine_label`, ImageNet-1k `image`/`label`), and the hub's split names of our roles.
HF_IMAGE_COLUMNS = ("img", "image")
HF_LABEL_COLUMNS = ("label", "fine_label", "labels")
HF_SPLITS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}
# Hub datasets whose torchvision twin the project knows: the same images, so CIFAR's mean/std, not
# ImageNet's; a local copy is recognised by its class names, image size and channels.
HF_TWINS = {"uoft-cs/cifar10": CIFAR10, "cifar10": CIFAR10, "uoft-cs/cifar100": CIFAR100, "cifar100": CIFAR100}


def hub_statistics(root: str, class_names: Any, info: DatasetInfo) -> tuple[DatasetInfo, str | None]:
    """The facts of a hub dataset known by its first image: a copy of CIFAR-10/100's own (the torchvision
    source's), else `info` and, for small colour images (where ImageNet's mean/std are the wrong guess
    most often), the line to say."""
    twin = HF_TWINS.get(str(root).strip("/").lower())
    for source in [twin] if twin is not None else [CIFAR10, CIFAR100]:
        facts = (source.info.image_size, source.info.in_chans, source.info.num_classes)
        same = (info.image_size, info.in_chans, info.num_classes) == facts
        if same and (source is twin or tuple(class_names or ()) == source.known_classes):
            return source.info, None
    if info.in_chans == 3 and info.small:
        return info, (
            f"data   normalised with ImageNet's mean/std: the hf dataset {root!r} has {info.image_size} px colour "
            "images; set data.mean and data.std if its own differ"
        )
    return info, None


def load_hf(root: str, streaming: bool = False) -> Any:
    """`datasets.load_dataset(root)` (streamed: `streaming`) as a dict of splits. Its progress bars are off
    (their carriage returns garble a run's log); a copy in Arrow files, which it writes unless streaming, is
    said in one line: where it is and how large."""
    import datasets

    datasets.disable_progress_bars()
    try:
        splits = datasets.load_dataset(root, streaming=streaming)
    except Exception as error:  # a missing folder or hub id, no network, no data files
        raise ConfigError(
            "data.root",
            f"cannot load the Hugging Face dataset {root!r} ({type(error).__name__}: {error})",
            "give a hub id or a local folder in the hub's layout (data/train-*.parquet); offline, set "
            "HF_HUB_OFFLINE=1 to read the hub's cache",
        ) from None
    if isinstance(splits, (datasets.Dataset, datasets.IterableDataset)):  # one split: the training images
        splits = (datasets.IterableDatasetDict if streaming else datasets.DatasetDict)(train=splits)
    files = [Path(f["filename"]) for split in splits.values() for f in getattr(split, "cache_files", [])]
    if files:
        size = sum(f.stat().st_size for f in files if f.is_file()) / 2**20
        say(
            f"data   hf: datasets' Arrow copy of {root!r} ({size:,.1f} MiB) is in {os.path.commonpath(files)} "
            "(HF_DATASETS_CACHE moves it)"
        )
    return splits


def split_names(splits: Any, root: str) -> dict[str, str | None]:
    """The hub's split name of each role (train, val, test); a train split is required."""
    names = {role: next((n for n in candidates if n in splits), None) for role, candidates in HF_SPLITS.items()}
    require(names["train"] is not None, "data.root", f"{root!r} has no train split (it has {', '.join(splits)})")
    return names


def find_column(root: str, features: Any, given: str | None, candidates: tuple[str, ...], field: str, kind: str) -> str:
    """The image or label column: `given`, else the first of `candidates`, else any of feature type `kind`."""
    if given is not None:
        require(
            given in features,
            f"data.{field}",
            f"no column {given!r} in {root!r}",
            f"choose one of {', '.join(features)}",
        )
        return given
    found = [name for name in candidates if name in features]
    found += [name for name, feature in features.items() if type(feature).__name__ == kind]
    require(bool(found), f"data.{field}", f"cannot tell which column of {root!r} it is ({', '.join(features)})")
    return found[0]


def no_test_labels(splits: Any, names: dict[str, str | None], label_column: str, streamed: bool = False) -> None:
    """The validation split tests where the test split has no labels (ImageNet on the hub: -1)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    test = names["test"]
    if test is not None and streamed:
        first = next(iter(splits[test].take(1)), None)
        names["test"] = None if first is None or first.get(label_column) in (None, -1) else test
    elif test is not None:
        data = splits[test]
        labels = data.with_format("arrow")[label_column] if label_column in data.column_names else None
        unlabelled = labels is None or labels.null_count == len(labels)
        if unlabelled or (pa.types.is_integer(labels.type) and pc.max(labels).as_py() < 0):
            names["test"] = None
    names["test"] = names["test"] or names["val"]
    require(names["test"] is not None, "data.root", f"no labelled test or validation split in {', '.join(splits)}")


def dataset_folders(root: str) -> list[Path]:
    """Where the image files of the Hugging Face dataset `root` may lie: inside its folder (a local dataset),
    or its download in huggingface_hub's and datasets' caches (a hub id)."""
    import datasets
    from huggingface_hub.constants import HF_HUB_CACHE

    if Path(root).is_dir():
        return [Path(root).resolve()]
    return [
        Path(HF_HUB_CACHE, f"datasets--{root.replace('/', '--')}").resolve(),
        Path(datasets.config.DOWNLOADED_DATASETS_PATH).resolve(),
    ]


def row_image(row: dict, folders: list[Path], root: str, field: str = "data.root") -> bytes:
    """A row's image (``{"bytes", "path"}``, its column read with ``Image(decode=False)``): its bytes, else the
    file at its path inside `folders`, never another file (a row's path is data: it could name any file of the
    machine, or a FIFO that never ends). The one rule of every reader of a Hugging Face dataset."""
    if row.get("bytes") is not None:
        return row["bytes"]
    path = Path(folders[0], row.get("path") or "").resolve()  # a relative path: inside the dataset
    inside = row.get("path") and any(path.is_relative_to(folder) for folder in folders) and path.is_file()
    problem = f"a row's image is no bytes and its path {row.get('path')!r} is no file inside {str(folders[0])!r}"
    require(bool(inside), field, problem, f"embed the images' bytes in {root!r}")
    return path.read_bytes()


def open_row_image(row: dict, folders: list[Path], root: str) -> Any:
    """`row_image` as a PIL image (opened lazily, as `datasets.Image` decodes)."""
    from PIL import Image

    return Image.open(io.BytesIO(row_image(row, folders, root)))


class HFImages(Dataset):
    """(PIL image, label) pairs of a Hugging Face `datasets.Dataset`; `__getitems__` reads a whole batch
    in one Arrow query."""

    def __init__(self, dataset: Any, image_column: str, label_column: str, mode: str, root: str):
        self.dataset = dataset  # its image column undecoded: `row_image` reads it
        self.image_column, self.label_column, self.mode = image_column, label_column, mode
        self.root, self.folders = root, dataset_folders(root)

    def __len__(self) -> int:
        return len(self.dataset)

    def _convert(self, row: dict) -> Any:
        from mixer_lightning.data.pil_path import to_mode

        image = open_row_image(row, self.folders, self.root)
        return image if image.mode == self.mode else to_mode(image, self.mode)  # 16-bit scaled, not clipped

    def __getitem__(self, index: int) -> tuple[Any, int]:
        row = self.dataset[int(index)]
        return self._convert(row[self.image_column]), int(row[self.label_column])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, int]]:
        rows = self.dataset[list(map(int, indices))]
        pairs = zip(rows[self.image_column], rows[self.label_column], strict=True)
        return [(self._convert(image), int(label)) for image, label in pairs]


class HuggingFace(DatasetSource):
    """A Hugging Face dataset: a hub id (``uoft-cs/cifar10``) or a local folder in the hub's layout
    (``data/train-*.parquet``, ``data/test-*.parquet``), memory-mapped: nothing is decoded until a batch is
    read. The columns: ``img``/``image`` and ``label``/``fine_label``/``labels`` (or ``image_column`` /
    ``label_column``); ``num_classes`` from the label's ClassLabel (else the largest label + 1),
    ``image_size`` and ``in_chans`` from the first training image. Splits: ``train``, ``validation`` (or
    ``valid``/``val``), and ``test`` (``validation`` when there is no labelled test). Every label is
    checked to be a class number before training (an Arrow reduction: no image is decoded)."""

    name = "hf"
    options = ("image_column", "label_column")

    def __init__(self, root: str, download: bool, image_column: str | None = None, label_column: str | None = None):
        super().__init__(root, download)
        import datasets

        self.splits = load_hf(root)
        self.split_names = split_names(self.splits, root)
        features = self.splits[self.split_names["train"]].features
        self.image_column = find_column(root, features, image_column, HF_IMAGE_COLUMNS, "image_column", "Image")
        self.label_column = find_column(root, features, label_column, HF_LABEL_COLUMNS, "label_column", "ClassLabel")
        label = features[self.label_column]
        self.classes = list(label.names) if isinstance(label, datasets.ClassLabel) else None
        num_classes = len(self.classes) if self.classes else self._labels(self.split_names["train"])[1] + 1
        no_test_labels(self.splits, self.split_names, self.label_column)
        for split in dict.fromkeys(name for name in self.split_names.values() if name is not None):
            low, high = self._labels(split)
            where = f"split {split!r} of {root!r}, column {self.label_column!r}"
            require(0 <= low and high < num_classes, "data.label_column", f"{where} holds labels {low}..{high}")
        self.has_val = self.split_names["val"] not in (None, self.split_names["test"])
        undecoded = datasets.Image(decode=False)  # a row's path is read only inside the dataset (`row_image`)
        self.splits = {name: split.cast_column(self.image_column, undecoded) for name, split in self.splits.items()}
        first = self.splits[self.split_names["train"]][0][self.image_column]
        self.mode, self.square, info = first_image_info(open_row_image(first, dataset_folders(root), root), num_classes)
        self.info, self.statistics_note = hub_statistics(root, self.classes, info)

    def _labels(self, split: str) -> tuple[int, int]:
        """The smallest and largest label of `split`; an error unless every row has an integer label."""
        import pyarrow as pa
        import pyarrow.compute as pc

        data = self.splits[split]
        where = f"split {split!r} of {self.root!r}, column {self.label_column!r}"
        require(self.label_column in data.column_names, "data.label_column", f"{where}: no such column")
        labels = data.with_format("arrow")[self.label_column]
        require(
            pa.types.is_integer(labels.type),
            "data.label_column",
            f"{where} holds {labels.type} values, not class numbers",
            "encode them, e.g. dataset.class_encode_column(column)",
        )
        require(labels.null_count == 0, "data.label_column", f"{where}: {labels.null_count} rows have no label")
        found = pc.min_max(labels)
        return found["min"].as_py() or 0, found["max"].as_py() or 0

    def load(self, split: str) -> Dataset:
        return HFImages(
            self.splits[self.split_names[split]], self.image_column, self.label_column, self.mode, self.root
        )
