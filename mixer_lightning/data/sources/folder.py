"""Images in class folders (torchvision's ImageFolder layout): ``folder`` and ``imagenet``, and the
listing of image files (`image_files`) that `mixer predict` shares."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset

from mixer_lightning.data.sources.base import DatasetSource, natural_info
from mixer_lightning.errors import ConfigError, require


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


def rgb_loader(path: str) -> Any:
    """The image file `path` as 8-bit RGB (torchvision's ``pil_loader``, but 16-bit images scaled, not
    clipped: `pil_path.to_mode`)."""
    from PIL import Image

    from mixer_lightning.data.pil_path import to_mode

    with open(path, "rb") as f:
        return to_mode(Image.open(f), "RGB")


class RGBImageFolder(Dataset):
    """Images in class folders (torchvision's ImageFolder layout, ``root/<class>/**/*.jpg``), converted
    to RGB (ImageNet holds a few grey and CMYK JPEGs).

    The files are listed by `image_files` (a symlink loop is read once); a class folder without images,
    a split without any, and a decompression bomb are one-line errors naming the path."""

    def __init__(self, root: str):
        from torchvision.datasets.folder import IMG_EXTENSIONS

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
        self.loader = rgb_loader

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
        self.info = natural_info(len(self.classes), self.default_size)

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
