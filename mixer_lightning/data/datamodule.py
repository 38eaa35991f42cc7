"""`ImageDataModule`: one LightningDataModule for every dataset of the project.

It reads a named source (`sources`), carves a seeded validation split from train when the dataset has
none, optionally keeps a seeded subset of the training images (`sampling`), applies timm's training
augmentation or the evaluation pre-processing (`transforms`), the optional input permutation of the
Mixer paper (Sec. 3.4), and mixup/cutmix on training batches. It knows ``num_classes``,
``image_size`` and ``in_chans`` at construction, which the CLI links into the model. Two data paths
give the same batches bit for bit (``data.pipeline``): the per-image PIL path (`pil_path`, in
DataLoader workers) and the tensor path (`tensor_path`: each split decoded once, whole batches made on
the training device).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from types import SimpleNamespace
from typing import Any, Literal

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

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
from mixer_lightning.data.sources import get_source
from mixer_lightning.data.sources.base import say
from mixer_lightning.data.tensor_path import (
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
    Interpolation,
    MixupMode,
    PermutationMode,
    TrainCrop,
    build_mixup,
    eval_transform,
    train_transform,
)
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.hardware import usable_cpus


def plain(value: Any) -> Any:
    """`value` with jsonargparse's restricted numbers (`PositiveInt`, ...) as the int or float they are:
    hyper-parameters go into checkpoints read with ``weights_only=True`` and into YAML."""
    if isinstance(value, dict):
        return {key: plain(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if isinstance(value, int) else float(value)
    return value


class ImageDataModule(LightningDataModule):
    """Image classification data for every experiment (the table of arguments: docs/notes/data-api.md).

    Args:
        dataset: ``digits`` (scikit-learn's 8×8 digits, embedded), ``cifar10``, ``cifar100``, ``stl10``,
            ``mnist`` (torchvision formats), ``imagenet``, ``folder`` (root/train, root/val class folders),
            ``hf`` (a Hugging Face hub id or local folder), ``wds`` (WebDataset tar shards).
        root: folder where the dataset lives (or is downloaded to); for ``hf`` the hub id or folder.
        download: fetch a torchvision dataset into ``root`` when it is missing.
        image_column: ``hf``: the image column (default: ``img`` or ``image``).
        label_column: ``hf``: the label column (default: ``label``, ``fine_label`` or ``labels``).
        num_classes: ``wds`` and streamed ``hf``: the number of classes, where the data does not say it.
        streaming: ``hf``: stream the dataset instead of downloading it.
        val_split: fraction (< 1) or number (>= 1) of training images held out for validation where the
            dataset has no validation split; 0: validate on the test split (what the papers report).
        split_seed: seed of that split and of ``train_subset`` (apart from the training seed).
        train_subset: keep a fraction (<= 1) or a number (> 1) of the training images: quick runs.
        image_size: side of the square images given to the model (default: the data's; its first image's).
        mean: normalisation mean (default: the dataset's; ImageNet's for imagenet/folder/hf).
        std: normalisation standard deviation (default: the dataset's).
        input_permutation: ``patch_pixel`` or ``global`` pixel shuffle (Mixer Sec. 3.4), or ``none``.
        permutation_patch_size: patch side of ``patch_pixel`` (the model's patch size).
        permutation_seed: seed of the input permutation.
        batch_size: training batch size (per device).
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``; 4 × on the tensor path).
        num_workers: DataLoader worker processes (default: 0 for in-memory data and the tensor path, else
            min(8, CPUs)).
        pin_memory: pin batches in page-locked memory (default: when CUDA is available).
        persistent_workers: keep the workers alive between epochs.
        prefetch_factor: batches loaded ahead by each worker (default: torch's).
        pipeline: ``tensor`` (decode each split once, crop, flip and normalise whole batches on the device),
            ``pil`` (per-image transforms in workers), or ``auto``: tensor where the augmentation has a
            batched form (pad-and-crop, flip, resizes, evaluation crops) and the images fit
            ``tensor_limit_gb``.
        cache_dir: where the tensor path keeps decoded splits and ``wds`` its index (default:
            ``$MIXER_CACHE_DIR``, else ``<root>/.mixer_cache`` if writable, else ``~/.cache/mixer_lightning``).
        tensor_limit_gb: the most GiB of decoded images the tensor path holds.
        shuffle_window: ``wds``: shards whose samples are shuffled together (8 ImageNet shards ≈ 10,000 images).
        shuffle_buffer: streamed ``hf``: examples in Hugging Face's shuffle buffer.
        train_crop: ``random_crop`` (pad by ``crop_padding``, random crop: CIFAR style),
            ``random_resized_crop`` (timm's Inception crop: ImageNet style) or ``resize``. Default:
            random_crop for natural images <= 96 px (any source), resize for digits/MNIST, else random_resized_crop.
        crop_padding: padding of ``random_crop``.
        crop_scale: range of the crop's area fraction in ``random_resized_crop``.
        hflip: probability of a horizontal flip (default 0.5; 0 for digits and MNIST).
        auto_augment: timm AutoAugment / RandAugment / AugMix policy (``original``, ``rand-m9-mstd0.5-inc1``, ...).
        color_jitter: colour-jitter strength (timm skips it when ``auto_augment`` is set).
        interpolation: of the resizes (``random``: training only).
        random_erasing: probability of timm's random erasing.
        random_erasing_mode: fill of the erased box.
        random_erasing_count: most boxes erased per image.
        mixup: mixup α (0: off); the targets become soft.
        cutmix: cutmix α (0: off).
        mixup_prob: probability of mixing a batch.
        mixup_switch_prob: probability of cutmix rather than mixup when both are on.
        mixup_mode: mix per ``batch``, ``pair`` or ``elem`` (timm).
        eval_crop: ``resize_crop`` (resize to (s/pct)², centre crop s), ``resmall_crop`` (shorter side to
            s/pct, centre crop s) or ``resize`` (Mixer supplementary C). Default: resmall_crop above 96 px.
        eval_crop_pct: s / resize side of the evaluation crops (224/256 = 0.875).
        predict_root: ``mixer predict`` reads these image files (a folder, at any depth, or files).
    """

    def __init__(
        self,
        # Source: which images, split how, given to the model at what size and normalisation.
        dataset: str = "digits",
        root: str = "data",
        download: bool = True,
        image_column: str | None = None,
        label_column: str | None = None,
        num_classes: PositiveInt | None = None,
        streaming: bool = False,
        val_split: NonNegativeFloat = 0.1,
        split_seed: int = 0,
        train_subset: PositiveFloat | None = None,
        image_size: PositiveInt | None = None,
        mean: tuple[float, ...] | None = None,
        std: tuple[PositiveFloat, ...] | None = None,
        input_permutation: PermutationMode = "none",
        permutation_patch_size: PositiveInt = 16,
        permutation_seed: int = 0,
        # Loading: batches, workers, and the data path.
        batch_size: PositiveInt = 128,
        eval_batch_size: PositiveInt | None = None,
        num_workers: NonNegativeInt | None = None,
        pin_memory: bool | None = None,
        persistent_workers: bool = True,
        prefetch_factor: PositiveInt | None = None,
        pipeline: Pipeline = "auto",
        cache_dir: str | None = None,
        tensor_limit_gb: PositiveFloat = 4.0,
        shuffle_window: PositiveInt = 8,
        shuffle_buffer: PositiveInt = 10_000,
        # Augmentation of the training images.
        train_crop: TrainCrop | None = None,
        crop_padding: NonNegativeInt = 4,
        crop_scale: tuple[ClosedUnitInterval, ClosedUnitInterval] = (0.08, 1.0),
        hflip: ClosedUnitInterval | None = None,
        auto_augment: str | None = None,
        color_jitter: NonNegativeFloat = 0.0,
        interpolation: Interpolation = "bilinear",
        random_erasing: ClosedUnitInterval = 0.0,
        random_erasing_mode: Literal["const", "rand", "pixel"] = "pixel",
        random_erasing_count: PositiveInt = 1,
        mixup: NonNegativeFloat = 0.0,
        cutmix: NonNegativeFloat = 0.0,
        mixup_prob: ClosedUnitInterval = 1.0,
        mixup_switch_prob: ClosedUnitInterval = 0.5,
        mixup_mode: MixupMode = "batch",
        # Evaluation: the crops of validation/test images, and image files to predict.
        eval_crop: EvalCrop | None = None,
        eval_crop_pct: ClosedUnitInterval = 0.875,
        predict_root: str | list[str] | None = None,
    ):
        super().__init__()
        a = SimpleNamespace(**plain({k: v for k, v in locals().items() if k not in ("self", "__class__")}))
        options = dict(image_column=image_column, label_column=label_column, num_classes=a.num_classes)
        self.source = get_source(dataset, root, download, streaming, cache_dir, **options)
        # Facts linked into the model by the CLI (known without reading the data).
        self.info = info = self.source.info
        self.num_classes, self.in_chans = info.num_classes, info.in_chans
        self.image_size = a.image_size or info.image_size
        # The resolved size and classes, as the model's linked hparams are (the logger merges both sets).
        saved = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(a).items()}  # hparams.yaml: safe YAML
        self.save_hyperparameters({**saved, "image_size": self.image_size, "num_classes": info.num_classes})
        if image_size is None and not self.source.square:
            raise ConfigError("data.image_size", f"the images of {root!r} are not square", "set data.image_size")
        self.dataset, self.val_split, self.split_seed, self.train_subset = dataset, val_split, split_seed, train_subset
        self.mean, self.std = tuple(a.mean or info.mean), tuple(a.std or info.std)
        if (mean is None or std is None) and self.source.statistics_note:
            say(self.source.statistics_note)  # e.g. ImageNet's statistics on 32 px hub images
        for name, values in (("mean", self.mean), ("std", self.std)):  # else broadcast silently over the channels
            require(len(values) == self.in_chans, f"data.{name}", f"has {len(values)} values, not {self.in_chans}")
        # Loading (plain numbers: loaders and their state end up in checkpoints).
        self.batch_size, self.eval_batch_size = a.batch_size, a.eval_batch_size or a.batch_size
        self.num_workers_given, self.prefetch_factor = a.num_workers, a.prefetch_factor
        self.persistent_workers = persistent_workers
        self.shuffle_window, self.shuffle_buffer = a.shuffle_window, a.shuffle_buffer
        workers = 0 if self.source.in_memory else min(8, usable_cpus())
        self.num_workers = a.num_workers if num_workers is not None else workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        # Augmentation of the training images, evaluation, and the input permutation of every image.
        settings = {field.name: getattr(a, field.name) for field in fields(Augmentation)}
        self.augmentation = Augmentation.for_dataset(info.natural, info.small, **settings)
        if self.source.in_memory:
            self.augmentation.refuse_image_augmentation(dataset)
        self.eval_crop = eval_crop or ("resize" if info.small else "resmall_crop")
        self.eval_crop_pct, self.interpolation, self.predict_root = a.eval_crop_pct, interpolation, predict_root
        self.mixup_fn = build_mixup(info.num_classes, a.mixup, a.cutmix, a.mixup_prob, a.mixup_switch_prob, mixup_mode)
        permuted = (input_permutation, self.image_size, a.permutation_patch_size, permutation_seed)
        self.permutation = InputPermutation(*permuted) if input_permutation != "none" else None
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        # The tensor path's batched plans (None: the PIL path); the path taken is known once setup() has run.
        in_batches = self.source.sharded or self.source.streaming  # no whole split to decode into memory
        self.plans = plans = batched_plans(pipeline, self.source.in_memory, dataset, self._image_transform, in_batches)
        forced = pipeline == "tensor"
        self.tensor_path = plans and TensorPath(plans, forced, dataset, root, cache_dir, a.tensor_limit_gb)
        self.pipeline: str | None = None if plans is not None else "pil"

    @property
    def validates_on_test(self) -> str | None:  # why val is the test split (`DatasetSource.test_as_val`), or None
        return self.source.test_as_val(self.val_split)

    def _image_transform(self, train: bool) -> Callable:
        """The PIL → normalised tensor transform of training or evaluation images (no permutation)."""
        native = self.info.image_size if self.source.square else 0  # images of several sides: always resized
        if train:
            return train_transform(self.image_size, native, self.augmentation, self.mean, self.std)
        crop, pct = self.eval_crop, self.eval_crop_pct
        return eval_transform(self.image_size, native, crop, pct, self.interpolation, self.mean, self.std)

    def transform(self, train: bool) -> Callable:
        """The per-image transform of the training (augmented) or evaluation inputs."""
        steps: list[Callable] = []
        if self.source.in_memory:  # decoded tensors: normalise (and resize) only
            if self.info.image_size != self.image_size:
                steps.append(T.Resize((self.image_size, self.image_size), antialias=True))
            steps.append(T.Normalize(self.mean, self.std))
        else:
            steps.append(self._image_transform(train))
        if self.permutation is not None:
            steps.append(self.permutation)
        return steps[0] if len(steps) == 1 else T.Compose(steps)

    def _decoded(self, requests: list[tuple[str, Dataset, str, list[int] | None, bool]]) -> list[DecodedImages] | None:
        """The tensor path's datasets of (role, base dataset, split, indices, train) `requests`, or None
        where the PIL path reads them."""
        if self.tensor_path is None:
            return None
        sides = tuple(self.image_size if plan.prefix else self.info.image_size for plan in self.tensor_path.plans)
        sets = self.tensor_path.datasets(requests, sides, self.in_chans, self.permutation)
        self.pipeline = "tensor" if sets is not None else "pil"
        return sets

    def setup(self, stage: str | None = None) -> None:
        if self.source.streaming:
            from mixer_lightning.data.streaming import setup_streams

            return setup_streams(self, stage)
        if stage in (None, "fit", "validate") and self.train_set is None:
            train = self.source.load("train")
            train_idx, val_idx = list(range(len(train))), None
            if self.source.has_val:
                val_base, val_split = self.source.load("val"), "val"
            elif self.val_split == 0:  # no held-out images: validate on the test split
                val_base, val_split = self.source.load("test"), "test"
            else:
                (train_idx, val_idx), val_base, val_split = (
                    split_train(len(train), self.val_split, self.split_seed),
                    train,
                    "train",
                )
            train_idx = train_subset(train_idx, self.train_subset, self.split_seed)
            requests = [("train", train, "train", train_idx, True), ("val", val_base, val_split, val_idx, False)]
            decoded = self._decoded(requests)
            if decoded is not None:
                self.train_set, self.val_set = decoded
            else:
                self.train_set = TransformedDataset(train, self.transform(train=True), train_idx)
                self.val_set = TransformedDataset(val_base, self.transform(train=False), val_idx)
        if (stage in (None, "test") or stage == "predict" and self.predict_root is None) and self.test_set is None:
            test = self.source.load("test")
            decoded = self._decoded([("test", test, "test", None, False)])
            self.test_set = decoded[0] if decoded is not None else TransformedDataset(test, self.transform(train=False))
        self.pipeline = self.pipeline or "pil"

    def evaluation_batch_size(self, dataset: Any) -> int:
        """The batch size of `dataset`'s evaluation loader: ``eval_batch_size``, which defaults to 4 ×
        ``batch_size`` on the tensor path (one gather per batch), else to ``batch_size``."""
        tensor = isinstance(dataset, (DecodedImages, KeyView))
        given = self.hparams["eval_batch_size"]
        return (given or 4 * self.batch_size) if tensor else self.eval_batch_size

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader:
        assert dataset is not None, "setup() has not been called"
        if self.source.streaming:
            from mixer_lightning.data.streaming import datamodule_loader

            return datamodule_loader(self, dataset, train)
        tensor = isinstance(dataset, DecodedImages)
        # The tensor path needs no workers (a key batch costs microseconds), unless asked for.
        workers = (self.num_workers_given or 0) if tensor else self.num_workers
        common: dict[str, Any] = dict(
            num_workers=workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers and workers > 0,
            prefetch_factor=self.prefetch_factor if workers > 0 else None,
            **worker_options(workers, self.trainer),
        )
        length = len(dataset)
        if tensor:
            # Under a trainer, key batches go to the device and `on_after_batch_transfer` makes the images
            # there; read directly (tests, scripts), the loader gives (x, y) made on the CPU.
            common["collate_fn"] = KeyCollate(None if self.trainer is not None else dataset)
            dataset = dataset.key_view()
        if not train:
            # Its own generator: making an iterator draws the workers' base seed from it, not from the global
            # RNG, which would shift dropout after a validation (and a resumed run would not be exact).
            generator = torch.Generator().manual_seed(training_seed())
            sampler = self._evaluation_sampler(dataset)
            batch_size = self.evaluation_batch_size(dataset)
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=generator, **common)
        if self.source.sharded:  # the shard-local order (`shard_order`)
            from mixer_lightning.data.shard_order import shard_loader

            return shard_loader(self, dataset, training_seed(), common)
        # Mixup pairs images within a batch: every training batch full (hence even) when it is on.
        drop_last = self.mixup_fn is not None or length > self.batch_size
        return training_loader(dataset, self.batch_size, drop_last, self.trainer, **common)

    def _evaluation_sampler(self, dataset: Any) -> Any:
        """Under DDP, each evaluation image on exactly one process: Lightning's own padding
        `DistributedSampler` would repeat images until every process has as many, and count them twice in
        the metrics (torchmetrics states summed at the epoch's end take uneven shards)."""
        trainer = self.trainer
        if getattr(trainer, "world_size", 1) <= 1:
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
        """Tensor path: a key batch becomes its images, made on the device it was moved to. Then mixup/cutmix
        of training batches, on the device. timm's Mixup draws from NumPy's global RNG: it is seeded per batch
        by (seed, batch number) and restored, so the mixing is reproducible and survives resuming."""
        trainer = self.trainer
        if is_key_batch(batch):
            images = {"train": self.train_set, "val": self.val_set, "test": self.test_set}[batch["split"]]
            batch = images.materialize(batch)
            # What the trainer did to the key batch before moving it (64-true, bf16-true), done to the images.
            plugin = getattr(trainer, "precision_plugin", None)
            if plugin is not None:
                batch = plugin.convert_input(batch)
        if self.mixup_fn is None or trainer is None or not trainer.training:
            return batch
        x, y = batch
        with seeded(mix(training_seed(), trainer.fit_loop.epoch_loop.batch_progress.total.ready)):
            return self.mixup_fn(x, y)
