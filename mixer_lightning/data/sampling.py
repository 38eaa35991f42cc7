"""A training order and augmentation randomness that depend on the seed alone, so that runs are
bit-identical whatever the number of workers, and a run stopped mid-epoch resumes exactly: each epoch's
order is drawn from (seed, epoch), each image's augmentation runs under `seeded` (seed, epoch, index),
and a resumed run's sampler skips the batches its epoch had trained on. Also: how DataLoader workers
start (`worker_options`), and the seeded validation split and training subset (``data.split_seed``,
kept apart from the training seed, so every run of an experiment validates on the same images).
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # registers its exit handler (terminate, then join) before ours, so ours runs first
import os
import random
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler

from mixer_lightning.errors import require

# The stops a run answers at a resumable point (SIGTERM: scancel, pre-emption; SIGINT) and SLURM's
# requeue signals: they reach every process of a job step, DataLoader workers included.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WORKER_IGNORES = (*STOP_SIGNALS, *(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name)))
# CPython releases whose fork can deadlock the child (gh-112275; fixed in 3.9.20, 3.10.15, 3.11.10).
FORK_DEADLOCK_FIXED_IN = {(3, 8): 20, (3, 9): 20, (3, 10): 15, (3, 11): 10}
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
    """A uniformly random order per epoch, drawn from (seed, epoch) only. A `RandomSampler`, so that
    Lightning replaces it by a (shuffling) DistributedSampler under DDP."""

    def __init__(self, data_source: Any, seed: int = 0):
        super().__init__(data_source)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(mix(self.seed, self.epoch))
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class KeyedBatchSampler(BatchSampler):
    """Batches of ``(sample_seed, index)`` keys of `sampler`'s order (whose ``epoch`` Lightning sets).
    `resume` (epoch, batches): the first pass is that epoch without its first batches; an argument of
    ``__init__``, so that it survives Lightning's re-creation of the batch sampler under DDP."""

    def __init__(
        self, sampler: Sampler[int], batch_size: int, drop_last: bool, seed: int = 0, resume: tuple | None = None
    ):
        super().__init__(sampler, batch_size, drop_last)
        self.seed, self.resume = seed, resume

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        skip = 0
        if self.resume is not None:  # only the first pass after resuming
            (epoch, skip), self.resume = self.resume, None
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
        epoch = getattr(self.sampler, "epoch", 0)
        for position, batch in enumerate(super().__iter__()):
            if position >= skip:
                yield [(mix(self.seed, epoch, index), index) for index in batch]


def resume_point(
    epoch: int, done: int, length: int, batch_size: int, drop_last: bool, limit: int | float | None
) -> tuple[int, int] | None:
    """The ``resume`` of a run resumed in `epoch` after `done` batches, or None when the epoch had not
    begun or was complete (``length`` images in batches, cut to Lightning's ``limit_train_batches``)."""
    full = length // batch_size if drop_last else -(-length // batch_size)
    per_epoch = full if limit is None else min(full, limit) if isinstance(limit, int) else int(full * limit)
    return (epoch, done) if 0 < done < per_epoch else None


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with Python's, NumPy's and torch's (CPU) RNGs seeded by `seed`, then put them back."""
    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    # The CPU generator only: torch.manual_seed also queues a CUDA re-seed, with a Python stack trace
    # recorded each time on a CUDA build (milliseconds per image).
    torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)


def rng_states() -> dict:
    """Python's, NumPy's and torch's RNG states, for checkpoints read with ``weights_only=True`` (no NumPy arrays)."""
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


class ResumableDataLoader(DataLoader):
    """A loader that resumes from the trainer's progress (its sampler skips the batches done): no state to
    save, but ``state_dict`` declared, so that Lightning knows it resumes."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def leave_stops_to_the_run(worker_id: int) -> None:
    """A DataLoader worker's `worker_init_fn`: it ignores the stop signals that reach it with its run, which
    would otherwise fail with "DataLoader worker ... exited unexpectedly" instead of stopping at a
    resumable point with last.ckpt. Workers end when their loader ends them (or `_kill_workers_at_exit`)."""
    for signum in WORKER_IGNORES:
        signal.signal(signum, signal.SIG_IGN)


def fork_may_deadlock(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this Python's `os.fork` can deadlock its child (gh-112275): it re-initialises the thread-list
    lock only after taking it, so a child forked while another thread holds it hangs before its first line."""
    fixed = FORK_DEADLOCK_FIXED_IN.get(tuple(version[:2]))
    return tuple(version[:2]) < (3, 12) and (fixed is None or version[2] < fixed)


def worker_options(workers: int, trainer: Any) -> dict[str, Any]:
    """The DataLoader options of `workers`: `leave_stops_to_the_run`, and spawn under DDP where a fork can
    deadlock (gloo's threads take the thread-list lock at moments of their own: docs/notes/cluster-data.md)."""
    if workers <= 0:
        return {"worker_init_fn": None, "multiprocessing_context": None}
    spawn = getattr(trainer, "world_size", 1) > 1 and fork_may_deadlock()
    return {"worker_init_fn": leave_stops_to_the_run, "multiprocessing_context": "spawn" if spawn else None}


@atexit.register
def _kill_workers_at_exit() -> None:
    """SIGKILL the daemonic children still alive at exit (workers of a run that failed mid-epoch):
    multiprocessing's exit handler, after this one, would SIGTERM them, which they ignore, and wait for
    ever. torch's SIGCHLD handler would report each kill: it goes first."""
    children = [child for child in multiprocessing.active_children() if child.daemon]
    if children and hasattr(signal, "SIGCHLD") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in children:
        child.kill()


def training_seed() -> int:
    """The run's seed, as `seed_everything` (LightningCLI's ``seed_everything``) recorded it."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def evaluation_sampler(dataset: Any, trainer: Any) -> Any:
    """Under DDP, each evaluation image on exactly one process: Lightning's own padding `DistributedSampler`
    would repeat images until every process has as many, and count them twice in the metrics (torchmetrics
    states summed at the epoch's end take uneven shards)."""
    if getattr(trainer, "world_size", 1) <= 1:
        return None
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    return UnrepeatedDistributedSampler(
        dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
    )


def training_loader(dataset: Any, batch_size: int, drop_last: bool, trainer: Any, **options: Any) -> DataLoader:
    """The training loader of `dataset`, seeded, and under a `trainer` that resumes, from its checkpoint."""
    seed = training_seed()
    resume = None
    if trainer is not None and trainer.fit_loop.restarting:
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        resume = resume_point(
            trainer.current_epoch, done, len(dataset), batch_size, drop_last, trainer.limit_train_batches
        )
    batches = KeyedBatchSampler(EpochRandomSampler(dataset, seed), batch_size, drop_last, seed, resume)
    # Its own generator: the workers' base seed never draws from (so never shifts) the global RNG.
    generator = torch.Generator().manual_seed(seed)
    return ResumableDataLoader(dataset, batch_sampler=batches, generator=generator, **options)


def _count(value: float, total: int) -> int:
    """A fraction of `total` (value < 1) or a count (value >= 1)."""
    return int(value) if value >= 1 else round(value * total)


def split_train(n: int, val_split: float, split_seed: int) -> tuple[list[int], list[int]]:
    """The training and held-out validation indices of `n` training images (``data.val_split``: a
    fraction or a count), drawn with `split_seed`."""
    num_val = _count(val_split, n)
    require(num_val < n, "data.val_split", f"holds out {num_val} of {n} training images")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed)).tolist()
    return order[num_val:], order[:num_val]


def train_subset(indices: list[int], subset: float | None, split_seed: int) -> list[int]:
    """A seeded subset of the training `indices` (``data.train_subset``: a fraction or a count), in order."""
    if subset is None:
        return indices
    keep = _count(subset, len(indices)) if subset != 1 else len(indices)
    # A different stream than the validation split's, so both stay fixed when the other changes.
    order = torch.randperm(len(indices), generator=torch.Generator().manual_seed(split_seed + 1))
    return [indices[i] for i in sorted(order[:keep].tolist())]
