"""Images in class folders (torchvision's ImageFolder layout): ``folder`` and ``imagenet``, and the
listing of image files (`image_files`) that `mixer predict` and `mixer data pack` share."""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetSource, digest, image_size_of, natural_info
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


def first_image(folder: Path, classes: list[str]) -> Path | None:
    """The first image of the class folders `classes` of `folder` in ImageFolder's order, found without
    listing more than the folders before it."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    for name in classes:
        for directory, subfolders, files in os.walk(folder / name, followlinks=True):
            subfolders.sort()
            found = next((f for f in sorted(files) if f.lower().endswith(IMG_EXTENSIONS)), None)
            if found is not None:
                return Path(directory) / found
    return None


class Folder(DatasetSource):
    """Images in class folders (torchvision ImageFolder): ``root/train/<class>/*``, ``root/val/<class>/*``,
    optionally ``root/test/<class>/*`` (else the test split is ``val``). The classes are the folder names
    of ``root/train``; the image size is that of the first training image (its header only), as ``hf``'s:
    32 px images are CIFAR-like (pad-and-crop, no evaluation crop), not upscaled to 224. Every image is
    converted to RGB (ImageNet holds a few grey and CMYK JPEGs)."""

    name = "folder"
    default_size: ClassVar[int | None] = None  # None: the first image's
    has_val = True

    def __init__(self, root: str, download: bool):
        super().__init__(root, download)
        train = Path(root) / "train"
        require(
            train.is_dir() and (Path(root) / "val").is_dir(),
            "data.root",
            f"{self.name} needs class folders {str(train.resolve())!r} and {str(train.resolve().parent / 'val')!r}",
        )
        self.classes = sorted(entry.name for entry in os.scandir(train) if entry.is_dir())
        self.test_is_val = not (Path(root) / "test").is_dir()
        size = self.default_size
        if size is None and (path := first_image(train, self.classes)) is not None:
            width, height = image_size_of(path, repr(str(path)))
            size, self.square = max(width, height), width == height
        self.info = natural_info(len(self.classes), size or 224)  # no image: ImageFolder says so at load

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
        sizes: dict[str, int] = {}
        for path, _ in dataset.samples:
            with contextlib.suppress(OSError):
                info = os.stat(path)
                key, sizes[path] = (info.st_dev, info.st_ino), info.st_size
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
        if split == "train":  # what the images are, wherever the folder lies (a resume's `RunFingerprint`)
            self.content = digest(f"{os.path.relpath(p, folder)}\0{sizes.get(p)}\0{label}" for p, label in samples)
        return dataset


class ImageNet(Folder):
    """ImageNet-1k as an ImageFolder (``root/train/n01440764/*.JPEG``, ``root/val/n01440764/*.JPEG``, val
    sorted into class folders). The test split is ``val`` (ImageNet's test labels are not public), as in
    both papers."""

    name = "imagenet"
    default_size = 224
