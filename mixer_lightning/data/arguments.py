"""The data module's arguments in the groups that travel together (`ImageDataModule` keeps them flat, as every
config and every checkpoint's hyper-parameters write them; each group is built once and handed whole to what
uses it: the source, the loaders, mixup, the evaluation crops; `transforms.Augmentation` is the training one)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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


class Group:
    """A group of arguments, with restricted numbers as plain ones (`plain`)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            object.__setattr__(self, name, plain(value))


@dataclass(frozen=True)
class Images(Group):
    """Which images, split how, given to the model at what size and normalisation (`ImageDataModule`'s
    docstring says each)."""

    dataset: str
    root: str
    download: bool
    image_column: str | None
    label_column: str | None
    num_classes: int | None
    streaming: bool
    val_split: float
    split_seed: int
    train_subset: float | None
    image_size: int | None
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    input_permutation: str
    permutation_patch_size: int
    permutation_seed: int


@dataclass(frozen=True)
class Loading(Group):
    """How batches are loaded: what each loader is given (the sizes, workers, memory) and the data path."""

    batch_size: int
    eval_batch_size: int | None
    num_workers: int | None
    pin_memory: bool | None
    persistent_workers: bool
    prefetch_factor: int | None
    pipeline: str
    cache_dir: str | None
    tensor_limit_gb: float
    shuffle_window: int
    shuffle_buffer: int

    def options(self, workers: int, pin_memory: bool, trainer: Any) -> dict[str, Any]:
        """A DataLoader's options with `workers` processes: prefetching and persistence as given, the workers'
        start (`sampling.worker_options`)."""
        from mixer_lightning.data.sampling import worker_options

        persistent, prefetch = self.persistent_workers and workers > 0, self.prefetch_factor if workers > 0 else None
        options = dict(num_workers=workers, pin_memory=pin_memory, persistent_workers=persistent)
        return options | dict(prefetch_factor=prefetch, **worker_options(workers, trainer))


@dataclass(frozen=True)
class Mixing(Group):
    """Mixup and cutmix of training batches (timm's `Mixup`)."""

    mixup: float
    cutmix: float
    mixup_prob: float
    mixup_switch_prob: float
    mixup_mode: str


@dataclass(frozen=True)
class Evaluation(Group):
    """The crops of validation/test images, and the image files ``mixer predict`` reads."""

    eval_crop: str | None
    eval_crop_pct: float
    predict_root: str | list[str] | None
