"""A Hugging Face dataset read as a stream (``data.dataset: hf``, ``data.streaming: true``): its facts from
the features, the first training example and the split sizes (local parquet files: their footers; else
its card), without downloading it; its splits are `mixer_lightning.data.streaming.StreamImages` (the order,
the loader, exact resume)."""

from __future__ import annotations

from pathlib import Path

from mixer_lightning.data.sources.base import DatasetSource, first_image_info, say
from mixer_lightning.data.sources.huggingface import (
    HF_IMAGE_COLUMNS,
    HF_LABEL_COLUMNS,
    dataset_folders,
    find_column,
    hub_statistics,
    load_hf,
    no_test_labels,
    open_row_image,
    split_names,
)
from mixer_lightning.data.streaming import StreamImages
from mixer_lightning.errors import require


class HuggingFaceStream(DatasetSource):
    """A Hugging Face dataset read as a stream (hub id or local folder, as `HuggingFace`). The classes
    come from the label's ClassLabel feature (or ``data.num_classes``); the image size and channels from
    the first training example; each split's size from the footers of local parquet files (no image
    is read), else from the dataset card (``dataset_info``)."""

    name = "hf"
    streaming = True
    options = ("image_column", "label_column", "num_classes")

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

        self.splits = load_hf(root, streaming=True)
        self.split_names = split_names(self.splits, root)
        train = self.splits[self.split_names["train"]]
        features = train.features
        require(features is not None, "data.root", f"{root!r} declares no features", "use data.streaming: false")
        self.image_column = find_column(root, features, image_column, HF_IMAGE_COLUMNS, "image_column", "Image")
        self.label_column = find_column(root, features, label_column, HF_LABEL_COLUMNS, "label_column", "ClassLabel")
        label = features[self.label_column]
        self.classes = list(label.names) if isinstance(label, datasets.ClassLabel) else None
        num_classes = num_classes or (len(self.classes) if self.classes else None)
        require(
            num_classes is not None,
            "data.num_classes",
            f"the labels of {root!r} are plain numbers, which a stream cannot count before training",
        )
        if self.classes is not None and len(self.classes) != num_classes:
            self.classes = None
        no_test_labels(self.splits, self.split_names, self.label_column, streamed=True)
        self.has_val = self.split_names["val"] not in (None, self.split_names["test"])
        first = next(iter(train.cast_column(self.image_column, datasets.Image(decode=False)).take(1)))
        first = open_row_image(first[self.image_column], dataset_folders(root), root)  # a path: inside the dataset
        self.mode, self.square, info = first_image_info(first, num_classes)
        self.info, self.statistics_note = hub_statistics(root, self.classes, info)
        self._sizes: dict[str, int | None] = {}

    def size(self, split: str) -> int:
        """The number of examples of `split` (a role: train, val, test), without streaming it."""
        name = self.split_names[split]
        if name not in self._sizes:
            self._sizes[name] = _split_size(self.root, name)
        problem = f"the size of its {name!r} split is unknown (no dataset_info in its card, not parquet files)"
        require(self._sizes[name] is not None, "data.root", problem, "use data.streaming: false")
        return int(self._sizes[name])

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
    """`split`'s number of examples: for local parquet files the row counts in their footers (what the stream
    will read; a card that says otherwise is said), else the dataset card's ``dataset_info``."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(root)
    except Exception:  # noqa: BLE001 - no card: the size is unknown
        return None
    card = (builder.info.splits or {}).get(split)
    card = int(card.num_examples) if card is not None and card.num_examples else None
    files = [str(f) for f in (builder.config.data_files or {}).get(split) or []]
    if not files or not all(f.endswith(".parquet") and Path(f).is_file() for f in files):
        return card
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if card is not None and card != rows:
        say(f"data   {root!r}: its card gives the {split!r} split {card:,} examples, its parquet files hold {rows:,}")
    return rows
