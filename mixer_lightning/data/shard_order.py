"""The training order of sharded data (``data.dataset: wds``): shard-local shuffling, one order for
every rank, resumable at any batch (docs/notes/cluster-data.md).

An epoch's order is a function of (seed, epoch) only: the shards are permuted, cut into windows of
``data.shuffle_window`` shards, and the samples of each window permuted, so the ranks read a few files
at a time on a shared file system. Global batches of ``batch_size × ranks`` samples follow that order;
rank r takes the r-th ``batch_size`` of each (disjoint ranks, covering the epoch less a remainder), the
same whatever the workers and, for a fixed global batch, the ranks. Each sample's augmentation is seeded
by (seed, epoch, index), as `sampling.KeyedBatchSampler` does. `ShardOrder` is a ``DistributedSampler``
so that Lightning leaves it in place under DDP (it would replace any other by its own).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from mixer_lightning.data.sampling import ResumableDataLoader, mix, resume_point
from mixer_lightning.data.sources.base import say
from mixer_lightning.errors import require


class ShardOrder(DistributedSampler):
    """``(sample_seed, index)`` keys of one rank's share of the epoch (module docstring).

    Args:
        dataset: the training dataset (its positions are the indices drawn).
        shard_of: the shard of each position of `dataset`.
        batch_size: the per-rank batch.
        seed: the run's seed.
        window: shards whose samples are shuffled together.
        num_replicas, rank: the ranks and this one's.
        resume: (epoch, batches): the first pass is that epoch without its first `batches` batches.
    """

    def __init__(
        self,
        dataset: Dataset,
        shard_of: Sequence[int] | np.ndarray,
        batch_size: int,
        seed: int = 0,
        window: int = 8,
        num_replicas: int = 1,
        rank: int = 0,
        resume: tuple[int, int] | None = None,
    ):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        shard_of = np.asarray(shard_of)
        self.shards = [np.flatnonzero(shard_of == s) for s in np.unique(shard_of)]
        self.batch_size, self.window, self.resume = batch_size, max(1, window), resume

    @property
    def steps(self) -> int:
        """Batches per rank per epoch (the same on every rank)."""
        return len(self.dataset) // (self.batch_size * self.num_replicas)

    def __len__(self) -> int:
        return self.steps * self.batch_size

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's order of all positions, the same on every rank."""
        generator = torch.Generator().manual_seed(mix(self.seed, epoch))
        permuted = torch.randperm(len(self.shards), generator=generator).tolist()
        parts = []
        for start in range(0, len(permuted), self.window):
            members = np.concatenate([self.shards[s] for s in permuted[start : start + self.window]])
            shuffle = torch.Generator().manual_seed(mix(self.seed, epoch, start + 1))
            parts.append(members[torch.randperm(len(members), generator=shuffle).numpy()])
        return np.concatenate(parts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch, skip = self.epoch, 0
        if self.resume is not None:  # only the first pass after resuming
            epoch, skip = self.resume
            self.resume = None
            self.epoch = epoch
        order = self.order(epoch)
        per_step = self.batch_size * self.num_replicas
        for step in range(skip, self.steps):
            start = step * per_step + self.rank * self.batch_size
            for index in order[start : start + self.batch_size].tolist():
                yield mix(self.seed, epoch, index), index


def shard_loader(
    dataset: Dataset, seed: int, batch_size: int, window: int, trainer: Any, common: dict[str, Any], announce: bool
) -> DataLoader:
    """The training loader of a sharded split (`ShardOrder` over the data module's `TransformedDataset`):
    this rank's share, resumed where the trainer's checkpoint was taken; the order said once where `announce`."""
    base = dataset.base
    positions = np.arange(len(base)) if dataset.indices is None else np.asarray(dataset.indices)
    shard_of = base.index.shard[positions]
    world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
    steps = len(dataset) // (batch_size * world)
    require(steps > 0, "data.batch_size", f"{len(dataset):,} training images make no batch of {batch_size} × {world}")
    resume = None
    if trainer is not None and trainer.fit_loop.restarting:  # resuming: go on where the checkpoint was taken
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        resume = resume_point(
            trainer.current_epoch, done, steps * batch_size, batch_size, True, trainer.limit_train_batches
        )
    sampler = ShardOrder(dataset, shard_of, batch_size, seed, window, world, rank, resume)
    if rank == 0 and announce:
        say(
            f"data   wds: {len(dataset):,} training images in {len(np.unique(shard_of)):,} shards, shuffled in "
            f"windows of {window} shards; {world} × {batch_size} images a step; a stopped run resumes at its exact batch"
        )
    generator = torch.Generator().manual_seed(seed)  # the workers' base seed never draws from the global RNG
    return ResumableDataLoader(
        dataset, sampler=sampler, batch_size=batch_size, drop_last=True, generator=generator, **common
    )
