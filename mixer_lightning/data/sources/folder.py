"""Images in class folders (torchvision's ImageFolder layout): ``folder`` and ``imagenet``, and the
listing of image files (`image_files`) that `mixer predict` and `mixer data pack` share."""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetSource, natural_info
from mixer_lightning.errors import ConfigError, require


def image_files(folder: str | Path, extensions: tuple[str, ...]) -> list[str]:
    """The image files under `folder` (any depth, links followed), in torchvision ImageFolder's order."""
    walk = sorted(os.walk(folder, followlinks=True))
    return [
        os.path.join(d, name) for d, _, names in walk for name in sorted(names) if name.lower().endswith(extensions)
    ]


def rgb_loader(path: str) -> Any:
    """The image file `path` as 8-bit RGB (torchvision's ``pil_loader``, but 16-bit images scaled, not
    clipped: `pil_path.to_mode`)."""
    from PIL import Image

    from mixer_lightning.data.pil_path import to_mode

    with open(path, "rb") as f:
        return to_mode(Image.open(f), "RGB")


class Folder(DatasetSource):
    """Images in class folders (torchvision ImageFolder): ``root/train/<class>/*``, ``root/val/<class>/*``,
    optionally ``root/test/<class>/*`` (else the test split is ``val``). The classes are the folder names
    of ``root/train``, read without opening an image. Every image is converted to RGB (ImageNet holds a
    few grey and CMYK JPEGs)."""

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
        )
        self.classes = sorted(entry.name for entry in os.scandir(train) if entry.is_dir())
        self.info = natural_info(len(self.classes), self.default_size)

    def load(self, split: str) -> Dataset:
        from torchvision.datasets import ImageFolder

        folder = Path(self.root) / split
        if split == "test" and not folder.is_dir():
            folder = Path(self.root) / "val"
        try:
            dataset = ImageFolder(str(folder), loader=rgb_loader)
        except FileNotFoundError as error:  # a class folder without images (torchvision names them)
            raise ConfigError("data.root", str(error).split(". Supported")[0], "remove it or add its images") from None
        # A file reached by several paths (a folder linked twice, a link loop: torchvision follows links) is one
        # sample, by its most direct path (a loop reaches other classes' images from inside a class folder); a
        # path too deep in a loop to open (ELOOP) is none.
        direct: dict[tuple[int, int], str] = {}
        for path, _ in dataset.samples:
            with contextlib.suppress(OSError):
                key = (os.stat(path).st_dev, os.stat(path).st_ino)
                direct[key] = min(direct.get(key, path), path, key=lambda p: (p.count(os.sep), p))
        kept = set(direct.values())
        samples = [(path, label) for path, label in dataset.samples if path in kept]
        if len(samples) < len(dataset.samples):
            problem = f"{len(dataset.samples) - len(samples)} paths under {str(folder)!r} lead to images read already"
            warnings.warn(f"data.root: {problem} (symbolic links): each image is read once", stacklevel=2)
            dataset.samples = dataset.imgs = samples
            dataset.targets = [label for _, label in samples]
        # Labels are positions in the sorted class folders: other folders would silently relabel the images.
        require(
            dataset.classes == self.classes,
            "data.root",
            f"the class folders of {folder} differ from those of {Path(self.root) / 'train'}",
        )
        return dataset


class ImageNet(Folder):
    """ImageNet-1k as an ImageFolder (``root/train/n01440764/*.JPEG``, ``root/val/n01440764/*.JPEG``, val
    sorted into class folders). The test split is ``val`` (ImageNet's test labels are not public), as in
    both papers."""

    name = "imagenet"
