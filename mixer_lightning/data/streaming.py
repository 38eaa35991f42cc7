"""Hugging Face datasets streamed, never downloaded whole (``data.dataset: hf``, ``data.streaming: true``).
The library reads: its seeded shuffle (``data.shuffle_buffer``; ``set_epoch`` reshuffles),
`split_dataset_by_node` across the ranks and its split of the files across workers. What this module
adds (docs/notes/cluster-data.md):

- **Batches in a known order.** A worker's k-th batch is global batch ``k × workers + worker``, the order
  the DataLoader hands them out; `StreamLoader` ends the epoch at the first missing batch or after
  ``⌊examples / (batch × ranks)⌋`` batches, and under DDP the ranks agree at every batch, so none waits
  on a collective another never joins.
- **Exact resume, by replay.** The order is a function of (seed, epoch, workers, ranks): a resumed run
  replays the epoch's stream, reading past the batches already trained on without decoding them (with
  other workers or ranks the order differs: a warning says so). Hugging Face's own ``state_dict`` needs
  torchdata's StatefulDataLoader and loses the shuffle buffer.
- **Labels checked as they stream**: a label outside 0..num_classes-1 is one line naming the example.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from mixer_lightning.data.pil_path import UNREADABLE, to_mode
from mixer_lightning.data.sampling import ResumableDataLoader, mix, seeded, training_seed, worker_options
from mixer_lightning.data.sources.base import say
from mixer_lightning.errors import ConfigError, require

GRANULARITY = (
    "resumes exactly by replaying the interrupted epoch's stream, reading (not decoding) the batches it had "
    "trained on; the order depends on data.num_workers and the number of processes: resume with the same"
)


class StreamImages(IterableDataset):
    """Batches ``(global batch number, images, labels)`` of one split, for one rank and worker (module
    docstring). The data module sets the transform, batch size, seed, ranks and, when resuming,
    ``skip`` (batches already trained on in this epoch) before each pass; ``epoch`` selects the shuffle."""

    def __init__(
        self,
        stream: Any,
        examples: int,
        split: str,
        root: str,
        image_column: str,
        label_column: str,
        mode: str,
        num_classes: int,
    ):
        self.stream, self.examples, self.split, self.root, self.mode = stream, examples, split, root, mode
        self.image_column, self.label_column, self.num_classes = image_column, label_column, num_classes
        self.transform: Callable | None = None
        self.batch_size, self.train, self.seed, self.shuffle_buffer = 1, False, 0, 10_000
        self.rank, self.world, self.epoch, self.skip = 0, 1, 0, 0

    def __len__(self) -> int:
        return self.examples

    @property
    def batches(self) -> int:
        """Batches per rank in an epoch: the same on every rank when training (full batches only)."""
        if self.train:
            return self.examples // (self.batch_size * self.world)
        return math.ceil(math.ceil(self.examples / self.world) / self.batch_size)

    def rank_stream(self, epoch: int) -> Any:
        """This rank's share of the (training: shuffled for `epoch`) stream."""
        from datasets.distributed import split_dataset_by_node

        stream = self.stream
        if self.train:
            stream = stream.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer)
            stream.set_epoch(epoch)
        if self.world > 1:
            stream = split_dataset_by_node(stream, rank=self.rank, world_size=self.world)
        return stream

    def _label(self, example: dict, position: int, worker: int) -> int:
        label = example.get(self.label_column)
        if label is None or not isinstance(label, int) or not 0 <= label < self.num_classes:
            got = "no label" if label is None else f"the label {label!r}"
            raise ConfigError(
                "data.label_column",
                f"split {self.split!r} of {self.root!r}, column {self.label_column!r}: example {position} of rank "
                f"{self.rank}'s worker {worker} has {got}; labels are 0..{self.num_classes - 1}",
                "fix or drop that example",
            )
        return label

    def _image(self, value: dict) -> Any:
        from mixer_lightning.data.sources.huggingface import dataset_folders, open_row_image

        with open_row_image(value, dataset_folders(self.root), self.root) as image:  # a path: inside the dataset
            return to_mode(image, self.mode)  # a copy; 16-bit images scaled to 8 bits, not clipped

    def _batch(
        self, examples: list[tuple[int, dict]], number: int, worker: int, epoch: int
    ) -> tuple[int, torch.Tensor, torch.Tensor]:
        images, labels = [], []
        for j, (position, example) in enumerate(examples):
            labels.append(self._label(example, position, worker))
            try:
                image = self._image(example[self.image_column])
            except UNREADABLE as error:
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise ConfigError(
                    "data.root",
                    f"cannot read the image of example {position} of split {self.split!r} (rank {self.rank}'s worker "
                    f"{worker}) of {self.root!r} ({reason})",
                    "fix or drop that example",
                ) from None
            if self.transform is not None:
                if self.train:
                    with seeded(mix(self.seed, epoch, self.rank, number, j)):
                        image = self.transform(image)
                else:
                    image = self.transform(image)
            images.append(image)
        return number, torch.stack(images), torch.tensor(labels)

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        # This worker's batches among those already trained on, counted in whole rounds of the workers (the
        # DataLoader hands out worker 0's batch first): `StreamLoader` drops the few of the last round.
        # Read now, not when the first batch is asked for (without workers the loader resets `skip` first).
        skip = len(range(worker, self.skip - self.skip % workers, workers))
        return self._batches(self.epoch, skip, worker, workers)

    def _batches(
        self, epoch: int, skip: int, worker: int, workers: int
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        pending: list[tuple[int, dict]] = []
        k = 0
        for position, example in enumerate(self.rank_stream(epoch)):
            pending.append((position, example))
            if len(pending) < self.batch_size:
                continue
            if k < skip:  # replayed: read, not decoded (its labels still checked)
                for p, e in pending:
                    self._label(e, p, worker)
            else:
                yield self._batch(pending, k * workers + worker, worker, epoch)
            k += 1
            pending = []
        if pending and not self.train:
            yield self._batch(pending, k * workers + worker, worker, epoch)


class StreamLoader(ResumableDataLoader):
    """The DataLoader of a `StreamImages` (module docstring): (images, labels) in global batch order; it
    resumes from the trainer's progress (`skip`), so it has no state of its own.

    Args:
        epoch: returns the epoch about to be read (the trainer's).
        agree: under DDP, whether every rank has its next batch (a collective), else None.
    """

    def __init__(self, dataset: StreamImages, epoch: Callable[[], int], agree: Callable[[bool], bool] | None, **common):
        super().__init__(dataset, batch_size=None, **common)
        self._epoch, self._agree = epoch, agree

    def __len__(self) -> int:
        return self.dataset.batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        data: StreamImages = self.dataset
        data.epoch = self._epoch()
        start, iterator = data.skip, super().__iter__()  # the workers take their copy of `data` here
        data.skip = 0
        if not data.train:
            for _, images, labels in iterator:
                yield images, labels
            return
        for number in range(start - start % max(1, self.num_workers), data.batches):
            item = next(iterator, None)
            has = item is not None and item[0] == number
            if number < start:  # trained on before the stop, in the workers' last round of those: dropped
                continue
            if self._agree is not None:
                has = self._agree(has)
            if not has:
                break
            yield item[1], item[2]


def stream_loader(
    dataset: StreamImages,
    transform: Callable,
    train: bool,
    batch_size: int,
    seed: int,
    shuffle_buffer: int,
    trainer: Any,
    skip: int,
    common: dict[str, Any],
) -> StreamLoader:
    """The loader of a streamed split for `trainer` (its ranks, epoch and, under DDP, the agreement at
    every batch); workers beyond this rank's number of data files would get none, so they are not started."""
    dataset.transform, dataset.train, dataset.batch_size = transform, train, batch_size
    dataset.seed, dataset.shuffle_buffer, dataset.skip = seed, shuffle_buffer, skip
    world = trainer.world_size if trainer is not None else 1
    dataset.rank, dataset.world = (trainer.global_rank if trainer is not None else 0), world
    stream = dataset.rank_stream(0)
    files = getattr(stream, "num_shards", None) or stream.n_shards  # n_shards in datasets 3.0.1, num_shards later
    workers = min(common.get("num_workers") or 0, files)
    if train and workers > 1 and files % workers and dataset.rank == 0:
        warnings.warn(
            f"data.num_workers: {workers} workers share the {files} data files of a process unevenly; the epoch ends "
            f"when the first worker's files run dry (give a number of workers that divides {files})",
            stacklevel=2,
        )
    options = dict(common, num_workers=workers, persistent_workers=False)  # a pass's workers take its epoch
    # Its own generator: the workers' base seed never draws from (so never shifts) the global RNG, which a
    # resumed run restores from the checkpoint.
    options["generator"] = torch.Generator().manual_seed(seed)
    # Lightning's warning that an iterable's length may be wrong with workers: here it is the batches each
    # rank yields, whatever the workers (module docstring).
    warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined")
    # And its advice to keep spawned workers (`worker_options`) alive between epochs: a pass's workers take its
    # epoch here, by design (above).
    warnings.filterwarnings("ignore", message=r"Consider setting `persistent_workers=True`")
    if workers == 0:  # none asked for, or no data files to give them
        options.update(prefetch_factor=None, **worker_options(0, trainer))

    def epoch() -> int:
        return trainer.fit_loop.epoch_progress.current.processed if trainer is not None and train else 0

    agree = None
    if train and world > 1:

        def agree(has: bool) -> bool:
            return bool(trainer.strategy.reduce_boolean_decision(has, all=True))

    return StreamLoader(dataset, epoch, agree, **options)


def stream_splits(
    source: Any, stage: str | None, val_split: float, train_subset: float | None, wanted: set[str]
) -> dict[str, StreamImages]:
    """The splits of a streamed `source` that `stage` needs among `wanted` (``train``: train and val; ``test``)
    as `StreamImages` (nothing is read yet)."""
    require(train_subset is None, "data.train_subset", "a stream keeps no subset", "remove it")
    splits = {}
    if stage in (None, "fit", "validate") and "train" in wanted:
        has_val = source.split_names["val"] is not None  # (also when it serves as the test split: ImageNet's)
        problem = f"{source.root!r} has no validation split, and a stream cannot hold out training images"
        require(has_val or val_split == 0, "data.val_split", problem, "set data.val_split: 0")
        splits["train"], splits["val"] = source.load("train"), source.load("val" if has_val else "test")
    if stage in (None, "test", "predict") and "test" in wanted:
        splits["test"] = source.load("test")
    return splits


def datamodule_loader(
    dataset: StreamImages,
    transform: Any,
    train: bool,
    batch_size: int,
    loading: Any,
    options: dict[str, Any],
    trainer: Any,
    saved_layout: dict | None,
    announce: bool,
) -> tuple[StreamLoader, dict | None]:
    """`ImageDataModule`'s loader of a streamed split (`loading`: its `data.arguments.Loading`; `options`: the
    workers and pinned memory it resolved), and for training the layout it streams in (workers × processes),
    compared with the stopped run's `saved_layout`; training prints the resume granularity where `announce`."""
    skip = 0
    if train and trainer is not None and trainer.fit_loop.restarting:
        skip = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    workers = options["num_workers"]
    common = dict(
        **options,
        prefetch_factor=loading.prefetch_factor if workers > 0 else None,
        **worker_options(workers, trainer),
    )
    seed, buffer = training_seed(), loading.shuffle_buffer
    loader = stream_loader(dataset, transform, train, batch_size, seed, buffer, trainer, skip, common)
    if not train:
        return loader, None
    layout = {"workers": loader.num_workers, "processes": dataset.world}
    if dataset.rank == 0 and saved_layout and saved_layout != layout and skip:
        warnings.warn(
            f"data.streaming: the run was stopped with {saved_layout['workers']} workers × {saved_layout['processes']} "
            f"processes and resumes with {layout['workers']} × {layout['processes']}: the rest of this epoch is not the "
            "batches the stopped run would have trained on",
            stacklevel=2,
        )
    if dataset.rank == 0 and announce:
        say(
            f"data   hf streaming: {dataset.examples:,} training examples, {dataset.batches:,} batches of "
            f"{dataset.batch_size} per process per epoch ({loader.num_workers} workers × {dataset.world} "
            f"processes); {GRANULARITY}"
        )
    return loader, layout
