# Over 450 lines: one class, every argument of a config's `data:` documented in its docstring (`--help`).
"""`ImageDataModule`: one LightningDataModule for every dataset of the project.

It reads a named source (`mixer_lightning.data.sources`), carves a seeded validation split from
train when the dataset has none, optionally keeps a seeded subset of the training images
(`mixer_lightning.data.sampling`), applies timm's training augmentation or the evaluation
pre-processing (`mixer_lightning.data.transforms`), the optional input permutation of the Mixer paper
(Sec. 3.4), and mixup/cutmix on training batches (`mixer_lightning.data.mixup`). It exposes
``num_classes``, ``image_size`` and ``in_chans`` at construction, which the CLI links into the model.
Its arguments come in four groups, in this order (the table: docs/notes/data-api.md): the source (which
images, split how, given to the model at what size and normalisation), loading (batches, workers, the
data path), the augmentation of training images, and evaluation (crops, image files to predict).

Two data paths give the same batches bit for bit (``data.pipeline``): the per-image PIL path
(`mixer_lightning.data.pil_path`, through DataLoader workers), and the tensor path
(`mixer_lightning.data.tensor_path`: each split decoded once into a uint8 tensor, cached on disk
(`mixer_lightning.data.cache`), whole batches cropped, flipped and normalised on the training device),
chosen by ``auto`` wherever the augmentation has a batched form.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from mixer_lightning.data.mixup import MixupMode, build_mixup
from mixer_lightning.data.pil_path import TransformedDataset
from mixer_lightning.data.sampling import (
    mix,
    seeded,
    split_train,
    train_subset,
    training_loader,
    training_seed,
    worker_options,
)
from mixer_lightning.data.sources import DatasetInfo, get_source
from mixer_lightning.data.tensor_path import (
    PIPELINES,
    DecodedImages,
    KeyCollate,
    KeyView,
    Pipeline,
    TensorPath,
    batched_plans,
    is_key_batch,
)
from mixer_lightning.data.transforms import (
    Augmentation,
    EvalCrop,
    InputPermutation,
    PermutationMode,
    TrainCrop,
    eval_transform,
    train_transform,
)
from mixer_lightning.errors import ConfigError, require


@rank_zero_only
def say(line: str) -> None:
    """A line of the run's console (``data   ...``, before the run header), from the first process only."""
    print(line, flush=True)


class ImageDataModule(LightningDataModule):
    """Image classification data for every experiment. The arguments, by group:

    Source: ``dataset`` … ``permutation_seed``. Loading: ``batch_size`` … ``tensor_limit_gb``.
    Augmentation of the training images: ``train_crop`` … ``mixup_mode``. Evaluation: ``eval_crop``,
    ``eval_crop_pct``, ``predict_root``.

    Args:
        dataset: ``digits`` (scikit-learn's 8×8 digits, embedded, no download), ``cifar10``,
            ``cifar100``, ``stl10``, ``mnist`` (torchvision on-disk formats), ``imagenet``, ``folder``
            (ImageFolder: root/train, root/val), ``hf`` (a Hugging Face hub id or local folder).
        root: folder where the dataset lives (or is downloaded to); for ``hf`` the hub id or folder.
        download: fetch a torchvision dataset into ``root`` when it is missing (needs a network).
        image_column: ``hf`` only: the image column (default: ``img`` or ``image``).
        label_column: ``hf`` only: the label column (default: ``label``, ``fine_label`` or ``labels``).
        num_classes: ``wds`` and streamed ``hf`` only: the number of classes, where the data does not say
            (the hub's ImageNet shards: 1000; default: the ``mixer data pack`` manifest's, else the largest
            label + 1 (wds), or the ClassLabel's (hf)). A label outside 0..num_classes-1 is a one-line error.
        streaming: ``hf`` only: stream the dataset instead of downloading it (`mixer_lightning.data.streaming`).
        val_split: fraction (< 1) or number (>= 1) of training images held out for validation when
            the dataset has no official validation split; 0: train on all of them and validate on
            the test split (what the papers report).
        split_seed: seed of that held-out split and of ``train_subset`` (kept apart from the training
            seed, so every run of an experiment validates on the same images).
        train_subset: keep only a fraction (<= 1) or a number (> 1) of the training images (after
            the validation split), drawn with ``split_seed``: quick runs.
        image_size: side of the square images given to the model (default: the dataset's own;
            224 for imagenet/folder). STL-10 at 32 or 90 as in Hayase & Karakida C.4 / D.6.
        mean: normalisation mean (default: the dataset's; ImageNet's for imagenet/folder/hf).
        std: normalisation standard deviation (default: the dataset's).
        input_permutation: ``patch_pixel`` or ``global`` pixel shuffle of the Mixer paper's Sec. 3.4
            (one permutation for every image, training and evaluation), or ``none``.
        permutation_patch_size: patch side of ``patch_pixel`` (use the model's patch size).
        permutation_seed: seed of the input permutation.
        batch_size: training batch size (per device).
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``; 4 × ``batch_size``
            on the tensor path, where an evaluation batch is one gather from the decoded tensor).
        num_workers: DataLoader worker processes (default: 0 for in-memory data and the tensor path,
            else min(8, CPUs)).
        pin_memory: pin batches in page-locked memory (default: when CUDA is available).
        persistent_workers: keep the workers alive between epochs (when ``num_workers`` > 0).
        prefetch_factor: batches loaded ahead by each worker (default: torch's, 2).
        pipeline: ``tensor``: decode each split once into a uint8 tensor kept on the training device and
            crop, flip and normalise whole batches there (`mixer_lightning.data.tensor_path`; the same
            batches as ``pil`` bit for bit); ``pil``: per-image PIL transforms in DataLoader workers;
            ``auto`` (default): ``tensor`` wherever the augmentation has a batched form (pad-and-crop,
            flip, deterministic resizes and evaluation crops; not RandAugment/AutoAugment/AugMix,
            colour jitter, random erasing or the random-resized crop) and the decoded images fit in
            ``tensor_limit_gb``, else ``pil``.
        cache_dir: where the tensor path keeps decoded splits (default: ``$MIXER_CACHE_DIR``, else
            ``<root>/.mixer_cache`` when ``root`` is a writable folder, else ``~/.cache/mixer_lightning``).
            A file is keyed by the source files' names, sizes and modification times and the decoding,
            so a changed dataset is decoded again.
        tensor_limit_gb: the most GiB of decoded images the tensor path holds (``auto`` chooses ``pil``
            above it).
        shuffle_window: ``wds``: shards whose samples are shuffled together in the training order
            (`mixer_lightning.data.shard_order`; 8 ImageNet shards ≈ 10,000 images).
        shuffle_buffer: streamed ``hf``: examples in Hugging Face's shuffle buffer.
        train_crop: ``random_crop`` (resize to image_size, pad by ``crop_padding``, random crop: CIFAR
            style), ``random_resized_crop`` (timm's Inception crop: ImageNet style) or ``resize``.
            Default: random_crop for natural images <= 96 px, resize for digits/MNIST, else
            random_resized_crop.
        crop_padding: padding of ``random_crop``.
        crop_scale: range of the crop's area fraction in ``random_resized_crop``.
        hflip: probability of a horizontal flip (default 0.5; 0 for digits and MNIST).
        auto_augment: timm AutoAugment / RandAugment / AugMix policy string (``original``, ``v0``,
            ``rand-m9-mstd0.5-inc1``, ``rand-m15-n2``, ``augmix-m5-w4-d2``, ...).
        color_jitter: colour-jitter strength (timm skips it when ``auto_augment`` is set).
        interpolation: ``bilinear``, ``bicubic``, ``nearest``, ``lanczos`` or ``random`` (training only);
            also the resize of the evaluation crops.
        random_erasing: probability of timm's random erasing.
        random_erasing_mode: fill of the erased box: ``const``, ``rand`` or ``pixel``.
        random_erasing_count: most boxes erased per image.
        mixup: mixup α (0: off); the targets become soft and the model's loss takes them.
        cutmix: cutmix α (0: off).
        mixup_prob: probability of mixing a batch.
        mixup_switch_prob: probability of cutmix rather than mixup when both are on.
        mixup_mode: mix per ``batch``, ``pair`` or ``elem`` (timm).
        eval_crop: evaluation pre-processing (Mixer supplementary C): ``resize_crop`` (resize to
            (s/pct)², centre crop s), ``resmall_crop`` (shorter side to s/pct, centre crop s) or
            ``resize`` (to s², nothing at the native size). Default: resmall_crop for images > 96 px,
            else resize.
        eval_crop_pct: s / resize side of the evaluation crops (224/256 = 0.875).
        predict_root: ``mixer predict`` reads these image files (a folder, at any depth, or a list of
            files) instead of the test split (`mixer_lightning.data.predict`).
    """

    def __init__(
        self,
        # Source: which images, split how, given to the model at what size and normalisation.
        dataset: str = "digits",
        root: str = "data",
        download: bool = True,
        image_column: str | None = None,
        label_column: str | None = None,
        num_classes: int | None = None,
        streaming: bool = False,
        val_split: float = 0.1,
        split_seed: int = 0,
        train_subset: float | None = None,
        image_size: int | None = None,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        input_permutation: PermutationMode = "none",
        permutation_patch_size: int = 16,
        permutation_seed: int = 0,
        # Loading: batches, workers, and the data path.
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
        persistent_workers: bool = True,
        prefetch_factor: int | None = None,
        pipeline: Pipeline = "auto",
        cache_dir: str | None = None,
        tensor_limit_gb: float = 4.0,
        shuffle_window: int = 8,
        shuffle_buffer: int = 10_000,
        # Augmentation of the training images.
        train_crop: TrainCrop | None = None,
        crop_padding: int = 4,
        crop_scale: tuple[float, float] = (0.08, 1.0),
        hflip: float | None = None,
        auto_augment: str | None = None,
        color_jitter: float = 0.0,
        interpolation: str = "bilinear",
        random_erasing: float = 0.0,
        random_erasing_mode: str = "pixel",
        random_erasing_count: int = 1,
        mixup: float = 0.0,
        cutmix: float = 0.0,
        mixup_prob: float = 1.0,
        mixup_switch_prob: float = 0.5,
        mixup_mode: MixupMode = "batch",
        # Evaluation: the crops of validation/test images, and image files to predict.
        eval_crop: EvalCrop | None = None,
        eval_crop_pct: float = 0.875,
        predict_root: str | list[str] | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        require(batch_size > 0, "data.batch_size", f"must be positive, got {batch_size}")
        require(
            eval_batch_size is None or eval_batch_size > 0,
            "data.eval_batch_size",
            f"must be positive, got {eval_batch_size}",
        )
        require(num_workers is None or num_workers >= 0, "data.num_workers", f"must be >= 0, got {num_workers}")
        require(val_split >= 0, "data.val_split", f"must be >= 0, got {val_split}")
        require(
            train_subset is None or 0 < train_subset <= 1 or float(train_subset).is_integer(),
            "data.train_subset",
            f"must be a fraction in (0, 1] or a whole number of images, got {train_subset}",
        )
        require(shuffle_window >= 1, "data.shuffle_window", f"must be >= 1, got {shuffle_window}")
        require(shuffle_buffer >= 1, "data.shuffle_buffer", f"must be >= 1, got {shuffle_buffer}")
        # Source.
        options = dict(
            image_column=image_column, label_column=label_column, num_classes=num_classes, streaming=streaming
        )
        self.source = get_source(dataset, root, download, cache_dir=cache_dir, **options)
        self.dataset = dataset
        self.val_split = val_split
        self.split_seed = split_seed
        self.train_subset = train_subset
        info = self.source.info
        self._image_size = info.image_size if image_size is None else image_size  # 0 is not "not given"
        require(self._image_size > 0, "data.image_size", f"must be positive, got {image_size}")
        # Record the resolved size, as the model's linked hparam is (the logger merges both sets of hparams).
        self.save_hyperparameters({**self.hparams, "image_size": self._image_size, "num_classes": info.num_classes})
        if image_size is None and not getattr(self.source, "square", True):
            raise ConfigError(
                "data.image_size",
                f"the images of {root!r} are not square (the first is {info.image_size} px on its long side)",
                "set data.image_size, the side the images are resized/cropped to",
            )
        self.mean = tuple(mean) if mean is not None else info.mean
        self.std = tuple(std) if std is not None else info.std
        if (mean is None or std is None) and self.source.statistics_note:
            say(self.source.statistics_note)  # e.g. ImageNet's statistics on 32 px hub images
        for name, values in (("mean", self.mean), ("std", self.std)):
            require(
                len(values) == info.in_chans,
                f"data.{name}",
                f"has {len(values)} values for {info.in_chans}-channel images",
                f"give {info.in_chans}",
            )
        require(all(s > 0 for s in self.std), "data.std", f"must be positive, got {self.std}")
        # Loading.
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self._eval_batch_size_given = eval_batch_size
        self._num_workers_given, self._persistent_workers, self._prefetch_factor = (
            num_workers,
            persistent_workers,
            prefetch_factor,
        )
        if num_workers is None:
            num_workers = 0 if self.source.in_memory else min(8, os.cpu_count() or 1)
        self.num_workers = num_workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.prefetch_factor = prefetch_factor if num_workers > 0 else None
        # Augmentation of the training images.
        self.augmentation = Augmentation.for_dataset(
            info.natural,
            info.small,
            train_crop,
            hflip,
            crop_padding=crop_padding,
            crop_scale=crop_scale,
            auto_augment=auto_augment,
            color_jitter=color_jitter,
            interpolation=interpolation,
            random_erasing=random_erasing,
            random_erasing_mode=random_erasing_mode,
            random_erasing_count=random_erasing_count,
        )
        if self.source.in_memory:
            self.augmentation.refuse_image_augmentation(dataset)
        # Evaluation.
        self.eval_crop = eval_crop or ("resize" if info.small else "resmall_crop")
        require(0 < eval_crop_pct <= 1, "data.eval_crop_pct", f"must be in (0, 1], got {eval_crop_pct}")
        self.eval_crop_pct = eval_crop_pct
        self.interpolation = interpolation
        self.predict_root = predict_root
        # Augmentation of whole batches, and the input permutation of every image.
        self.mixup_fn = build_mixup(
            info.num_classes, mixup, cutmix, mixup_prob, mixup_switch_prob, mixup_mode, batch_size
        )
        self.permutation = (
            None
            if input_permutation == "none"
            else InputPermutation(input_permutation, self._image_size, permutation_patch_size, permutation_seed)
        )
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        # The data path: the tensor path's batched plans (None: the PIL path), and the path taken ("tensor"
        # or "pil"), known once setup() has seen the images.
        require(pipeline in PIPELINES, "data.pipeline", f"unknown pipeline {pipeline!r}", "choose auto, tensor or pil")
        require(tensor_limit_gb > 0, "data.tensor_limit_gb", f"must be positive, got {tensor_limit_gb}")
        in_batches = self.source.sharded or self.source.streaming  # no whole split to decode into memory
        self.plans = batched_plans(pipeline, self.source.in_memory, dataset, self._image_transform, in_batches)
        self.tensor_path = (
            None
            if self.plans is None
            else TensorPath(self.plans, pipeline == "tensor", dataset, root, cache_dir, tensor_limit_gb)
        )
        self.pipeline: str | None = None if self.plans is not None else "pil"

    # Facts linked into the model by the CLI (known without reading the data).
    @property
    def info(self) -> DatasetInfo:
        return self.source.info

    @property
    def num_classes(self) -> int:
        return self.info.num_classes

    @property
    def image_size(self) -> int:
        return self._image_size

    @property
    def in_chans(self) -> int:
        return self.info.in_chans

    def _image_transform(self, train: bool) -> Callable:
        """The PIL → normalised tensor transform of training or evaluation images (no permutation)."""
        native = self.info.image_size
        if train:
            return train_transform(self.image_size, native, self.augmentation, self.mean, self.std)
        return eval_transform(
            self.image_size, native, self.eval_crop, self.eval_crop_pct, self.interpolation, self.mean, self.std
        )

    def transform(self, train: bool) -> Callable:
        """The per-image transform of the training (augmented) or evaluation inputs."""
        native = self.info.image_size
        steps: list[Callable] = []
        if self.source.in_memory:  # decoded tensors: normalise (and resize) only
            if native != self.image_size:
                steps.append(T.Resize((self.image_size, self.image_size), antialias=True))
            steps.append(T.Normalize(self.mean, self.std))
        else:
            steps.append(self._image_transform(train))
        if self.permutation is not None:
            steps.append(self.permutation)
        return steps[0] if len(steps) == 1 else T.Compose(steps)

    def _decoded(self, requests: list[tuple[str, Dataset, str, list[int] | None, bool]]) -> list[DecodedImages] | None:
        """The tensor path's datasets of (role, base dataset, split, indices, train) `requests`, or None
        where the PIL path reads them (`mixer_lightning.data.tensor_path.TensorPath.datasets`)."""
        if self.tensor_path is None:
            return None
        sides = tuple(self.image_size if plan.prefix else self.info.image_size for plan in self.tensor_path.plans)
        sets = self.tensor_path.datasets(requests, sides, self.in_chans, self.permutation, self.num_classes)
        if sets is not None:
            self.pipeline = "tensor"
        return sets

    def setup(self, stage: str | None = None) -> None:
        if self.source.streaming:
            from mixer_lightning.data.streaming import setup_streams

            return setup_streams(self, stage)
        if stage in (None, "fit", "validate") and self.train_set is None:
            train = self.source.load("train")
            if self.source.has_val:
                train_idx = list(range(len(train)))
                val_base, val_split, val_idx = self.source.load("val"), "val", None
            elif self.val_split == 0:  # no held-out images: validate on the test split
                train_idx, val_base, val_split, val_idx = (
                    list(range(len(train))),
                    self.source.load("test"),
                    "test",
                    None,
                )
            else:
                train_idx, val_idx = split_train(len(train), self.val_split, self.split_seed)
                val_base, val_split = train, "train"
            train_idx = train_subset(train_idx, self.train_subset, self.split_seed)
            if self.mixup_fn is not None:
                require(
                    len(train_idx) >= self.batch_size,
                    "data.batch_size",
                    f"mixup/cutmix needs full, even batches, but the training set has {len(train_idx)} images, "
                    f"fewer than one batch of {self.batch_size}",
                    "lower data.batch_size (even) or use more training images",
                )
            decoded = self._decoded(
                [("train", train, "train", train_idx, True), ("val", val_base, val_split, val_idx, False)]
            )
            if decoded is not None:
                self.train_set, self.val_set = decoded
            else:
                self.pipeline = "pil"
                self.train_set = TransformedDataset(train, self.transform(train=True), train_idx)
                self.val_set = TransformedDataset(val_base, self.transform(train=False), val_idx)
        if (stage in (None, "test") or stage == "predict" and self.predict_root is None) and self.test_set is None:
            test = self.source.load("test")
            decoded = self._decoded([("test", test, "test", None, False)])
            if decoded is not None:
                (self.test_set,) = decoded
            else:
                self.pipeline = self.pipeline or "pil"
                self.test_set = TransformedDataset(test, self.transform(train=False))

    def evaluation_batch_size(self, dataset: Any) -> int:
        """The batch size of `dataset`'s validation/test/predict loader: ``eval_batch_size``, which defaults
        to 4 × ``batch_size`` on the tensor path (one gather per batch), else to ``batch_size``."""
        tensor = isinstance(dataset, (DecodedImages, KeyView))
        return (self._eval_batch_size_given or 4 * self.batch_size) if tensor else self.eval_batch_size

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader:
        assert dataset is not None, "setup() has not been called"
        if self.source.streaming:
            from mixer_lightning.data.streaming import datamodule_loader

            return datamodule_loader(self, dataset, train)
        tensor = isinstance(dataset, DecodedImages)
        # The tensor path needs no workers (a key batch costs microseconds), unless asked for.
        workers = (
            self._num_workers_given
            if tensor and self._num_workers_given is not None
            else (0 if tensor else self.num_workers)
        )
        common: dict[str, Any] = dict(
            num_workers=workers,
            pin_memory=self.pin_memory,
            persistent_workers=self._persistent_workers and workers > 0,
            prefetch_factor=self._prefetch_factor if workers > 0 else None,
            **worker_options(workers, self.trainer),
        )
        length = len(dataset)
        if tensor:
            # Under a trainer, key batches go to the device and `on_after_batch_transfer` makes the
            # images there; read directly (tests, scripts), the loader gives (x, y) made on the CPU.
            common["collate_fn"] = KeyCollate(None if self.trainer is not None else dataset)
            dataset = dataset.key_view()
        if not train:
            batch_size = self.evaluation_batch_size(dataset)
            # Its own generator: creating an iterator draws the workers' base seed from it, not from the global
            # RNG, which would shift dropout after every validation of a run without persistent workers, and
            # only after the first one of a resumed run with them (a resumed run would then not be exact).
            generator = torch.Generator().manual_seed(training_seed())
            sampler = self._evaluation_sampler(dataset)
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=generator, **common)
        if self.source.sharded:  # the shard-local order (`mixer_lightning.data.shard_order`)
            from mixer_lightning.data.shard_order import shard_loader

            return shard_loader(self, dataset, training_seed(), common)
        # Mixup pairs images within a batch: every training batch full (hence even) when it is on.
        drop_last = self.mixup_fn is not None or length > self.batch_size
        return training_loader(dataset, self.batch_size, drop_last, self.trainer, **common)

    def _evaluation_sampler(self, dataset: Any) -> Any:
        """Under DDP, each evaluation image on exactly one process. Lightning would wrap the loader in a
        padding `DistributedSampler`, which repeats images until every process has as many (359 test
        images on 2 processes: 360 evaluated, one twice, and test/acc1 41/360 instead of 41/359).
        Lightning's `UnrepeatedDistributedSampler` (its own for predict) gives uneven shards instead; the
        metrics are torchmetrics states summed at the epoch's end, so uneven shards need no collective
        per step. None (in order, as today) on one process."""
        trainer = self.trainer
        if trainer is None or getattr(trainer, "world_size", 1) <= 1:
            return None
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        return UnrepeatedDistributedSampler(
            dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> DataLoader:
        if self.predict_root is not None:  # image files, not the test split
            from mixer_lightning.data.predict import files_loader

            return files_loader(self, self.predict_root)
        return self._loader(self.test_set, train=False)

    # A streamed dataset's order depends on its workers and processes: recorded in checkpoints, compared on resuming.
    def state_dict(self) -> dict[str, Any]:
        layout = getattr(self, "stream_layout", None)
        return {"stream_layout": dict(layout)} if layout else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.saved_stream_layout = state_dict.get("stream_layout")

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Tensor path: a key batch becomes its images, made on the device it was moved to. Then
        mixup/cutmix of training batches, on the device: targets become (B, num_classes) soft labels.

        timm's Mixup draws from NumPy's global RNG: it is seeded per batch by (seed, batch number) and
        restored, so the mixing is reproducible and survives resuming."""
        trainer = self.trainer
        if is_key_batch(batch):
            images = {"train": self.train_set, "val": self.val_set, "test": self.test_set}[batch["split"]]
            batch = images.materialize(batch)
            # What the trainer did to the key batch before moving it (64-true, bf16-true: the inputs'
            # dtype), done to the images: the same float64 / bf16 inputs as on the PIL path.
            plugin = getattr(trainer, "precision_plugin", None)
            if plugin is not None:
                batch = plugin.convert_input(batch)
        if self.mixup_fn is None or trainer is None or not trainer.training:
            return batch
        x, y = batch
        batch_number = trainer.fit_loop.epoch_loop.batch_progress.total.ready
        with seeded(mix(training_seed(), batch_number)):
            return self.mixup_fn(x, y)
