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
from dataclasses import asdict
from typing import Any, Literal

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from mixer_lightning.data.arguments import Evaluation, Images, Loading, Mixing, plain
from mixer_lightning.data.pil_path import TransformedDataset
from mixer_lightning.data.sampling import (
    evaluation_sampler,
    mix,
    seeded,
    split_train,
    train_subset,
    training_loader,
    training_seed,
)
from mixer_lightning.data.sources import get_source
from mixer_lightning.data.sources.base import say
from mixer_lightning.data.tensor_path import (
    DecodedImages,
    KeyCollate,
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
from mixer_lightning.errors import require
from mixer_lightning.hardware import usable_cpus


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
        images = Images(
            dataset, root, download, image_column, label_column, num_classes, streaming, val_split, split_seed,
            train_subset, image_size, mean, std, input_permutation, permutation_patch_size, permutation_seed,
        )  # fmt: skip
        loading = Loading(
            batch_size, eval_batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, pipeline,
            cache_dir, tensor_limit_gb, shuffle_window, shuffle_buffer,
        )  # fmt: skip
        augmentation = plain(dict(  # as given: `Augmentation.for_dataset` fills in the dataset's defaults
            train_crop=train_crop, crop_padding=crop_padding, crop_scale=crop_scale, hflip=hflip, auto_augment=auto_augment,
            color_jitter=color_jitter, interpolation=interpolation, random_erasing=random_erasing,
            random_erasing_mode=random_erasing_mode, random_erasing_count=random_erasing_count,
        ))  # fmt: skip
        mixing = Mixing(mixup, cutmix, mixup_prob, mixup_switch_prob, mixup_mode)
        evaluation = Evaluation(eval_crop, eval_crop_pct, predict_root)
        self._init_source(images, loading)
        # Every argument as given, with the resolved size and classes, as the model's linked hparams are (the
        # logger merges both sets); tuples as lists: hparams.yaml is safe YAML.
        given = {**asdict(images), **asdict(loading), **augmentation, **asdict(mixing), **asdict(evaluation)}
        saved = {k: list(v) if isinstance(v, tuple) else v for k, v in given.items()}
        self.save_hyperparameters({**saved, "image_size": self.image_size, "num_classes": self.num_classes})
        # Loading (plain numbers: loaders and their state end up in checkpoints).
        self.loading = loading
        self.batch_size, self.eval_batch_size = loading.batch_size, loading.eval_batch_size or loading.batch_size
        workers = 0 if self.source.in_memory else min(8, usable_cpus())
        self.num_workers = loading.num_workers if loading.num_workers is not None else workers
        self.pin_memory = torch.cuda.is_available() if loading.pin_memory is None else loading.pin_memory
        # Augmentation of the training images, evaluation, and the input permutation of every image.
        info = self.info
        self.augmentation = Augmentation.for_dataset(info.natural, info.small, **augmentation)
        if self.source.in_memory:
            self.augmentation.refuse_image_augmentation(images.dataset)
        self.eval_crop = evaluation.eval_crop or ("resize" if info.small else "resmall_crop")
        self.eval_crop_pct, self.predict_root = evaluation.eval_crop_pct, evaluation.predict_root
        self.interpolation = self.augmentation.interpolation  # of the evaluation resizes too
        self.mixup_fn = build_mixup(info.num_classes, *asdict(mixing).values())
        permuted = (images.input_permutation, self.image_size, images.permutation_patch_size, images.permutation_seed)
        self.permutation = InputPermutation(*permuted) if images.input_permutation != "none" else None
        self.train_set = self.val_set = self.test_set = self.predict_set = None  # Datasets once setup() has run
        self.stream_layout = self.saved_stream_layout = None  # a streamed split's workers × processes (resuming)
        self.said: set[str] = set()  # what the loaders' one-time lines said already
        # The tensor path's batched plans (None: the PIL path); the path taken is known once setup() has run.
        in_batches = self.source.sharded or self.source.streaming  # no whole split to decode into memory
        plans = batched_plans(
            loading.pipeline, self.source.in_memory, images.dataset, self._image_transform, in_batches
        )
        forced, root, limit = loading.pipeline == "tensor", images.root, loading.tensor_limit_gb
        self.tensor_path = plans and TensorPath(plans, forced, images.dataset, root, loading.cache_dir, limit)
        self.plans, self.pipeline = plans, None if plans is not None else "pil"

    def _init_source(self, images: Images, loading: Loading) -> None:
        """The source of `images` and the facts the CLI links into the model, known without reading the data."""
        options = dict(image_column=images.image_column, label_column=images.label_column)
        where = (images.dataset, images.root, images.download, images.streaming, loading.cache_dir)
        self.source = get_source(*where, num_classes=images.num_classes, **options)
        self.info = info = self.source.info
        self.num_classes, self.in_chans = info.num_classes, info.in_chans
        self.image_size = images.image_size or info.image_size
        problem, fix = f"the images of {images.root!r} are not square", "set data.image_size"
        require(images.image_size is not None or self.source.square, "data.image_size", problem, fix)
        self.dataset, self.val_split = images.dataset, images.val_split
        self.split_seed, self.train_subset = images.split_seed, images.train_subset
        self.mean, self.std = tuple(images.mean or info.mean), tuple(images.std or info.std)
        if (images.mean is None or images.std is None) and self.source.statistics_note:
            say(self.source.statistics_note)  # e.g. ImageNet's statistics on 32 px hub images
        for name, values in (("mean", self.mean), ("std", self.std)):  # else broadcast silently over the channels
            require(len(values) == self.in_chans, f"data.{name}", f"has {len(values)} values, not {self.in_chans}")

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
        if self.source.streaming:  # the PIL path
            from mixer_lightning.data.streaming import stream_splits

            self.pipeline, wanted = "pil", {name for name in ("train", "test") if getattr(self, f"{name}_set") is None}
            for name, split in stream_splits(self.source, stage, self.val_split, self.train_subset, wanted).items():
                setattr(self, f"{name}_set", split)
            return
        if stage in (None, "fit", "validate") and self.train_set is None:
            train = self.source.load("train")
            train_idx, val_idx = list(range(len(train))), None
            if self.source.has_val:
                val_base, val_split = self.source.load("val"), "val"
            elif self.val_split == 0:  # no held-out images: validate on the test split
                val_base, val_split = self.source.load("test"), "test"
            else:
                train_idx, val_idx = split_train(len(train), self.val_split, self.split_seed)
                val_base, val_split = train, "train"
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

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader:
        assert dataset is not None, "setup() has not been called"
        loading, trainer = self.loading, self.trainer
        if self.source.streaming:
            from mixer_lightning.data.streaming import datamodule_loader

            batch_size = self.batch_size if train else self.eval_batch_size
            options = dict(num_workers=self.num_workers, pin_memory=self.pin_memory)
            loader, layout = datamodule_loader(
                dataset, self.transform(train), train, batch_size, loading, options, trainer, self.saved_stream_layout,
                announce="stream" not in self.said,
            )  # fmt: skip
            if train:
                self.stream_layout = layout
                self.said.add("stream")
            return loader
        tensor = isinstance(dataset, DecodedImages)
        # The tensor path needs no workers (a key batch costs microseconds), unless asked for.
        workers = (loading.num_workers or 0) if tensor else self.num_workers
        common = loading.options(workers, self.pin_memory, trainer)
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
            sampler = evaluation_sampler(dataset, trainer)
            # ``eval_batch_size`` defaults to 4 × ``batch_size`` on the tensor path (one gather per batch)
            batch_size = (loading.eval_batch_size or 4 * self.batch_size) if tensor else self.eval_batch_size
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=generator, **common)
        if self.source.sharded:  # the shard-local order (`shard_order`)
            from mixer_lightning.data.shard_order import shard_loader

            window, announce = loading.shuffle_window, "shards" not in self.said
            self.said.add("shards")
            return shard_loader(dataset, training_seed(), self.batch_size, window, trainer, common, announce)
        # Mixup pairs images within a batch: every training batch full (hence even) when it is on.
        drop_last = self.mixup_fn is not None or length > self.batch_size
        return training_loader(dataset, self.batch_size, drop_last, self.trainer, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> DataLoader:
        if self.predict_root is not None:  # image files, not the test split
            from mixer_lightning.data.predict import data_facts, files_dataset, files_loader

            self.predict_set = files_dataset(data_facts(self), self.predict_root)  # (the prediction writer's)
            return files_loader(self.predict_set, self.eval_batch_size, self.num_workers, self.pin_memory, self.trainer)
        return self._loader(self.test_set, train=False)

    # A streamed dataset's order depends on its workers and processes: recorded in checkpoints, compared on resuming.
    def state_dict(self) -> dict[str, Any]:
        return {"stream_layout": dict(self.stream_layout)} if self.stream_layout else {}

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
