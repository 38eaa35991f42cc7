"""A training order and augmentation randomness that depend on the seed alone, so that runs are
bit-identical, whatever the number of workers, and a run killed mid-epoch resumes exactly.

- `EpochRandomSampler`: the permutation of epoch e is drawn from its own generator seeded by
  (seed, e): no global RNG is touched, and any epoch's order can be recomputed.
- `KeyedBatchSampler`: batches of ``(sample_seed, index)`` keys, sample_seed = f(seed, epoch, index);
  it can skip the first batches of an epoch (resuming mid-epoch, without reading their images).
  Under DDP Lightning rebuilds it around its DistributedSampler (it keeps the BatchSampler signature).
- `resume_point`: where in its epoch a resumed run's first pass starts.
- `seeded`: the dataset applies an image's augmentation inside it, with Python's, NumPy's and
  torch's RNGs seeded by the sample seed and restored afterwards, so each augmented image is a
  function of (seed, epoch, index) and the caller's RNG streams are left as they were.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler

_MASK = (1 << 63) - 1


def mix(*values: int) -> int:
    """A 63-bit hash of integers (splitmix64 steps), the seed of one epoch or one sample."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (int(value) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 29
    return state & _MASK


class EpochRandomSampler(RandomSampler):
    """A uniformly random order per epoch, drawn from (seed, epoch) only.

    A `RandomSampler`, so Lightning replaces it by a (shuffling) DistributedSampler under DDP."""

    def __init__(self, data_source, seed: int = 0):
        super().__init__(data_source)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(mix(self.seed, self.epoch))
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class KeyedBatchSampler(BatchSampler):
    """Batches of ``(sample_seed, index)`` keys, able to start an epoch at a given batch.

    Args:
        sampler: the index order (an `EpochRandomSampler`, or Lightning's DistributedSampler); its
            ``epoch`` (which Lightning sets every epoch) is the epoch of the keys.
        batch_size, drop_last: as `BatchSampler`.
        seed: the run's seed, mixed into every sample seed.
        resume: (epoch, batches) of a run being resumed: the first pass is that epoch, without its
            first `batches` batches (already trained on). Given to ``__init__`` so that it survives
            Lightning's re-creation of the batch sampler around a DistributedSampler.
    """

    def __init__(
        self,
        sampler: Sampler[int],
        batch_size: int,
        drop_last: bool,
        seed: int = 0,
        resume: tuple[int, int] | None = None,
    ):
        super().__init__(sampler, batch_size, drop_last)
        self.seed = seed
        self.resume = resume

    @property
    def epoch(self) -> int:
        return getattr(self.sampler, "epoch", 0)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        skip = 0
        if self.resume is not None:  # only the first pass after resuming
            epoch, skip = self.resume
            self.resume = None
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
        epoch = self.epoch
        for position, batch in enumerate(super().__iter__()):
            if position >= skip:
                yield [(mix(self.seed, epoch, index), index) for index in batch]


def resume_point(
    epoch: int, done: int, length: int, batch_size: int, drop_last: bool, limit: int | float | None
) -> tuple[int, int] | None:
    """The ``resume`` of `KeyedBatchSampler` for a run resumed in `epoch` after `done` batches: that
    epoch, less the batches it had trained on (as the uninterrupted run goes on), or None when the
    epoch had not begun or was complete. An epoch has ``length`` images in batches of `batch_size`,
    cut to ``limit`` batches (Lightning's ``limit_train_batches``: a count, a fraction or None)."""
    full = length // batch_size if drop_last else -(-length // batch_size)
    per_epoch = full if limit is None else min(full, limit) if isinstance(limit, int) else int(full * limit)
    return (epoch, done) if 0 < done < per_epoch else None


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with Python's, NumPy's and torch's (CPU) RNGs seeded by `seed`, then put them back."""
    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    # The CPU generator only: torch.manual_seed also queues a CUDA re-seed, recording a Python stack
    # trace each time on a CUDA build (5 ms per image here, 3× the whole quickstart's training time).
    torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)


def rng_states() -> dict:
    """Python's, NumPy's and torch's RNG states in a form `torch.load(weights_only=True)` reads back
    (tensors, numbers, tuples: no NumPy arrays), for checkpoints."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    states = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Restore what `rng_states` saved."""
    random.setstate(tuple(x if not isinstance(x, list) else tuple(x) for x in states["python"]))
    kind, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
