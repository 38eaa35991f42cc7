"""Dataset sources: where the images of each named dataset come from, and what they are.

A source knows its facts (`DatasetInfo`: classes, image size, channels, normalisation) at
construction, cheaply (constants, class-folder names, or a Hugging Face dataset's features and first
image), so the CLI can link them into the model before any image is decoded, and it loads its
official splits as datasets of ``(image, label)`` pairs. Images are PIL images, or tensors for the
in-memory ``digits``. Adding a dataset is one class (in the module of its format: `builtin`,
`folder`, `huggingface`, `webdataset`, or a new one beside them) and one entry in `DATASETS`.
``hf`` with ``data.streaming: true`` is `huggingface_stream` (a stream, never downloaded whole).

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
wds         WebDataset tar shards (a folder or a brace pattern)   224    labels  if any
=========== ===================================================== ====== ======= =====
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mixer_lightning.data.sources.base import SHARED_OPTIONS, SPLITS, DatasetInfo, DatasetSource
from mixer_lightning.data.sources.builtin import CIFAR10, CIFAR100, MNIST, STL10, Digits
from mixer_lightning.data.sources.folder import Folder, ImageNet
from mixer_lightning.data.sources.huggingface import HuggingFace
from mixer_lightning.data.sources.webdataset import WebDataset
from mixer_lightning.errors import ConfigError, require

DATASETS: dict[str, Callable[..., DatasetSource]] = {
    cls.name: cls for cls in (Digits, CIFAR10, CIFAR100, STL10, MNIST, ImageNet, Folder, HuggingFace, WebDataset)
}


def get_source(name: str, root: str, download: bool, **options: Any) -> DatasetSource:
    """The source `name` reading from `root`; `options` (hf's column names, wds's number of classes, ...)
    go to the sources that take them (their ``options``); ``streaming`` picks hf's streaming source."""
    if name not in DATASETS:
        raise ConfigError("data.dataset", f"unknown dataset {name!r}", f"choose one of {', '.join(DATASETS)}")
    cls = DATASETS[name]
    if options.pop("streaming", False):
        require(name == HuggingFace.name, "data.streaming", f"only the hf dataset streams, not {name}", "remove it")
        from mixer_lightning.data.sources.huggingface_stream import HuggingFaceStream as cls
    taken = getattr(cls, "options", ())
    for option, value in options.items():
        if option not in taken and value is not None and option not in SHARED_OPTIONS:
            takers = [n for n, c in DATASETS.items() if option in getattr(c, "options", ())]
            raise ConfigError(
                f"data.{option}", f"only the {' and '.join(takers)} dataset takes it, not {name}", "remove it"
            )
    return cls(root, download, **{option: value for option, value in options.items() if option in taken})


__all__ = ["DATASETS", "SPLITS", "DatasetInfo", "DatasetSource", "get_source"]
