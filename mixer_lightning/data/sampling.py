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
- `training_loader`: the training loader (`ResumableDataLoader`), resumable from the trainer's own progress.
- `training_seed`: the run's seed, as `seed_everything` recorded it.
- `split_train`, `train_subset`: the seeded validation split and training subset (``data.split_seed``,
  kept apart from the training seed, so every run of an experiment validates on the same images).
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing.util  # its exit handler (terminate, then join, every child) before ours: ours runs first
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import resource_sharer
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler

from mixer_lightning.errors import require

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # TEMPORARY (house-h1): H4 defines it

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


class ResumableDataLoader(DataLoader):
    """The training loader. It resumes mid-epoch from the trainer's own progress (the data module
    gives its `KeyedBatchSampler` the batches to skip), so it has no state of its own to save; it
    declares the ``state_dict`` interface so that Lightning knows it is resumable."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


# The stops a run answers at a resumable point, and SLURM's requeue signals (`mixer_lightning.safety.slurm`:
# SIGUSR1 by default), where the platform has them.
_STOP_SIGNALS = (*STOP_SIGNALS, *(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name)))


def leave_stops_to_the_run(worker_id: int) -> None:
    """A DataLoader worker's `worker_init_fn`: the worker leaves stopping to the run.

    - It ignores SIGTERM, SIGINT, SIGHUP and SLURM's SIGUSR1/2, which reach the workers with the run
      (SLURM's scancel, pre-emption or requeue signal every process of the job step, a terminal its whole
      foreground group); a worker killed by SIGUSR1's default action fails the run the same way. torch's
      worker dies of a SIGTERM that its parent did not send, and the run then fails with "DataLoader
      worker ... exited unexpectedly" instead of stopping at a resumable point with last.ckpt. Workers
      still end as usual: the loader tells them to when it shuts down; SLURM's SIGKILL follows its SIGTERM.
    - It says nothing when the run hangs up on a batch's transfer (`_quiet_when_the_run_hangs_up`).
    - It ends with its run (`_end_with_the_run`), even one killed outright while the worker is stuck."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    sys.excepthook = functools.partial(_quiet_when_the_run_hangs_up, sys.excepthook)
    _end_with_the_run()


# CPython releases whose fork can deadlock the child (gh-112275, fixed in 3.9.20, 3.10.15 and 3.11.10; 3.12
# was never affected): `os.fork` re-initialises the interpreter's thread-list lock only after it has taken it,
# so a child forked while another thread holds it waits for it forever, before running any Python code.
FORK_DEADLOCK_FIXED_IN = {(3, 8): 20, (3, 9): 20, (3, 10): 15, (3, 11): 10}


def fork_may_deadlock(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this Python's `os.fork` can deadlock its child (`FORK_DEADLOCK_FIXED_IN`)."""
    fixed = FORK_DEADLOCK_FIXED_IN.get(tuple(version[:2]))
    return tuple(version[:2]) < (3, 12) and (fixed is None or version[2] < fixed)


def worker_options(workers: int, trainer: Any) -> dict[str, Any]:
    """The DataLoader options of a loader's `workers`: `leave_stops_to_the_run`, and how they start.

    Workers start by spawn (a fresh interpreter, started by fork + exec) in a run of several processes
    on a Python whose fork can deadlock (`fork_may_deadlock`), else as the platform starts them (fork on
    Linux). Under DDP the process group's threads (gloo's run loop, seen here) enter Python at
    moments of their own, to drop the tensors a collective held, and take the interpreter's thread-list
    lock as they do: a worker forked then hangs before its first batch, its rank waits for that batch and
    the other ranks wait for it in the next collective, for good. Seen in 2 of 56 two-process runs of
    ``tests/test_cluster_data.py``'s streaming case on Python 3.11.7, whose loader starts its workers every
    epoch (docs/notes/cluster-data.md). The cost of spawn: each worker imports torch and unpickles its
    dataset, once a run with persistent workers, once a pass for a streamed dataset."""
    if workers <= 0:
        return {"worker_init_fn": None, "multiprocessing_context": None}
    world = getattr(trainer, "world_size", 1) if trainer is not None else 1
    spawn = world > 1 and fork_may_deadlock()
    return {"worker_init_fn": leave_stops_to_the_run, "multiprocessing_context": "spawn" if spawn else None}


def _quiet_when_the_run_hangs_up(
    shown: Callable[..., Any], kind: type[BaseException], error: BaseException, trace: Any
) -> None:
    """A worker's `sys.excepthook`, which multiprocessing's resource sharer calls for an error in its
    thread: the thread that hands a batch's file descriptors to the run (torch's ``file_descriptor``
    sharing). A stop at once that lands while the run fetches them hangs up mid-transfer, and the worker
    printed the ``ConnectionResetError`` traceback under the run's one stop line. The run reports its
    own stop or failure, so a connection the run dropped is not the worker's to report; any other error
    goes on to `shown`, the hook before this one."""
    hung_up = issubclass(kind, (ConnectionError, EOFError))
    if hung_up and trace is not None and trace.tb_frame.f_code.co_filename == resource_sharer.__file__:
        return
    shown(kind, error, trace)


def _end_with_the_run() -> None:
    """End this worker as soon as its parent, the run, is gone. torch's worker checks its parent only
    between batches, so a worker stuck in a read (a hung network file system) outlived a run killed
    outright (SIGKILL: the OOM killer, a hung run killed by hand), holding its memory. A daemon thread
    checks every half second and ends the process when the parent has changed (the worker was
    reparented). Not on Windows, where a parent's pid outlives it (torch's own watchdog covers it there)."""
    if os.name == "nt":
        return
    run = os.getppid()

    def watch() -> None:
        while os.getppid() == run:
            time.sleep(0.5)
        os._exit(1)  # the run is gone: nobody waits for this worker's batches or its exit status

    threading.Thread(target=watch, name="end-with-the-run", daemon=True).start()


def _kill_workers_at_exit() -> None:
    """At the interpreter's exit, SIGKILL the daemonic children still alive (DataLoader workers whose
    loader was never shut down: a run that failed mid-epoch). multiprocessing's own exit handler, which
    runs after this one, sends them SIGTERM and then waits for them, and `leave_stops_to_the_run` has
    them ignore SIGTERM: without this the process would wait forever for workers that wait for it.
    torch's SIGCHLD handler, still installed for a loader that was never shut down, would answer each
    kill with "DataLoader worker ... is killed by signal: Killed" and a traceback: it goes first."""
    children = [child for child in multiprocessing.active_children() if child.daemon]
    if children and hasattr(signal, "SIGCHLD") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in children:
        child.kill()


atexit.register(_kill_workers_at_exit)


def training_seed() -> int:
    """The run's seed, as `seed_everything` (LightningCLI's ``seed_everything``) recorded it."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def training_loader(dataset: Any, batch_size: int, drop_last: bool, trainer: Any, **options: Any) -> DataLoader:
    """The training loader of `dataset`: batches of `KeyedBatchSampler` in the seeded order of
    `EpochRandomSampler`; under a `trainer` that resumes, from where its checkpoint was taken."""
    seed = training_seed()
    resume = None
    if trainer is not None and trainer.fit_loop.restarting:  # resuming: go on where the checkpoint was taken
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
    require(num_val < n, "data.val_split", f"holds out {num_val} of {n} training images", "choose a smaller value")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed)).tolist()
    return order[num_val:], order[:num_val]


def train_subset(indices: list[int], subset: float | None, split_seed: int) -> list[int]:
    """A seeded subset of the training `indices` (``data.train_subset``: a fraction or a count), in order."""
    if subset is None:
        return indices
    keep = _count(subset, len(indices)) if subset != 1 else len(indices)
    require(
        0 < keep <= len(indices),
        "data.train_subset",
        f"keeps {keep} of the {len(indices)} training images",
        f"choose a fraction or a number in 1..{len(indices)}",
    )
    # A different stream than the validation split's, so both stay fixed when the other changes.
    order = torch.randperm(len(indices), generator=torch.Generator().manual_seed(split_seed + 1))
    return [indices[i] for i in sorted(order[:keep].tolist())]
