"""Image transforms: timm's training augmentation (`train_transform`: `timm.data.create_transform`'s
three stages, with our pad-and-crop stage for small images), the evaluation crops of Mixer supplementary
C (`eval_transform`: "resize-crop", "resmall-crop", or a plain resize for small images), the input
permutations of Mixer Sec. 3.4 (`InputPermutation`), and timm's Mixup / CutMix (`build_mixup`).

Label smoothing is the model's loss's (``model.label_smoothing``): ``F.cross_entropy(logits, soft_targets,
label_smoothing=ε)`` is timm's ``Mixup(label_smoothing=ε)`` then ``SoftTargetCrossEntropy`` (smoothing is
linear), so the mixing here smooths nothing and one knob does both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from einops import rearrange
from PIL import Image, ImageOps
from torchvision import transforms as T

from mixer_lightning.errors import require

TrainCrop = Literal["random_crop", "random_resized_crop", "resize"]
EvalCrop = Literal["resize_crop", "resmall_crop", "resize"]
PermutationMode = Literal["none", "patch_pixel", "global"]
Interpolation = Literal["bilinear", "bicubic", "nearest", "lanczos", "random"]
MixupMode = Literal["batch", "pair", "elem"]
INTERPOLATIONS = get_args(Interpolation)
# timm's crop_mode for each of the Mixer supplementary's evaluation pre-processings.
TIMM_CROP_MODE = {"resize_crop": "squash", "resmall_crop": "center"}


def posterize(img: Image.Image, bits_to_keep: int, **_: Any) -> Image.Image:
    """timm's posterize op, with Pillow < 13's answer for 0 bits kept (a black image) on every Pillow:
    timm maps ``rand-…-inc1``'s increasing posterize at level 10 and ``v0``'s level 2 to 0 bits, which
    Pillow 13 refuses ("bits must be between ... 1 and 8"), ending a run at a random step."""
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits_to_keep)


class ToNormalizedTensor:
    """PIL image → normalised float (C, H, W) tensor: ``ToTensor`` + ``Normalize`` in one NumPy pass (the
    same values to float32 rounding, in a quarter of the time); its ``x · scale + shift`` is what the
    tensor path computes on whole batches (`batched.BatchedPlan.normalize`)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean, self.std = tuple(mean), tuple(std)
        std_ = np.asarray(self.std, dtype=np.float32)
        self.scale = 1.0 / (255.0 * std_)  # (x/255 - m) / s = x · scale + shift
        self.shift = -np.asarray(self.mean, dtype=np.float32) / std_

    def __call__(self, image: Image.Image) -> torch.Tensor:
        array = np.asarray(image, dtype=np.float32)
        if array.ndim == 2:  # grey
            array = array[:, :, None]
        return torch.from_numpy(np.ascontiguousarray((array * self.scale + self.shift).transpose(2, 0, 1)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


def _fuse_normalization(steps: Sequence[Callable], mean: Sequence[float], std: Sequence[float]) -> list[Callable]:
    """`steps` with timm's / torchvision's ToTensor + Normalize replaced by one `ToNormalizedTensor`."""
    names = ("MaybeToTensor", "ToTensor")
    fused = [ToNormalizedTensor(mean, std) if type(step).__name__ in names else step for step in steps]
    return [step for step in fused if type(step).__name__ != "Normalize"]


def _augment_ops(transform: Any) -> list[Any]:
    """timm's AugmentOp objects inside an AutoAugment / RandAugment / AugMix transform (or a Compose)."""
    if isinstance(transform, T.Compose):
        return [op for t in transform.transforms for op in _augment_ops(t)]
    if hasattr(transform, "policy"):  # AutoAugment: a list of sub-policies, each a list of ops
        return [op for sub_policy in transform.policy for op in sub_policy]
    return list(getattr(transform, "ops", ()))  # RandAugment, AugMixAugment


def fix_posterize(transform: Any) -> Any:
    """Point every posterize op of `transform` at our Pillow-13-safe `posterize` (in place)."""
    from timm.data import auto_augment as timm_auto_augment  # lazily: importing timm imports all its models

    for op in _augment_ops(transform):
        if op.aug_fn is timm_auto_augment.posterize:
            op.aug_fn = posterize
    return transform


@dataclass(frozen=True)
class Augmentation:
    """The training augmentation (`train_transform`): the data module's arguments that travel together."""

    train_crop: TrainCrop = "random_crop"
    crop_padding: int = 4
    crop_scale: tuple[float, float] = (0.08, 1.0)
    hflip: float = 0.5
    auto_augment: str | None = None
    color_jitter: float = 0.0
    interpolation: Interpolation = "bilinear"
    random_erasing: float = 0.0
    random_erasing_mode: str = "pixel"
    random_erasing_count: int = 1

    @classmethod
    def for_dataset(
        cls,
        natural: bool,
        small: bool,
        train_crop: TrainCrop | None = None,
        hflip: float | None = None,
        **settings: Any,
    ) -> Augmentation:
        """The dataset's default crop (pad-and-crop for small natural images, a resize for small others such
        as digits, the random-resized crop above 96 px) and flip (0.5 for natural images, none for digits)."""
        if train_crop is None:
            train_crop = ("random_crop" if natural else "resize") if small else "random_resized_crop"
        return cls(train_crop=train_crop, hflip=(0.5 if natural else 0.0) if hflip is None else hflip, **settings)

    def refuse_image_augmentation(self, dataset: str) -> None:
        """An error naming the first image augmentation set, for a dataset of decoded tensors, which would
        otherwise train without it."""
        for name, off in (("auto_augment", None), ("random_erasing", 0.0), ("color_jitter", 0.0), ("hflip", 0.0)):
            require(getattr(self, name) == off, f"data.{name}", f"{dataset} has no image augmentation", "remove it")


def train_transform(
    image_size: int, native_size: int, augmentation: Augmentation, mean: Sequence[float], std: Sequence[float]
) -> Callable:
    """PIL image → normalised (C, image_size, image_size) tensor, augmented as `augmentation` says."""
    from timm.data import create_transform  # lazily: importing timm imports all its models

    a = augmentation
    primary, secondary, final = create_transform(
        image_size,
        is_training=True,
        train_crop_mode="rrc",
        scale=tuple(a.crop_scale),
        hflip=a.hflip,
        color_jitter=a.color_jitter or None,
        auto_augment=a.auto_augment,
        interpolation=a.interpolation,
        mean=tuple(mean),
        std=tuple(std),
        re_prob=a.random_erasing,
        re_mode=a.random_erasing_mode,
        re_count=a.random_erasing_count,
        separate=True,
    )
    if a.train_crop != "random_resized_crop":
        steps: list[Callable] = []
        if native_size != image_size:
            steps.append(T.Resize((image_size, image_size), interpolation=_interpolation(a.interpolation)))
        if a.train_crop == "random_crop":
            steps.append(T.RandomCrop(image_size, padding=a.crop_padding))
        if a.hflip > 0:
            steps.append(T.RandomHorizontalFlip(a.hflip))
        primary = T.Compose(steps)
    steps = [*primary.transforms, *fix_posterize(secondary).transforms, *final.transforms]
    return T.Compose(_fuse_normalization(steps, mean, std))


def eval_transform(
    image_size: int,
    native_size: int,
    crop: EvalCrop,
    crop_pct: float,
    interpolation: str,
    mean: Sequence[float],
    std: Sequence[float],
) -> Callable:
    """PIL image → normalised (C, image_size, image_size) tensor, pre-processed for evaluation."""
    from timm.data import create_transform  # lazily: importing timm imports all its models

    if crop in TIMM_CROP_MODE:
        timm_eval = create_transform(
            image_size,
            is_training=False,
            crop_pct=crop_pct,
            crop_mode=TIMM_CROP_MODE[crop],
            interpolation="bicubic" if interpolation == "random" else interpolation,
            mean=tuple(mean),
            std=tuple(std),
        )
        return T.Compose(_fuse_normalization(timm_eval.transforms, mean, std))
    steps: list[Callable] = []
    if native_size != image_size:
        steps.append(T.Resize((image_size, image_size), interpolation=_interpolation(interpolation)))
    return T.Compose([*steps, ToNormalizedTensor(mean, std)])


def _interpolation(name: str) -> T.InterpolationMode:
    return T.InterpolationMode("bicubic" if name == "random" else name)


class InputPermutation:
    """One fixed permutation of the pixels of every image (Mixer paper Section 3.4, Fig. 4), drawn from
    `seed`, the same for every image, split and epoch. ``patch_pixel``: the image's P×P patches are
    shuffled, and the pixels inside every patch permuted by one permutation shared by all patches (P must
    divide the image size); ``global``: the pixels of the whole image are permuted. A pixel keeps its
    channels together."""

    def __init__(self, mode: Literal["patch_pixel", "global"], image_size: int, patch_size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        if mode == "global":
            index = torch.randperm(image_size * image_size, generator=generator)
        else:
            grid = image_size // patch_size
            patch_order = torch.randperm(grid * grid, generator=generator)
            pixel_order = torch.randperm(patch_size * patch_size, generator=generator)
            # Flat pixel index of (patch k, pixel q within it), in raster order of patches and pixels.
            pixels = torch.arange(image_size * image_size)
            by_patch = rearrange(pixels, "(gh ph gw pw) -> (gh gw) (ph pw)", gh=grid, ph=patch_size, gw=grid)
            # Output patch k, pixel q comes from input patch patch_order[k], pixel pixel_order[q].
            index = torch.empty(image_size * image_size, dtype=torch.long)
            index[by_patch.flatten()] = by_patch[patch_order][:, pixel_order].flatten()
        self.mode, self.image_size, self.patch_size, self.seed = mode, image_size, patch_size, seed
        self.index = index  # output pixel i = input pixel index[i] (flat, row-major)
        self._index_on: dict[torch.device, torch.Tensor] = {}

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """One image (C, H, W) or a batch (B, C, H, W), on any device."""
        if image.device not in self._index_on:  # the tensor path permutes whole batches on the training device
            self._index_on[image.device] = self.index.to(image.device)
        return image.flatten(-2)[..., self._index_on[image.device]].view_as(image)

    def __getstate__(self) -> dict:  # worker processes: CPU tensors only
        return {**self.__dict__, "_index_on": {}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode}, image_size={self.image_size}, seed={self.seed})"


def build_mixup(
    num_classes: int, mixup: float, cutmix: float, prob: float, switch_prob: float, mode: MixupMode
) -> Any | None:
    """timm's `Mixup` for these settings (batches of even size), or None when both alphas are 0 (off)."""
    if mixup == 0 and cutmix == 0:
        return None
    from timm.data import Mixup  # lazily: importing timm imports all its models

    kinds = dict(mixup_alpha=mixup, cutmix_alpha=cutmix, prob=prob, switch_prob=switch_prob, mode=mode)
    return Mixup(**kinds, label_smoothing=0.0, num_classes=num_classes)
