"""A Hugging Face dataset read as a stream (``data.dataset: hf``, ``data.streaming: true``): its facts from
the features, the first training example and the split sizes of its card, without downloading it; its
splits are `mixer_lightning.data.streaming.StreamImages` (the order, the loader, exact resume)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from mixer_lightning.data.sources.base import DatasetSource, first_image_info
from mixer_lightning.data.sources.huggingface import (
    HF_IMAGE_COLUMNS,
    HF_LABEL_COLUMNS,
    HF_SPLITS,
    HuggingFace,
    hub_statistics,
    load_hf,
)
from mixer_lightning.data.streaming import StreamImages
from mixer_lightning.errors import require


class HuggingFaceStream(DatasetSource):
    """A Hugging Face dataset read as a stream (hub id or local folder, as `HuggingFace`).

    The classes come from the label's ClassLabel feature (or ``data.num_classes``); the image size and
    channels from the first training example; each split's number of examples from the dataset card
    (``dataset_info``) or, for local parquet files, from their footers (no image is read)."""

    name = "hf"
    streaming: ClassVar[bool] = True
    options: ClassVar[tuple[str, ...]] = ("image_column", "label_column", "num_classes")

    def __init__(
        self,
        root: str,
        download: bool,
        image_column: str | None = None,
        label_column: str | None = None,
        num_classes: int | None = None,
    ):
        super().__init__(root, download)
        import datasets

        self.splits = splits = load_hf(root, streaming=True)
        self.split_names = {split: next((n for n in names if n in splits), None) for split, names in HF_SPLITS.items()}
        require(
            self.split_names["train"] is not None,
            "data.root",
            f"{root!r} has no train split (it has {', '.join(splits)})",
        )
        train = splits[self.split_names["train"]]
        features = train.features
        require(
            features is not None, "data.root", f"{root!r} declares no features to stream", "use data.streaming: false"
        )
        self.image_column = HuggingFace._column(self, features, image_column, HF_IMAGE_COLUMNS, "image_column", "Image")
        self.label_column = HuggingFace._column(
            self, features, label_column, HF_LABEL_COLUMNS, "label_column", "ClassLabel"
        )
        label = features[self.label_column]
        self.classes = list(label.names) if isinstance(label, datasets.ClassLabel) else None
        if num_classes is None:
            require(
                self.classes is not None,
                "data.num_classes",
                f"the labels of {root!r} (column {self.label_column!r}) are plain numbers, which a stream cannot count "
                "before training",
                "set data.num_classes",
            )
            num_classes = len(self.classes)
        require(num_classes >= 2, "data.num_classes", f"must be >= 2, got {num_classes}")
        if self.classes is not None and len(self.classes) != num_classes:
            self.classes = None
        first = next(iter(train.take(1)), None)
        require(first is not None, "data.root", f"the train split of {root!r} is empty")
        if self.split_names["test"] is not None:  # the hub's ImageNet: test labels are -1
            example = next(iter(splits[self.split_names["test"]].take(1)), None)
            if example is None or example.get(self.label_column) in (None, -1):
                self.split_names["test"] = None
        if self.split_names["test"] is None:
            self.split_names["test"] = self.split_names["val"]
        require(
            self.split_names["test"] is not None,
            "data.root",
            f"{root!r} has no labelled test or validation split (it has {', '.join(splits)})",
            "give a dataset with a labelled test (or validation) split",
        )
        self.has_val = self.split_names["val"] is not None and self.split_names["val"] != self.split_names["test"]
        self.mode, self.square, self.info = first_image_info(first[self.image_column], num_classes)
        self.info, self.statistics_note = hub_statistics(root, self.classes, self.info)  # CIFAR's, when a CIFAR
        self._sizes: dict[str, int | None] = {}

    def size(self, split: str) -> int:
        """The number of examples of `split` (a role: train, val, test), without streaming it."""
        name = self.split_names[split]
        if name not in self._sizes:
            self._sizes[name] = _split_size(self.root, name)
        found = self._sizes[name]
        require(
            found is not None,
            "data.root",
            f"the number of examples of the {name!r} split of {self.root!r} is unknown (no dataset_info in its card, "
            "not local parquet files)",
            "use data.streaming: false, or a dataset whose card gives the split sizes",
        )
        return int(found)

    def load(self, split: str) -> StreamImages:
        import datasets

        name = self.split_names[split]
        stream = self.splits[name].cast_column(self.image_column, datasets.Image(decode=False))
        return StreamImages(
            stream,
            self.size(split),
            name,
            self.root,
            self.image_column,
            self.label_column,
            self.mode,
            self.info.num_classes,
        )


def _split_size(root: str, split: str) -> int | None:
    """`split`'s number of examples: from the dataset card, else the row counts in local parquet footers."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(root)
    except Exception:
        return None
    splits = builder.info.splits or {}
    if split in splits and splits[split].num_examples:
        return int(splits[split].num_examples)
    files = (builder.config.data_files or {}).get(split) or []
    if not files or not all(str(f).endswith(".parquet") and Path(str(f)).is_file() for f in files):
        return None
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(str(f)).metadata.num_rows for f in files)
