"""The tensor data path: each split decoded once into a uint8 tensor, whole batches augmented on the
training device.

For CIFAR/STL-size data the model's training step is cheap, and the per-image PIL pipeline (decode,
crop, flip, to-tensor, normalise, one image at a time, through worker processes) costs a large share
of it on a CPU and would starve a GPU. Here:

1. `batched.batched_plan` reads the very transform the PIL path would run (`transforms.train_transform`
   / `eval_transform`) and splits it into a deterministic prefix (resizes, centre crops: applied once,
   when decoding) and the random steps that have a batched form: torchvision's ``RandomCrop`` with
   zero padding and ``RandomHorizontalFlip``, then the fused normalisation. Any other step
   (RandAugment, AutoAugment, AugMix, colour jitter, random erasing, the random-resized crop) has no
   batched form: the data module keeps the PIL path for it (`NoBatchedForm` names the field).
2. `cache.load_or_decode` runs the prefix over a split once, through the same reads as the PIL path,
   into an (N, C, H, W) uint8 tensor, and caches it on disk (`cache.cache_file`, checked on every
   read): keyed by the files the readers read (or a Hugging Face dataset's fingerprint), the prefix
   and `LOADER_VERSION`, so a changed source or prefix decodes again. Loaded memory-mapped: parallel
   runs on one machine share the page cache.
3. Loaders yield small key batches: base indices, and for training the crop offsets and flips of each
   image, drawn exactly as the PIL path draws them (torch's generator seeded by the sample seed
   (seed, epoch, index) of `sampling.KeyedBatchSampler`, the calls of torchvision's ``RandomCrop`` and
   ``RandomHorizontalFlip`` in their order). The data module's ``on_after_batch_transfer`` turns them
   into images on the device (`DecodedImages.materialize`): gather, pad, crop, flip, normalise, in a
   few tensor operations. The result equals the PIL path's batch bit for bit (tests/test_data_tensor.py),
   so resuming, worker counts and DDP shards behave exactly as there.

Here: the datasets the tensor path's loaders read (`DecodedImages`, `KeyView`, `KeyCollate`), and the
choice between the paths (``data.pipeline``: `batched_plans`, `TensorPath`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from torch.utils.data import Dataset

from mixer_lightning.data.batched import BatchedPlan, NoBatchedForm, batched_plan
from mixer_lightning.data.cache import (
    DecodedSplit,
    Loaded,
    NotDecodable,
    cache_file,
    cache_key,
    default_cache_dir,
    load_or_decode,
)
from mixer_lightning.data.transforms import InputPermutation
from mixer_lightning.errors import require

Pipeline = Literal["auto", "tensor", "pil"]
PIPELINES = ("auto", "tensor", "pil")


@rank_zero_only
def warn(line: str) -> None:
    """A ``mixer: warning:`` line on stderr (once, from rank zero), as the command line prints its own."""
    print(f"mixer: warning: {line}", file=sys.stderr, flush=True)


class DecodedImages(Dataset):
    """(image, label) pairs of a decoded split (optionally restricted to `indices`), augmented by a
    `BatchedPlan` (training) and permuted (`InputPermutation`), like `pil_path.TransformedDataset`.

    Keys are positions, or ``(sample_seed, position)`` pairs from `KeyedBatchSampler` (training). As a
    dataset it answers normalised CPU tensors (what ``mixer cka`` / ``mixer fewshot`` read); its
    loaders read `key_view` instead, whose batches `materialize` turns into images on the device.
    """

    def __init__(
        self,
        decoded: DecodedSplit,
        plan: BatchedPlan,
        indices: Sequence[int] | None,
        permutation: InputPermutation | None,
        split: str,
    ):
        self.decoded, self.plan, self.permutation, self.split = decoded, plan, permutation, split
        self.indices = None if indices is None else list(indices)
        self._index = None if indices is None else torch.as_tensor(self.indices, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.decoded.labels) if self.indices is None else len(self.indices)

    def keys(self, keys: Sequence[int | tuple[int, int]]) -> dict[str, Any]:
        """The key batch of `keys`: base indices, and the draws of each image when the plan has any."""
        pairs = [key if isinstance(key, tuple) else (None, key) for key in keys]
        positions = torch.as_tensor([int(position) for _, position in pairs], dtype=torch.long)
        index = positions if self._index is None else self._index[positions]
        batch: dict[str, Any] = {"split": self.split, "index": index}
        if self.plan.random:
            if any(seed is None for seed, _ in pairs):
                raise ValueError("training keys are (sample_seed, index) pairs from KeyedBatchSampler")
            _, _, height, width = self.decoded.images.shape
            batch.update(self.plan.draw([seed for seed, _ in pairs], height, width))
        return batch

    def materialize(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """A key batch → (normalised images (B, C, h, w) float32, labels (B,)) on the key batch's device."""
        index = batch["index"]
        images, labels = self.decoded.on(index.device)
        x = images.index_select(0, index)
        if self.plan.random:
            x = self.plan.augment(x, batch["top"], batch["left"], batch["flip"])
        x = self.plan.normalize(x)
        if self.permutation is not None:
            x = self.permutation(x)
        return x, labels[index]

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        x, y = self.materialize(self.keys([key]))
        return x[0], int(y[0])

    @property
    def targets(self) -> torch.Tensor:
        """The labels, in dataset order, without making any image (as torchvision datasets have them)."""
        labels = self.decoded.labels
        return labels if self._index is None else labels[self._index]

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        x, y = self.materialize(self.keys(keys))
        return list(zip(x, y.tolist(), strict=True))

    def key_view(self) -> KeyView:
        return KeyView(self)


class KeyView(Dataset):
    """A `DecodedImages` as its loaders read it: a batch of keys gives one key batch (a dict of small
    tensors), collated by `KeyCollate`."""

    def __init__(self, images: DecodedImages):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> dict[str, Any]:
        return self.images.keys(keys)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        return self.images.keys([key])


class KeyCollate:
    """Collate of `KeyView` batches: the key batch as it is (the trainer moves it to the device, where
    the data module materialises it), or, outside a trainer, materialised on the CPU as (x, y)."""

    def __init__(self, materialize: DecodedImages | None = None):
        self.images = materialize

    def __call__(self, batch: dict[str, Any]) -> Any:
        return batch if self.images is None else self.images.materialize(batch)


def is_key_batch(batch: Any) -> bool:
    return isinstance(batch, dict) and "split" in batch and "index" in batch


# ------------------------------------------------------------------------------------ the choice


def batched_plans(
    pipeline: str, in_memory: bool, dataset: str, transform: Callable[[bool], Callable], in_batches: bool = False
) -> tuple[BatchedPlan, BatchedPlan] | None:
    """The batched forms of the training and evaluation transforms (``transform(train)``), or None for the
    PIL path (``pipeline: pil``, an in-memory dataset, data read batch by batch (`in_batches`: shards,
    streams), a step without a batched form; ``tensor`` says why in one line)."""
    if pipeline == "pil":
        return None
    if in_batches:
        require(
            pipeline != "tensor",
            "data.pipeline",
            f"the tensor path decodes whole splits into memory; {dataset} data is read batch by batch",
            "use data.pipeline: auto or pil",
        )
        return None
    if in_memory:
        require(
            pipeline != "tensor",
            "data.pipeline",
            f"{dataset} is already a tensor dataset without augmentation (no decoding to save)",
            "use data.pipeline: auto",
        )
        return None
    try:
        return batched_plan(transform(True)), batched_plan(transform(False))
    except NoBatchedForm as missing:
        require(
            pipeline != "tensor",
            "data.pipeline",
            f"the tensor path has no batched form of {missing.what} ({missing.field})",
            f"use data.pipeline: auto or pil with {missing.field}, or drop it",
        )
        return None


class TensorPath:
    """The tensor path of one data module: its two `BatchedPlan` (training, evaluation) and the splits
    decoded for them, shared between requests (``setup`` for fit, then for test)."""

    def __init__(
        self,
        plans: tuple[BatchedPlan, BatchedPlan],
        forced: bool,
        dataset: str,
        root: str,
        cache_dir: str | None,
        limit_gb: float,
    ):
        self.plans, self.forced, self.dataset, self.root = plans, forced, dataset, root
        self.cache_dir, self.limit_gb = cache_dir, limit_gb
        self.decoded: dict[tuple[str, str], DecodedSplit] = {}
        self.announced = False
        self.cached: list[str] = []  # the splits on disk, and those kept in memory only (not writable)
        self.in_memory: list[str] = []

    def datasets(
        self,
        requests: list[tuple[str, Dataset, str, list[int] | None, bool]],
        sides: tuple[int, int],
        in_chans: int,
        permutation: InputPermutation | None,
        num_classes: int | None = None,
    ) -> list[DecodedImages] | None:
        """`DecodedImages` for each (role, base dataset, split, indices, train) request, or None where
        the PIL path must read them: the decoded images would exceed ``tensor_limit_gb``, or they have
        no single shape (``auto``; ``tensor`` says so in one line). `sides`: the side of the decoded
        training and evaluation images; `in_chans`, `num_classes`: what a cache file must match."""
        needed: dict[tuple[str, str], int] = {}
        for _, base, split, _, train in requests:
            plan = self.plans[0 if train else 1]
            key = (split, plan.prefix_key())
            if key not in self.decoded:
                needed[key] = len(base) * in_chans * sides[0 if train else 1] ** 2
        size_gb = (sum(needed.values()) + sum(d.images.numel() for d in self.decoded.values())) / 2**30
        if size_gb > self.limit_gb:
            require(
                not self.forced,
                "data.tensor_limit_gb",
                f"the decoded images would take {size_gb:.1f} GiB, more than {self.limit_gb} GiB",
                "raise data.tensor_limit_gb, or use data.pipeline: pil",
            )
            rank_zero_info(f"data.pipeline: pil (the decoded images would take {size_gb:.1f} GiB > tensor_limit_gb)")
            return None
        cache_dir = Path(self.cache_dir) if self.cache_dir else default_cache_dir(self.root)
        sets = []
        for role, base, split, indices, train in requests:
            plan = self.plans[0 if train else 1]
            key = (split, plan.prefix_key())
            if key not in self.decoded:
                try:
                    path = cache_file(cache_dir, self.dataset, split, cache_key(base, self.root, split, plan))
                    loaded = load_or_decode(base, plan.prefix, path, in_chans, num_classes)
                    self.decoded[key] = DecodedSplit(loaded.images, loaded.labels)
                    self._report(loaded, path, split)
                except NotDecodable as problem:
                    require(
                        not self.forced,
                        "data.pipeline",
                        f"the tensor path cannot hold the {split} split: {problem}",
                        "use data.pipeline: pil, or a data.image_size other than the first image's (all are then resized to it)",
                    )
                    rank_zero_info(f"data.pipeline: pil ({split} split: {problem})")
                    return None
            sets.append(DecodedImages(self.decoded[key], plan, indices, permutation, role))
        if not self.announced:
            # Say where the splits are only where they are there: a split that could not be written is
            # kept in memory, and the line says why.
            if not self.in_memory:
                where = f"cached in {cache_dir}"
            elif not self.cached:
                where = "kept in memory only, not cached"
            else:
                where = f"cached in {cache_dir}, but the {' and '.join(self.in_memory)} split kept in memory only"
            rank_zero_info(
                f"data.pipeline: tensor (uint8 splits decoded once, {where}; "
                "batches cropped, flipped and normalised on the training device)"
            )
            self.announced = True
        return sets

    def _report(self, loaded: Loaded, path: Path, split: str) -> None:
        """One line for a cache file that was damaged (decoded again, replaced or not), and one for the
        first split that could not be written (the announcement names them all)."""
        if loaded.unwritten is not None:
            if not self.in_memory:
                warn(f"data.cache_dir: {loaded.unwritten}; the decoded {split} split is kept in memory only")
            self.in_memory.append(split)
        else:
            self.cached.append(split)
        if loaded.damaged is not None:
            done = "replaced" if loaded.cached is not None else "kept in memory only"
            warn(f"data.cache_dir: the cache {str(path)!r} was damaged ({loaded.damaged}); decoded again and {done}")
