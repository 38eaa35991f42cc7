"""A Hugging Face dataset (``hf``): a hub id or a local folder in the hub's layout, read with
`datasets.load_dataset` (Arrow, memory-mapped)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetInfo, DatasetSource, first_image_info
from mixer_lightning.data.sources.builtin import CIFAR10, CIFAR100
from mixer_lightning.data.sources.folder import _decompression_bomb
from mixer_lightning.errors import ConfigError, require

# Column names of image and label in the Hugging Face datasets the papers use (CIFAR-10 has
# `img`/`label`, CIFAR-100 `img`/`fine_label`, ImageNet-1k `image`/`label`).
HF_IMAGE_COLUMNS = ("img", "image")
HF_LABEL_COLUMNS = ("label", "fine_label", "labels")
HF_SPLITS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}
# Hub datasets whose torchvision twin the project knows: the same images, so the same facts (CIFAR's
# mean/std, not ImageNet's). A local copy is recognised by its content (`known_twin`).
HF_TWINS = {
    "uoft-cs/cifar10": CIFAR10,
    "cifar10": CIFAR10,
    "uoft-cs/cifar100": CIFAR100,
    "cifar100": CIFAR100,
}


def known_twin(root: str, class_names: Any, info: DatasetInfo) -> type | None:
    """The torchvision source (`CIFAR10`, `CIFAR100`) whose images these are: named by its hub id, or a
    copy anywhere whose class names are that dataset's, in its order, at its image size and channels."""
    twin = HF_TWINS.get(str(root).strip("/").lower())
    candidates = [twin] if twin is not None else [CIFAR10, CIFAR100]
    names = tuple(class_names) if class_names is not None else None
    for source in candidates:
        expected = source.info
        same_images = (info.image_size, info.in_chans, info.num_classes) == (
            expected.image_size,
            expected.in_chans,
            expected.num_classes,
        )
        if same_images and (source is twin or names == source.known_classes):
            return source
    return None


def hub_statistics(root: str, class_names: Any, info: DatasetInfo) -> tuple[DatasetInfo, str | None]:
    """The facts of a hub dataset known by its first image (`info`), with the statistics it needs: a
    copy of CIFAR-10/100 gets CIFAR's (`known_twin`; the torchvision source's `DatasetInfo` itself), and
    the second value is the line a user should read when ImageNet's mean/std are applied to small
    colour images (where they are the wrong guess most often), else None."""
    twin = known_twin(root, class_names, info)
    if twin is not None:
        return twin.info, None
    if info.in_chans == 3 and info.small:
        return info, (
            f"data   normalised with ImageNet's mean/std: the hf dataset {root!r} has {info.image_size} px colour "
            "images; set data.mean and data.std if its own differ"
        )
    return info, None


def load_hf(root: str, streaming: bool = False) -> Any:
    """`datasets.load_dataset(root)` (streamed: `streaming`) as a dict of splits; a one-line error when it
    cannot be loaded."""
    import datasets

    unreachable = _hub_unreachable(root)
    if unreachable is not None:
        raise ConfigError(
            "data.root",
            f"{root!r} is not a local folder, and the Hugging Face hub cannot be reached: {unreachable}",
            "point --data.root at a local copy in the hub's layout (data/train-*.parquet), or set HF_HUB_OFFLINE=1 "
            "to read the hub's cache",
        )
    try:
        splits = datasets.load_dataset(root, streaming=streaming)
    except Exception as error:  # a missing folder or hub id, no network, no data files
        raise ConfigError(
            "data.root",
            f"cannot {'stream' if streaming else 'load'} the Hugging Face dataset {root!r} ({type(error).__name__}: {error})",
            "give a hub id or a local folder in the hub's layout (e.g. data/train-*.parquet)",
        ) from None
    if isinstance(splits, (datasets.Dataset, datasets.IterableDataset)):  # one split: the training images
        splits = (datasets.IterableDatasetDict if streaming else datasets.DatasetDict)(train=splits)
    return splits


def _hub_unreachable(root: str) -> str | None:
    """Why the hub cannot be reached (`mixer_lightning.hub.offline_or_reachable`: one TCP connection with
    a short timeout), or None when it can, when `root` is a local folder or a path (not a hub id), or in
    offline mode (the cache is read). Without it, a hub id with no network takes about a minute of
    huggingface_hub's retries to fail."""
    import os
    import re

    offline = any(os.environ.get(name, "") not in ("", "0") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    hub_id = re.fullmatch(r"[\w-][\w.-]*(/[\w.-]+)?", str(root)) is not None  # name or owner/name, not a path
    if not hub_id or Path(root).expanduser().exists() or offline:
        return None
    from mixer_lightning.hub import offline_or_reachable

    return offline_or_reachable()


class HFImages(Dataset):
    """(PIL image, label) pairs of a Hugging Face `datasets.Dataset`; `__getitems__` reads a whole batch
    in one Arrow query, as ``Dataset.with_transform`` does."""

    def __init__(self, dataset: Any, image_column: str, label_column: str, mode: str):
        self.dataset = dataset
        self.image_column, self.label_column, self.mode = image_column, label_column, mode

    def __len__(self) -> int:
        return len(self.dataset)

    def _convert(self, image: Any) -> Any:
        from mixer_lightning.data.pil_path import to_mode

        return image if image.mode == self.mode else to_mode(image, self.mode)  # 16-bit scaled, not clipped

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
    options: ClassVar[tuple[str, ...]] = ("image_column", "label_column")

    def __init__(self, root: str, download: bool, image_column: str | None = None, label_column: str | None = None):
        super().__init__(root, download)
        import datasets

        self.splits = load_hf(root)
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
        self.mode, self.square, self.info = first_image_info(train[0][self.image_column], num_classes)
        names = label.names if isinstance(label, datasets.ClassLabel) else None
        self.info, self.statistics_note = hub_statistics(root, names, self.info)

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
