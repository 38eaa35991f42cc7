"""The tensor data path (`mixer_lightning.data.tensor_path`, ``data.pipeline``): the same images as the
PIL path bit for bit, the same training, the cache on disk, the choice of path, resuming a killed run,
DDP shards, and real CIFAR-10."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from test_reliability import MIXER, RP_MIXER, assert_same, augmented_hf_config, epoch_scalars, final_state

from helpers import CONFIGS, error_field, read_json
from helpers.fakedata import WRITERS, patch_torchvision_checks, write_hf
from helpers.killer import kill_and_resume
from helpers.recorder import record_one_and_two_processes
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule
from mixer_lightning.data.pil_path import TransformedDataset
from mixer_lightning.data.sampling import mix
from mixer_lightning.data.tensor_path import DecodedImages, is_key_batch
from mixer_lightning.errors import ConfigError

TESTS = Path(__file__).resolve().parent
DATA_ROOT = Path(os.environ.get("MIXER_DATA_ROOT") or Path(__file__).resolve().parents[1].parent / "shared" / "data")

# dataset, data-module arguments: every batched step (pad-and-crop, flip, resize, evaluation crops) alone and together.
SETTINGS = {
    "hf_crop_flip_permuted": ("hf", dict(input_permutation="global", permutation_patch_size=4)),
    "cifar10_flip_only_p03": ("cifar10", dict(crop_padding=0, hflip=0.3)),
    "stl10_resized_to_32": ("stl10", dict(image_size=32, crop_padding=2)),
    "mnist_grey_resize": ("mnist", dict(input_permutation="patch_pixel", permutation_patch_size=7)),
    "hf_resize_always_flip": ("hf", dict(train_crop="resize", image_size=24, hflip=1.0)),
    "folder_crop_and_resmall_crop": ("folder", dict(train_crop="random_crop", image_size=32, eval_crop="resmall_crop")),
    "cifar100_resize_crop_eval": ("cifar100", dict(eval_crop="resize_crop", eval_crop_pct=0.75, crop_padding=6)),
}


def both_paths(name: str, tmp_path: Path, **kwargs) -> tuple[ImageDataModule, ImageDataModule]:
    dataset, options = SETTINGS[name]
    root = WRITERS[dataset](tmp_path / dataset)
    common = dict(root=str(root), download=False, batch_size=4, val_split=3, num_workers=0, **options, **kwargs)
    pil, tensor = (ImageDataModule(dataset, pipeline=p, **common) for p in ("pil", "tensor"))
    pil.setup()
    tensor.setup()
    assert isinstance(pil.train_set, TransformedDataset) and isinstance(tensor.train_set, DecodedImages)
    assert (pil.pipeline, tensor.pipeline) == ("pil", "tensor")
    return pil, tensor


@pytest.mark.parametrize("name", SETTINGS)
def test_the_tensor_path_gives_the_pil_paths_images_bit_for_bit(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every training image under many (seed, epoch) keys, and every evaluation image, equal the PIL
    path's (timm/torchvision transforms under `sampling.seeded`) exactly: same crops, flips, resizes,
    float32 normalisation and permutation."""
    patch_torchvision_checks(monkeypatch)
    pil, tensor = both_paths(name, tmp_path)
    for epoch in range(6):
        keys = [(mix(11, epoch, i), i) for i in range(len(pil.train_set))]
        for key in keys[:: 1 if epoch < 2 else 7]:  # one by one (as `mixer cka` reads), then as whole batches
            (x, y), (x_t, y_t) = pil.train_set[key], tensor.train_set[key]
            assert x.dtype == x_t.dtype == torch.float32 and y == y_t
            assert torch.equal(x, x_t), f"training image {key[1]} of epoch {epoch} differs"
        # A whole batch, as the loaders make it (one gather, one crop, one normalisation).
        batch = tensor.train_set.__getitems__(keys)
        assert all(
            torch.equal(a[0], b[0]) and a[1] == b[1]
            for a, b in zip(pil.train_set.__getitems__(keys), batch, strict=True)
        )
    for split in ("val_set", "test_set"):
        a, b = getattr(pil, split), getattr(tensor, split)
        assert len(a) == len(b) and all(torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in range(len(a)))


def test_flips_and_crops_follow_their_probabilities(tmp_path: Path) -> None:
    """Over many sample seeds the draws are the PIL path's distribution: offsets uniform on 0..2p, flips
    at rate p (the tensor path draws with the PIL path's calls, so this guards the calls themselves)."""
    root = write_hf(tmp_path / "hf", train=8, test=4)
    data = ImageDataModule("hf", root=str(root), batch_size=4, num_workers=0, hflip=0.25, val_split=0)
    data.setup("fit")
    draws = data.train_set.keys([(mix(5, 0, i), i % 8) for i in range(4000)])
    assert set(draws["top"].tolist()) == set(range(9)) == set(draws["left"].tolist())
    counts = np.bincount(draws["top"].numpy(), minlength=9)
    assert counts.min() > 4000 / 9 * 0.8 and counts.max() < 4000 / 9 * 1.2
    assert 0.22 < float(draws["flip"].float().mean()) < 0.28


def test_fit_through_either_path_trains_bit_identical_weights(tmp_path: Path) -> None:
    """Through ``mixer fit``: an RP Mixer with dropout, stochastic depth, mixup/cutmix, pad-and-crop,
    flip and an input permutation, 3 epochs with a warm-up + cosine schedule: the weights, optimiser
    state and schedule after the tensor path equal the PIL path's."""
    config = augmented_hf_config(
        tmp_path, auto_augment=None, random_erasing=0.0, input_permutation="patch_pixel", permutation_patch_size=4
    )
    states = []
    for pipeline in ("pil", "tensor"):
        main(
            [
                "fit",
                "--config",
                str(config),
                "--data.pipeline",
                pipeline,
                "--trainer.max_epochs",
                "2",
                "--trainer.logger.init_args.name",
                pipeline,
            ]
        )
        states.append(final_state(tmp_path / "runs" / pipeline / "version_0"))
    assert_same(states[0], states[1])
    assert "pipeline: tensor" in (tmp_path / "runs" / "tensor" / "version_0" / "config.yaml").read_text()


def test_auto_chooses_the_tensor_path_where_the_augmentation_has_a_batched_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(write_hf(tmp_path / "hf", train=12, test=4))

    def chosen(**kwargs) -> str:
        data = ImageDataModule("hf", root=root, num_workers=0, **kwargs)
        data.setup()
        return data.pipeline

    assert chosen() == "tensor" and chosen(train_crop="resize") == "tensor"
    for field, value in (
        ("auto_augment", "rand-m9-mstd0.5-inc1"),
        ("random_erasing", 0.25),
        ("color_jitter", 0.4),
        ("train_crop", "random_resized_crop"),
    ):
        assert chosen(**{field: value}) == "pil"
        with pytest.raises(ConfigError, match=f"data.{field}") as error:  # (the message names the step's field)
            ImageDataModule("hf", root=root, pipeline="tensor", **{field: value})
        assert error.value.field == "data.pipeline"
    assert chosen(tensor_limit_gb=1e-6) == "pil"  # too big for the limit: the PIL path
    with pytest.raises(ConfigError) as error:
        ImageDataModule("hf", root=root, pipeline="tensor", tensor_limit_gb=1e-6).setup()
    assert error.value.field == "data.tensor_limit_gb"
    with pytest.raises(ConfigError) as error:
        ImageDataModule("digits", pipeline="tensor")
    assert error.value.field == "data.pipeline"
    assert ImageDataModule("digits").pipeline == "pil"
    # Through the command line: one line naming the field, exit status 2.
    config = augmented_hf_config(tmp_path)
    capsys.readouterr()
    assert error_field(capsys, ["fit", "--config", str(config), "--data.pipeline", "tensor"]) == "data.pipeline"


def test_images_of_several_sizes_keep_the_pil_path(tmp_path: Path) -> None:
    """No single tensor holds them: auto reads them with PIL, a forced tensor path says which image."""
    import datasets

    (tmp_path / "mixed" / "data").mkdir(parents=True)
    images = [Image.new("RGB", (16, 16) if i != 3 else (20, 20), (i * 20, 0, 0)) for i in range(6)]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=2)})
    table = datasets.Dataset.from_dict({"img": images, "label": [0, 1] * 3}, features=features)
    for split in ("train", "test"):
        table.to_parquet(str(tmp_path / "mixed" / "data" / f"{split}-00000-of-00001.parquet"))
    data = ImageDataModule("hf", root=str(tmp_path / "mixed"), batch_size=2, val_split=0, num_workers=0)
    data.setup("fit")
    assert data.pipeline == "pil"
    forced = ImageDataModule("hf", root=str(tmp_path / "mixed"), batch_size=2, val_split=0, pipeline="tensor")
    with pytest.raises(ConfigError) as error:
        forced.setup("fit")
    assert error.value.field == "data.pipeline"
    resized = ImageDataModule("hf", root=str(tmp_path / "mixed"), image_size=12, val_split=0, pipeline="tensor")
    resized.setup("fit")  # data.image_size resizes them all (a deterministic prefix, done at decoding)
    assert resized.train_set.decoded.images.shape == (6, 3, 12, 12)


def test_decoded_splits_are_cached_beside_the_data_and_decoded_again_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mixer_lightning.data.cache as in_memory

    root = write_hf(tmp_path / "hf", train=12, test=4)
    decoded: list[int] = []
    original = in_memory.decode
    monkeypatch.setattr(in_memory, "decode", lambda base, prefix: decoded.append(len(base)) or original(base, prefix))

    def setup(**kwargs) -> ImageDataModule:
        data = ImageDataModule("hf", root=str(root), val_split=0, num_workers=0, **kwargs)
        data.setup()
        return data

    first = setup()
    assert decoded == [12, 4] and len(list((root / ".mixer_cache").glob("hf-*.pt"))) == 2
    again = setup()
    assert decoded == [12, 4]  # read back from the cache
    assert torch.equal(first.train_set.decoded.images, again.train_set.decoded.images)
    setup(image_size=16)  # another resize: another cache entry
    assert decoded == [12, 4, 12, 4]
    parquet = root / "data" / "train-00000-of-00001.parquet"
    os.utime(parquet, ns=(parquet.stat().st_atime_ns, parquet.stat().st_mtime_ns + 10**9))  # the source changed
    setup()
    assert decoded == [12, 4, 12, 4, 12, 4]  # (every file of a Hugging Face folder keys both of its splits)
    # A cache directory of one's own (argument, or $MIXER_CACHE_DIR).
    setup(cache_dir=str(tmp_path / "mine"))
    root.chmod(0o555)  # a read-only data folder (even for root): the user's cache
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    setup()
    root.chmod(0o755)
    assert len(list((tmp_path / "home" / ".cache" / "mixer_lightning").glob("hf-*.pt"))) == 2
    monkeypatch.setenv("MIXER_CACHE_DIR", str(tmp_path / "env"))
    setup()
    assert len(list((tmp_path / "mine").glob("*.pt"))) == 2 and len(list((tmp_path / "env").glob("*.pt"))) == 2
    # A version of the decoder that differs from the file's: decoded again.
    monkeypatch.setattr(in_memory, "LOADER_VERSION", in_memory.LOADER_VERSION + 1)
    count = len(decoded)
    setup()
    assert len(decoded) == count + 2
    # A cache file that cannot be read (truncated copy): decoded again and replaced.
    monkeypatch.delenv("MIXER_CACHE_DIR")
    setup()
    for path in (root / ".mixer_cache").glob("hf-train-*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    count = len(decoded)
    setup()
    assert len(decoded) == count + 1


def test_key_batches_become_images_in_the_hook_as_the_cpu_loader_makes_them(tmp_path: Path) -> None:
    """Under a trainer the loaders give key batches (indices, crop offsets, flips); the data module's
    ``on_after_batch_transfer`` makes the images on the batch's device, equal to the images that the
    loader makes on the CPU when read directly."""
    root = write_hf(tmp_path / "hf", train=20, test=8)
    data = ImageDataModule("hf", root=str(root), batch_size=4, val_split=4, num_workers=0, mixup=0.5)
    data.setup()
    direct_train, direct_val = next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))
    fit_loop = SimpleNamespace(
        restarting=False, epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(total=SimpleNamespace(ready=0)))
    )
    data.trainer = SimpleNamespace(training=False, fit_loop=fit_loop)
    keys_train, keys_val = next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))
    assert is_key_batch(keys_train) and set(keys_train) == {"split", "index", "top", "left", "flip"}
    assert keys_val["index"].tolist() == data.val_set.indices  # evaluation: 4 × batch_size per batch, in order
    for keys, direct in ((keys_train, direct_train), (keys_val, direct_val)):
        x, y = data.on_after_batch_transfer(keys, 0)
        assert torch.equal(x, direct[0][: len(x)]) and torch.equal(y, direct[1][: len(y)])
    data.trainer.training = True  # training batches are then mixed, as on the PIL path
    x, soft = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)
    assert soft.shape == (4, 10) and not torch.equal(x, direct_train[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batches_made_on_the_gpu_equal_the_cpus(tmp_path: Path) -> None:
    root = write_hf(tmp_path / "hf", train=20, test=8)
    data = ImageDataModule(
        "hf",
        root=str(root),
        batch_size=8,
        val_split=0,
        num_workers=0,
        input_permutation="global",
        permutation_patch_size=4,
    )
    data.setup()
    keys = data.train_set.keys([(mix(1, 0, i), i) for i in range(20)])
    x, y = data.train_set.materialize(keys)
    on_gpu = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in keys.items()}
    x_gpu, y_gpu = data.train_set.materialize(on_gpu)
    assert x_gpu.is_cuda and torch.equal(x_gpu.cpu(), x) and torch.equal(y_gpu.cpu(), y)


def test_real_cifar10_decodes_to_the_pil_paths_images(tmp_path: Path) -> None:
    root = DATA_ROOT / "cifar10"
    if not (root / "data").is_dir():
        pytest.skip(f"no real CIFAR-10 under {root} (set MIXER_DATA_ROOT)")
    common = dict(root=str(root), val_split=0, num_workers=0, cache_dir=str(tmp_path / "cache"))
    pil, tensor = ImageDataModule("hf", pipeline="pil", **common), ImageDataModule("hf", **common)
    pil.setup("test")
    tensor.setup("test")
    assert tensor.pipeline == "tensor" and tensor.test_set.decoded.images.shape == (10000, 3, 32, 32)
    sample = np.random.default_rng(0).choice(10000, 200, replace=False).tolist()
    assert all(torch.equal(pil.test_set[i][0], tensor.test_set[i][0]) for i in sample)
    assert [pil.test_set[i][1] for i in sample] == [tensor.test_set[i][1] for i in sample]
    assert tensor.test_set.targets.tolist() == pil.test_set.base.dataset["label"]  # labels without images


# --- the reliability guarantees on the tensor path ------------------------------------------------------


@pytest.mark.slow
def test_a_killed_run_on_the_tensor_path_resumes_bit_for_bit(tmp_path: Path) -> None:
    """tests/test_reliability.py's kill-and-resume test on the tensor path (crop, flip, mixup/cutmix,
    dropout, stochastic depth, RP): SIGKILL at step 7, resume from the step-6 checkpoint mid-epoch."""
    config = augmented_hf_config(tmp_path, RP_MIXER, auto_augment=None, random_erasing=0.0, pipeline="tensor")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "MIXER_TRUSTED_MODULES": "helpers",
    }
    run = ["--config", str(config)]
    subprocess.run([MIXER, "fit", *run], check=True, env=env, capture_output=True)
    killer = tmp_path / "kill.yaml"
    killer.write_text(
        yaml.safe_dump(
            {"trainer": {"callbacks": [{"class_path": "helpers.killer.KillAtStep", "init_args": {"step": 7}}]}}
        )
    )
    interrupted = tmp_path / "runs" / "killed" / "version_0"
    resumed = kill_and_resume(MIXER, run, str(killer), env, (interrupted / "checkpoints" / "last.ckpt", 6))
    assert "data.pipeline: tensor" in resumed.stderr + resumed.stdout
    straight = tmp_path / "runs" / "straight" / "version_0"
    assert_same(final_state(straight), final_state(interrupted))
    assert epoch_scalars(straight) == epoch_scalars(interrupted)


@pytest.mark.slow  # ~1 min: a 2-process DDP run and a 1-process run
def test_ddp_ranks_get_disjoint_shards_of_the_same_augmented_images(tmp_path: Path) -> None:
    """2 CPU processes: each rank trains on its own shard, and together they see, every epoch, exactly
    the augmented images one process sees (augmentation keyed by (seed, epoch, index), not by rank)."""
    config = augmented_hf_config(
        tmp_path, RP_MIXER, auto_augment=None, random_erasing=0.0, mixup=0.0, cutmix=0.0, val_split=0, pipeline="tensor"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "MIXER_TRUSTED_MODULES": "helpers",
    }
    common = [
        MIXER,
        "fit",
        "--config",
        str(config),
        "--trainer.max_epochs",
        "2",
        "--trainer.deterministic",
        "false",
        "--trainer.callbacks+=helpers.recorder.ImageRecorder",
    ]
    one, ranks = record_one_and_two_processes(common, tmp_path, env)
    assert len(one) == 2 * 48 and all(len(r) == 48 for r in ranks)  # 48 images, 2 epochs
    for epoch in ("0", "1"):
        seen = [{line for line in r if line.startswith(epoch + ":")} for r in ranks]
        assert not seen[0] & seen[1]  # disjoint shards
        assert seen[0] | seen[1] == {line for line in one if line.startswith(epoch + ":")}
    assert read_json(tmp_path / "runs" / "two" / "version_0" / "fit_summary.json")["steps"] == 2 * 3


def test_the_papers_small_image_configs_take_the_tensor_path() -> None:
    """Figs. 5–7 and D.5/D.6 (pad-and-crop + flip, STL-10 resized to 32 or 90) train through the tensor
    path as they are; the AutoAugment configs (Figs. 2 and 4, ss8/ss_w) keep timm's PIL path."""
    checked = 0
    for path in sorted(CONFIGS.glob("*.yaml")):
        data = ((yaml.safe_load(path.read_text()) or {}).get("data") or {}).get("init_args") or {}
        if data.get("dataset") not in ("cifar10", "cifar100", "stl10"):
            continue
        module = ImageDataModule(**data)  # nothing is read before setup()
        assert (module.plans is not None) == (not data.get("auto_augment")), path.name
        checked += 1
    assert checked >= 30


def test_non_square_images_crop_as_the_pil_path(tmp_path: Path) -> None:
    """24×16 images cropped to 24×24 after padding 4 (no resize: image_size is their long side): the
    vertical offset has one value yet is still drawn, as torchvision draws it."""
    import datasets

    (tmp_path / "wide" / "data").mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)) for _ in range(12)]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=3)})
    table = datasets.Dataset.from_dict({"img": images, "label": [i % 3 for i in range(12)]}, features=features)
    for split in ("train", "test"):
        table.to_parquet(str(tmp_path / "wide" / "data" / f"{split}-00000-of-00001.parquet"))
    common = dict(root=str(tmp_path / "wide"), image_size=24, val_split=0, num_workers=0, train_crop="random_crop")
    pil, tensor = ImageDataModule("hf", pipeline="pil", **common), ImageDataModule("hf", pipeline="tensor", **common)
    pil.setup("fit")
    tensor.setup("fit")
    for epoch in range(20):
        keys = [(mix(3, epoch, i), i) for i in range(12)]
        x = torch.stack([pil.train_set[key][0] for key in keys])
        assert x.shape == (12, 3, 24, 24) and torch.equal(
            x, torch.stack([b[0] for b in tensor.train_set.__getitems__(keys)])
        )


@pytest.mark.parametrize("precision", ["64-true", "bf16-true"])
def test_the_tensor_path_feeds_the_precision_of_the_trainer(precision: str, tmp_path: Path) -> None:
    """The trainer converts a batch's inputs before moving it (float64, bf16); the tensor path makes
    its images after the move and converts them alike: float64 training equals the PIL path's."""
    config = augmented_hf_config(tmp_path, auto_augment=None, random_erasing=0.0)
    states = []
    for pipeline in ("pil", "tensor"):
        main(
            [
                "fit",
                "--config",
                str(config),
                "--data.pipeline",
                pipeline,
                "--trainer.precision",
                precision,
                "--trainer.max_epochs",
                "1",
                "--trainer.limit_train_batches",
                "2",
                "--trainer.logger.init_args.name",
                pipeline,
            ]
        )
        states.append(final_state(tmp_path / "runs" / pipeline / "version_0"))
    dtype = torch.float64 if precision == "64-true" else torch.bfloat16
    assert all(v.dtype == dtype for v in states[1]["state"].values() if v.is_floating_point())
    assert_same(states[0], states[1])
