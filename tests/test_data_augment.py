"""Augmentation: every policy string of every config runs every op, Pillow 13's posterize trap, the
evaluation crops of the Mixer supplementary, and the input permutations of the Mixer paper (Sec. 3.4)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import PIL
import pytest
import torch
import yaml
from PIL import Image, ImageOps
from timm.data import auto_augment as timm_auto_augment
from torchvision.transforms import functional as TF

from helpers import CONFIGS
from helpers.fakedata import write_hf
from mixer_lightning.data import ImageDataModule
from mixer_lightning.data.transforms import (
    Augmentation,
    InputPermutation,
    ToNormalizedTensor,
    _augment_ops,
    eval_transform,
    posterize,
    train_transform,
)

# The papers' policies, and a few more of timm's families, on top of those found in the configs.
PAPER_POLICIES = {"original", "rand-m9-mstd0.5-inc1", "rand-m15-n2", "v0", "originalr", "augmix-m5-w4-d2"}


def config_policies() -> set[str]:
    found = set()
    for path in CONFIGS.rglob("*.yaml"):
        data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
        policy = (data.get("init_args") or data).get("auto_augment") if isinstance(data, dict) else None
        if policy:
            found.add(policy)
    return found


def images(n: int, size: int = 32, mode: str = "RGB") -> list[Image.Image]:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, size)[None, :, None]
    arrays = ((ramp + rng.integers(0, 128, (n, size, size, 3))) % 256).astype(np.uint8)
    return [Image.fromarray(a).convert(mode) for a in arrays]


def test_timm_posterize_at_zero_bits_is_the_trap_we_fix() -> None:
    """timm maps the increasing posterize of ``-inc1`` at level 10 (and ``v0``'s level 2) to 0 bits kept."""
    assert timm_auto_augment.LEVEL_TO_ARG["PosterizeIncreasing"](10, {}) == (0,)
    assert timm_auto_augment.LEVEL_TO_ARG["Posterize"](2, {}) == (0,)
    image = images(1)[0]
    if int(PIL.__version__.split(".")[0]) >= 13:
        with pytest.raises(ValueError, match="bits must be between"):
            timm_auto_augment.posterize(image, 0)
    # Ours: Pillow < 13's result for 0 bits (every value & 0: black), and Pillow's for 1..8 bits.
    assert np.asarray(posterize(image, 0)).max() == 0
    for bits in range(1, 9):
        assert np.array_equal(np.asarray(posterize(image, bits)), np.asarray(ImageOps.posterize(image, bits)))
    assert np.asarray(posterize(image.convert("L"), 0)).max() == 0


def policy_transform(policy: str, channels: int):
    augmentation = Augmentation(train_crop="random_crop", auto_augment=policy, random_erasing=0.25)
    return train_transform(32, 32, augmentation, mean=(0.5,) * channels, std=(0.25,) * channels)


@pytest.mark.parametrize("policy", sorted(config_policies() | PAPER_POLICIES))
def test_every_policy_runs_every_op_at_every_magnitude(policy: str) -> None:
    """Each op of the policy at each level 0..10 (the crash was at level 10), on colour and on grey
    images (MNIST with a policy), then the whole training pipeline over many images (ops drawn at
    random, as in training)."""
    for channels, mode in ((3, "RGB"), (1, "L")):
        transform = policy_transform(policy, channels)
        ops = _augment_ops(transform)
        assert ops, f"no augmentation op found in {policy}"
        assert all(op.aug_fn is not timm_auto_augment.posterize for op in ops)
        samples = images(3, mode=mode)
        for op in ops:
            op.prob, op.magnitude_std = 1.0, 0.0
            for level in range(11):
                op.magnitude = level
                for image in samples:
                    out = op(image)
                    assert out.size == image.size and out.mode == image.mode
    random.seed(0)
    np.random.seed(0)
    transform = policy_transform(policy, 3)
    for image in images(300):
        x = transform(image)
        assert x.shape == (3, 32, 32) and torch.isfinite(x).all()


def test_posterize_crash_is_gone_where_timm_alone_crashes(tmp_path: Path) -> None:
    """The paper's ImageNet policy, drawn at random with its increasing posterize forced to level 10:
    timm's op raises on Pillow 13, the data module's pipeline does not."""
    root = write_hf(tmp_path / "hf", train=8, test=4)
    data = ImageDataModule("hf", root=str(root), auto_augment="rand-m9-mstd0.5-inc1", num_workers=0)
    (op,) = [op for op in _augment_ops(data.transform(train=True)) if op.name == "PosterizeIncreasing"]
    op.prob, op.magnitude, op.magnitude_std = 1.0, 10, 0.0
    image = images(1)[0]
    assert np.asarray(op(image)).max() == 0
    if int(PIL.__version__.split(".")[0]) >= 13:
        op.aug_fn = timm_auto_augment.posterize
        with pytest.raises(ValueError):
            op(image)


def test_evaluation_crops_of_the_mixer_supplementary() -> None:
    """resize-crop: resize to s/pct × s/pct, centre crop s; resmall-crop: shorter side to s/pct, centre crop s."""
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (60, 100, 3), dtype=np.uint8))  # 100 × 60
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    s, pct = 28, 0.875  # scale side 32

    def expected(resized: Image.Image) -> torch.Tensor:
        return TF.to_tensor(TF.center_crop(resized, [s, s]))

    resize_crop = eval_transform(s, 100, "resize_crop", pct, "bilinear", mean, std)(image)
    torch.testing.assert_close(resize_crop, expected(image.resize((32, 32), Image.BILINEAR)), atol=2 / 255, rtol=0)
    resmall = eval_transform(s, 100, "resmall_crop", pct, "bilinear", mean, std)(image)
    torch.testing.assert_close(resmall, expected(image.resize((53, 32), Image.BILINEAR)), atol=2 / 255, rtol=0)
    plain = eval_transform(s, 100, "resize", pct, "bilinear", mean, std)(image)
    assert plain.shape == (3, s, s)
    assert not torch.allclose(resize_crop, resmall)


def test_training_crops() -> None:
    normalisation = dict(mean=(0.5,) * 3, std=(0.5,) * 3)
    stl = images(1, size=96)[0]
    for crop in ("random_crop", "random_resized_crop", "resize"):
        augmentation = Augmentation(train_crop=crop, interpolation="bicubic")
        assert train_transform(32, 96, augmentation, **normalisation)(stl).shape == (3, 32, 32)
    # random_crop at the native size is pad-4 + crop: the image shifted by at most 4 pixels.
    image = images(1)[0]
    torch.manual_seed(0)
    no_flip = Augmentation(train_crop="random_crop", hflip=0.0, interpolation="bicubic")
    x = train_transform(32, 32, no_flip, **normalisation)(image)
    reference = TF.normalize(TF.to_tensor(image), (0.5,) * 3, (0.5,) * 3)
    padded = torch.nn.functional.pad(reference, (4, 4, 4, 4), value=-1.0)  # zero pixels, normalised
    assert any(torch.allclose(x, padded[:, i : i + 32, j : j + 32], atol=1e-5) for i in range(9) for j in range(9))


# --- input permutations (Mixer paper Sec. 3.4) --------------------------------------------------------


def test_global_pixel_shuffle_is_one_fixed_permutation_of_pixels() -> None:
    shuffle = InputPermutation("global", image_size=8, patch_size=4, seed=0)
    x = torch.arange(3 * 64, dtype=torch.float32).view(3, 8, 8)
    y = shuffle(x)
    assert torch.equal(y.flatten(1).sort(dim=1).values, x.flatten(1))  # a permutation of each channel ...
    assert torch.equal(y[1] - y[0], torch.full((8, 8), 64.0))  # ... moving a pixel's channels together
    assert not torch.equal(y, x)
    assert torch.equal(InputPermutation("global", 8, 4, seed=0)(x), y)  # fixed by the seed
    assert not torch.equal(InputPermutation("global", 8, 4, seed=1)(x), y)
    batch = torch.randn(5, 3, 8, 8)
    assert torch.equal(shuffle(batch)[2], shuffle(batch[2]))  # the same for every image


def test_patch_and_pixel_shuffle_keeps_patches_together_with_one_shared_pixel_order() -> None:
    size, p = 12, 4
    shuffle = InputPermutation("patch_pixel", image_size=size, patch_size=p, seed=3)
    x = torch.arange(size * size, dtype=torch.float32).view(1, size, size)
    y = shuffle(x)[0]

    def patches(t: torch.Tensor) -> torch.Tensor:  # (patches, pixels) in raster order
        return t.view(size // p, p, size // p, p).permute(0, 2, 1, 3).reshape(-1, p * p)

    source, target = patches(x[0]), patches(y)
    origin = []  # which input patch each output patch came from, and the order of its pixels
    orders = set()
    for out in target:
        (k,) = [k for k in range(len(source)) if set(out.tolist()) == set(source[k].tolist())]
        origin.append(k)
        orders.add(tuple(int((source[k] == v).nonzero()) for v in out))
    assert sorted(origin) == list(range(len(source))) and origin != list(range(len(source)))  # patches shuffled
    assert len(orders) == 1 and list(next(iter(orders))) != list(range(p * p))  # one shared pixel order


def test_data_module_permutes_training_and_evaluation_inputs_alike() -> None:
    plain = ImageDataModule("digits", batch_size=8)
    shuffled = ImageDataModule("digits", batch_size=8, input_permutation="global", permutation_seed=2)
    patched = ImageDataModule("digits", batch_size=8, input_permutation="patch_pixel", permutation_patch_size=2)
    for data in (plain, shuffled, patched):
        data.setup()
    index = shuffled.permutation.index
    for split in ("val_set", "test_set", "train_set"):
        x, x_shuffled = getattr(plain, split)[0][0], getattr(shuffled, split)[0][0]
        assert torch.equal(x_shuffled.flatten(-2), x.flatten(-2)[..., index])
    assert not torch.equal(patched.test_set[0][0], plain.test_set[0][0])


def test_fused_normalisation_equals_torchvisions_to_tensor_and_normalize() -> None:
    for mode, mean, std in (("RGB", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), ("L", (0.1307,), (0.3081,))):
        for image in images(3, size=17, mode=mode):
            expected = TF.normalize(TF.to_tensor(image), mean, std)
            got = ToNormalizedTensor(mean, std)(image)
            assert got.dtype == torch.float32 and got.shape == expected.shape and got.is_contiguous()
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
