"""Images in class folders (torchvision's ImageFolder layout): ``folder`` and ``imagenet``, and the
listing of image files (`image_files`) that `mixer predict` and `mixer data pack` share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetSource, natural_info
from mixer_lightning.errors import require


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
        dataset = ImageFolder(str(folder), loader=rgb_loader)
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
