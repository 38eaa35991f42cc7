"""Dataset sources: where the images of each named dataset come from, and what they are.

A source knows its facts (`DatasetInfo`: classes, image size, channels, normalisation) at
construction, cheaply (constants, class-folder names, or a Hugging Face dataset's features and first
image), so the CLI can link them into the model before any image is decoded, and it loads its
official splits as datasets of ``(image, label)`` pairs. Adding a dataset is one class (in the module
of its format) and one entry in `DATASETS`. ``hf`` with ``data.streaming: true`` is
`huggingface_stream` (a stream, never downloaded whole).

=========== ===================================================== ====== ======= =====
name        on disk (under ``data.root``)                          size   classes val
=========== ===================================================== ====== ======= =====
digits      nothing (scikit-learn's bundled 8×8 digits)            8      10      no
cifar10     torchvision: ``cifar-10-batches-py/``                  32     10      no
cifar100    torchvision: ``cifar-100-python/`` (fine labels)        32     100     no
stl10       torchvision: ``stl10_binary/`` (labelled train/test)   96     10      no
mnist       torchvision: ``MNIST/raw/``                            28     10      no
imagenet    ImageFolder: ``train/<class>/…``, ``val/<class>/…``    224    1000    yes
folder      ImageFolder: ``train/``, ``val/`` (``test/`` optional) first  folders yes
hf          a Hugging Face hub id, or a local folder in its layout first   feature  if any
wds         WebDataset tar shards (a folder or a brace pattern)   first  labels  if any
=========== ===================================================== ====== ======= =====
"""

from __future__ import annotations

from typing import Any

from mixer_lightning.data.sources.base import SPLITS, DatasetInfo, DatasetSource
from mixer_lightning.data.sources.builtin import CIFAR10, CIFAR100, MNIST, STL10, Digits
from mixer_lightning.data.sources.folder import Folder, ImageNet
from mixer_lightning.data.sources.huggingface import HuggingFace
from mixer_lightning.data.sources.webdataset import WebDataset
from mixer_lightning.errors import ConfigError, require

DATASETS: dict[str, type[DatasetSource]] = {
    cls.name: cls for cls in (Digits, CIFAR10, CIFAR100, STL10, MNIST, ImageNet, Folder, HuggingFace, WebDataset)
}


def get_source(
    name: str, root: str, download: bool, streaming: bool = False, cache_dir: str | None = None, **options: Any
) -> DatasetSource:
    """The source `name` reading from `root`; `options` (hf's column names, wds's number of classes) go to
    the sources that take them, and one given to a source that would ignore it is an error."""
    if name not in DATASETS:
        raise ConfigError("data.dataset", f"unknown dataset {name!r}", f"choose one of {', '.join(DATASETS)}")
    cls = DATASETS[name]
    if streaming:
        require(name == HuggingFace.name, "data.streaming", f"only the hf dataset streams, not {name}")
        from mixer_lightning.data.sources.huggingface_stream import HuggingFaceStream as cls
    for option, value in options.items():
        require(value is None or option in cls.options, f"data.{option}", f"the {name} dataset does not take it")
    taken = {key: value for key, value in {**options, "cache_dir": cache_dir}.items() if key in cls.options}
    return cls(root, download, **taken)


__all__ = ["DATASETS", "SPLITS", "DatasetInfo", "DatasetSource", "get_source"]
