"""The tensor data path (docs/notes/tensor-data-path.md): each split decoded once into a uint8 tensor
(`cache`, through the deterministic prefix of the very transform the PIL path runs: `batched`), and
whole batches cropped, flipped and normalised on the training device, where the per-image PIL path would
starve a GPU on CIFAR-size data. Loaders yield small key batches (indices and each image's crop offsets
and flip, drawn as the PIL path draws them from the sample seed); the data module's
``on_after_batch_transfer`` makes them images on the device, equal to the PIL path's bit for bit, so
resuming, worker counts and DDP shards behave exactly as there."""

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
    NotDecodable,
    cache_file,
    cache_key,
    default_cache_dir,
    load_or_decode,
)
from mixer_lightning.data.transforms import InputPermutation
from mixer_lightning.errors import require

Pipeline = Literal["auto", "tensor", "pil"]


@rank_zero_only
def warn(line: str) -> None:
    """A ``mixer: warning:`` line on stderr (once, from rank zero), as the command line prints its own."""
    print(f"mixer: warning: {line}", file=sys.stderr, flush=True)


class DecodedImages(Dataset):
    """(image, label) pairs of a decoded split (optionally restricted to `indices`), augmented by a
    `BatchedPlan` and permuted, like `pil_path.TransformedDataset` (keys: positions, or (sample_seed,
    position) pairs). Read directly it answers CPU tensors (``mixer cka`` / ``fewshot``); its loaders read
    `key_view`, whose batches `materialize` turns into images on the device."""

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
        batch: dict[str, Any] = {
            "split": self.split,
            "index": positions if self._index is None else self._index[positions],
        }
        if self.plan.random:
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

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        x, y = self.materialize(self.keys(keys))
        return list(zip(x, y.tolist(), strict=True))

    @property
    def targets(self) -> torch.Tensor:
        """The labels, in dataset order, without making any image (as torchvision datasets have them)."""
        labels = self.decoded.labels
        return labels if self._index is None else labels[self._index]

    def key_view(self) -> KeyView:
        return KeyView(self)


class KeyView(Dataset):
    """A `DecodedImages` as its loaders read it: a batch of keys gives one key batch (a dict of small tensors)."""

    def __init__(self, images: DecodedImages):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> dict[str, Any]:
        return self.images.keys(keys)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        return self.images.keys([key])


class KeyCollate:
    """Collate of `KeyView` batches: the key batch as it is (the trainer moves it to the device, where the
    data module materialises it), or, outside a trainer, materialised on the CPU as (x, y)."""

    def __init__(self, materialize: DecodedImages | None = None):
        self.images = materialize

    def __call__(self, batch: dict[str, Any]) -> Any:
        return batch if self.images is None else self.images.materialize(batch)


def is_key_batch(batch: Any) -> bool:
    return isinstance(batch, dict) and "split" in batch and "index" in batch


def batched_plans(
    pipeline: str, in_memory: bool, dataset: str, transform: Callable[[bool], Callable], in_batches: bool = False
) -> tuple[BatchedPlan, BatchedPlan] | None:
    """The batched forms of the training and evaluation transforms (``transform(train)``), or None for the
    PIL path: ``pipeline: pil``, an in-memory dataset, data read batch by batch (`in_batches`: shards,
    streams), or a step without a batched form (``tensor`` then says why)."""
    if pipeline == "pil":
        return None
    why = None
    if in_batches or in_memory:
        why = f"{dataset} data is read batch by batch" if in_batches else f"{dataset} is already a tensor dataset"
    else:
        try:
            return batched_plan(transform(True)), batched_plan(transform(False))
        except NoBatchedForm as missing:
            why = f"it has no batched form of {missing.what} ({missing.field})"
    require(pipeline != "tensor", "data.pipeline", f"the tensor path cannot read this data: {why}", "use auto or pil")
    return None


class TensorPath:
    """The tensor path of one data module: its two `BatchedPlan` (training, evaluation) and the splits
    decoded for them, shared between requests (``setup`` for fit, then for test)."""

    def __init__(self, plans: tuple, forced: bool, dataset: str, root: str, cache_dir: str | None, limit_gb: float):
        self.plans, self.forced, self.dataset, self.root, self.limit_gb = plans, forced, dataset, root, limit_gb
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir(root)
        self.decoded: dict[tuple[str, str], DecodedSplit] = {}
        self.announced = False
        self.in_memory: list[str] = []  # the splits that could not be written to the cache

    def _refuse(self, field: str, problem: str) -> None:
        """The PIL path instead (``auto``), or, when the tensor path was asked for, an error."""
        require(not self.forced, field, problem, "use data.pipeline: pil")
        rank_zero_info(f"data.pipeline: pil ({problem})")

    def datasets(
        self,
        requests: list[tuple[str, Dataset, str, list[int] | None, bool]],
        sides: tuple[int, int],
        in_chans: int,
        permutation: InputPermutation | None,
    ) -> list[DecodedImages] | None:
        """`DecodedImages` for each (role, base dataset, split, indices, train) request, or None where the
        PIL path must read them: the decoded images would exceed ``tensor_limit_gb``, or have no single
        shape. `sides`: the side of the decoded training and evaluation images."""
        needed = {
            (split, self.plans[not train].prefix_key()): len(base) * in_chans * sides[not train] ** 2
            for _, base, split, _, train in requests
        }  # (plans and sides: training, evaluation)
        held = sum(d.images.numel() for key, d in self.decoded.items() if key not in needed)
        size_gb = (sum(needed.values()) + held) / 2**30
        if size_gb > self.limit_gb:
            return self._refuse("data.tensor_limit_gb", f"the decoded images would take {size_gb:.1f} GiB")
        sets = []
        for role, base, split, indices, train in requests:
            plan = self.plans[not train]
            key = (split, plan.prefix_key())
            if key not in self.decoded:
                try:
                    path = cache_file(self.cache_dir, self.dataset, split, cache_key(base, self.root, split, plan))
                    loaded = load_or_decode(base, plan.prefix, path)
                except NotDecodable as problem:
                    return self._refuse("data.pipeline", f"the {split} split: {problem}")
                self.decoded[key] = DecodedSplit(loaded.images, loaded.labels)
                if loaded.unwritten is not None:
                    if not self.in_memory:
                        warn(f"data.cache_dir: {loaded.unwritten}; the decoded {split} split is kept in memory only")
                    self.in_memory.append(split)
                if loaded.damaged is not None:
                    done = "kept in memory only" if loaded.unwritten else "replaced"
                    warn(
                        f"data.cache_dir: the cache {str(path)!r} was damaged ({loaded.damaged}); decoded again and {done}"
                    )
            sets.append(DecodedImages(self.decoded[key], plan, indices, permutation, role))
        if not self.announced:
            self.announced = True
            where = f"{', '.join(self.in_memory)} in memory only" if self.in_memory else f"cached in {self.cache_dir}"
            rank_zero_info(
                f"data.pipeline: tensor (uint8 splits decoded once, {where}; "
                "batches cropped, flipped and normalised on the training device)"
            )
        return sets
