"""The PIL data path: each image read and transformed on its own (`TransformedDataset`), in DataLoader
workers; the path for every augmentation, and the reads the tensor path's decoding shares. `to_mode`
is the one conversion of a decoded file to the model's channels that every reader uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image
from torch.utils.data import Dataset

from mixer_lightning.data.sampling import seeded
from mixer_lightning.errors import ConfigError

# What PIL raises for a file that is no image, a truncated one, and one over PIL.Image.MAX_IMAGE_PIXELS.
UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def to_mode(image: Any, mode: str) -> Any:
    """`image` (a PIL image) converted to `mode` (``RGB`` or ``L``), as 8-bit pixels, in a new image.

    PIL's ``convert`` clips 16-bit grey images to 0..255 (a 16-bit PNG becomes nearly white); here they
    keep their top 8 bits (``v >> 8``: an 8-bit image stored as 16 bits, v × 257, comes back exactly).
    A mode ``I`` PNG is 16-bit (older Pillow opens them so); any other ``I`` or ``F`` image has no known
    range and is refused (a ValueError: the readers name the file)."""
    import numpy as np

    if image.mode in SIXTEEN_BIT_MODES or (image.mode == "I" and getattr(image, "format", None) == "PNG"):
        values = np.asarray(image)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ValueError(f"a mode {image.mode} image with values {values.min()}..{values.max()}")
        image = Image.fromarray((values.astype(np.uint32) >> 8).astype(np.uint8), "L")
    elif image.mode in ("I", "F") or image.mode.startswith("I;"):
        raise ValueError(f"a mode {image.mode} image of unknown range: convert it to 8 or 16 bits per channel")
    return image.convert(mode)  # a copy even in the same mode: the caller may close the file behind `image`


def sample_name(base: Any, index: int) -> str:
    """How an error names sample `index` of `base`: its file (ImageFolder), its shard, or its number."""
    if hasattr(base, "name_of"):
        return repr(base.name_of(index))
    samples = getattr(base, "samples", None)  # ImageFolder: (path, class) pairs
    return repr(samples[index][0]) if samples is not None else f"number {index} of the dataset"


class TransformedDataset(Dataset):
    """(image, label) pairs of `base` (optionally restricted to `indices`) with `transform` on the image.

    Keys are plain indices, or ``(sample_seed, index)`` pairs from `KeyedBatchSampler` (training): then the
    image's random augmentation runs under `sampling.seeded(sample_seed)`, a function of (seed, epoch,
    index) whichever process or worker computes it. A batch is read with the base dataset's
    ``__getitems__`` when it has one (a Hugging Face dataset answers a batch with one Arrow query)."""

    def __init__(self, base: Dataset, transform: Callable | None, indices: Sequence[int] | None = None):
        self.base = base
        self.transform = transform
        self.indices = None if indices is None else list(indices)

    def __len__(self) -> int:
        return len(self.base) if self.indices is None else len(self.indices)

    def _apply(self, image: Any, label: Any, sample_seed: int | None = None) -> tuple[Any, int]:
        if self.transform is not None:
            if sample_seed is None:
                image = self.transform(image)
            else:
                with seeded(sample_seed):
                    image = self.transform(image)
        return image, int(label)

    def _base_index(self, index: int) -> int:
        return index if self.indices is None else self.indices[index]

    def _read(self, index: int) -> tuple[Any, Any]:
        """The base dataset's sample `index`; a `ConfigError` naming the file if it cannot be decoded."""
        try:
            return self.base[index]
        except UNREADABLE as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            where = sample_name(self.base, index)
            raise ConfigError("data.root", f"cannot read image {where} ({reason})", "delete or replace it") from None

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        sample_seed, index = key if isinstance(key, tuple) else (None, key)
        return self._apply(*self._read(self._base_index(index)), sample_seed)

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[Any, int]]:
        pairs = [key if isinstance(key, tuple) else (None, key) for key in keys]
        indices = [self._base_index(index) for _, index in pairs]
        getitems = getattr(self.base, "__getitems__", None)
        try:
            samples = getitems(indices) if getitems is not None else None
        except UNREADABLE:
            samples = None  # one bad image in the batch: read one by one to name it
        if samples is None:
            samples = [self._read(i) for i in indices]
        return [self._apply(image, label, seed) for (image, label), (seed, _) in zip(samples, pairs, strict=True)]
