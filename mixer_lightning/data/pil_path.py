"""The PIL data path: each image read and transformed on its own (`TransformedDataset`), in DataLoader
workers; the path for every augmentation, and the reads the tensor path's decoding shares
(`mixer_lightning.data.cache.decode`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset

from mixer_lightning.data.sampling import seeded
from mixer_lightning.errors import ConfigError


class TransformedDataset(Dataset):
    """(image, label) pairs of `base` (optionally restricted to `indices`) with `transform` on the image.

    Keys are plain indices, or ``(sample_seed, index)`` pairs from `KeyedBatchSampler` (training): then
    the image's random augmentation runs with the RNGs seeded by sample_seed (`sampling.seeded`), so it
    is a function of (seed, epoch, index) whichever process or worker computes it.
    A batch is read with the base dataset's ``__getitems__`` when it has one (a Hugging Face dataset
    answers a whole batch with one Arrow query), as the DataLoader asks for whole batches.
    """

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
        except (OSError, SyntaxError, ValueError) as error:  # PIL: UnidentifiedImageError, truncated files
            samples = getattr(self.base, "samples", None)  # ImageFolder: (path, class) pairs
            where = repr(samples[index][0]) if samples is not None else f"number {index} of the dataset"
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(
                "data.root", f"cannot read image {where} ({reason})", "delete or replace that file"
            ) from None

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        sample_seed, index = key if isinstance(key, tuple) else (None, key)
        return self._apply(*self._read(self._base_index(index)), sample_seed)

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[Any, int]]:
        pairs = [key if isinstance(key, tuple) else (None, key) for key in keys]
        indices = [self._base_index(index) for _, index in pairs]
        getitems = getattr(self.base, "__getitems__", None)
        try:
            samples = getitems(indices) if getitems is not None else None
        except (OSError, SyntaxError, ValueError):
            samples = None  # one bad image in the batch: read one by one to name it
        if samples is None:
            samples = [self._read(i) for i in indices]
        return [self._apply(image, label, seed) for (image, label), (seed, _) in zip(samples, pairs, strict=True)]
