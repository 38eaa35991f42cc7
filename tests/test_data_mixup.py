"""Mixup/CutMix and soft targets, the global batch of the recipes, EMA of weights, and the data benchmark."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy

from helpers import TEST_CONFIGS, accuracy, error_field, read_json, run_dirs
from helpers.fakedata import patch_torchvision_checks, write_cifar10, write_hf
from mixer_lightning.benchmarks.data import throughput
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("cutmix", [False, True])
def test_our_loss_on_mixed_targets_is_timms_mixup_with_smoothing_and_soft_target_ce(
    smoothing: float, cutmix: bool
) -> None:
    """The data module mixes without smoothing and the model smooths in F.cross_entropy; timm's
    recipe smooths inside Mixup and uses SoftTargetCrossEntropy. Same loss, same images."""
    x = torch.randn(8, 3, 16, 16)
    y = torch.randint(0, 10, (8,))
    logits = torch.randn(8, 10)
    settings = dict(mixup_alpha=0.0 if cutmix else 0.8, cutmix_alpha=1.0 if cutmix else 0.0, num_classes=10)
    np.random.seed(0)
    ours_x, ours_y = Mixup(label_smoothing=0.0, **settings)(x.clone(), y)
    np.random.seed(0)
    timm_x, timm_y = Mixup(label_smoothing=smoothing, **settings)(x.clone(), y)
    torch.testing.assert_close(ours_x, timm_x)
    assert not torch.equal(ours_x, x)
    ours = F.cross_entropy(logits, ours_y, label_smoothing=smoothing)
    torch.testing.assert_close(ours, SoftTargetCrossEntropy()(logits, timm_y))


def test_mixup_applies_to_training_batches_only() -> None:
    data = ImageDataModule("digits", batch_size=8, mixup=0.8, cutmix=1.0)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    data.trainer = SimpleNamespace(training=False)
    same_x, same_y = data.on_after_batch_transfer((x.clone(), y), 0)
    assert torch.equal(same_x, x) and torch.equal(same_y, y)
    progress = SimpleNamespace(total=SimpleNamespace(ready=7))  # the batch number seeds the mixing
    fit_loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress))
    data.trainer = SimpleNamespace(training=True, fit_loop=fit_loop)
    mixed_x, soft = data.on_after_batch_transfer((x.clone(), y), 0)
    again_x, again_soft = data.on_after_batch_transfer((x.clone(), y), 0)
    assert torch.equal(mixed_x, again_x) and torch.equal(soft, again_soft)  # a function of (seed, batch)
    assert soft.shape == (8, 10) and torch.allclose(soft.sum(dim=1), torch.ones(8))
    assert ImageDataModule("digits", batch_size=8).mixup_fn is None


def test_mixup_cutmix_random_erasing_train_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """C.5's recipe (rand-m9-mstd0.5-inc1, erasing 0.25, mixup 0.8 / cutmix 1.0, smoothing 0.1) on a
    tiny CIFAR-10: soft targets reach the loss, train accuracy is measured, evaluation is unmixed."""
    patch_torchvision_checks(monkeypatch)
    root = write_cifar10(tmp_path / "data")
    main(
        [
            "fit",
            "--config",
            TINY,
            "--data.dataset",
            "cifar10",
            "--data.root",
            str(root),
            "--data.download",
            "false",
            "--data.num_workers",
            "0",
            "--data.batch_size",
            "16",
            "--data.auto_augment",
            "rand-m9-mstd0.5-inc1",
            "--data.random_erasing",
            "0.25",
            "--data.mixup",
            "0.8",
            "--data.cutmix",
            "1.0",
            "--model.net.patch_size",
            "4",
            "--model.label_smoothing",
            "0.1",
            "--trainer.max_epochs",
            "1",
        ]
    )
    run = run_dirs("digits_mixer")[-1]
    summary = read_json(run / "fit_summary.json")
    assert summary["steps"] == 4  # validated on clean images, not mixed ones:
    assert summary["val/acc1"] == pytest.approx(accuracy(run / "checkpoints" / "last.ckpt", run / "config.yaml", "val"))


def test_global_batch_sets_gradient_accumulation(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    args = ["fit", "--config", TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8"]
    callback = ["--trainer.callbacks+=mixer_lightning.data.batching.GlobalBatchSize"]
    main([*args, *callback, "--trainer.callbacks.batch_size", "128"])  # 32 per device × 1 device × 4 batches
    assert read_json(run_dirs("digits_mixer")[-1] / "fit_summary.json")["steps"] == 2
    assert "Global batch 128 = 32 per device × 1 devices × 4 accumulated batches" in caplog.text
    assert error_field(capsys, [*args, *callback, "--trainer.callbacks.batch_size", "100"]) == "data.batch_size"


def test_ema_of_weights_with_lightnings_callback() -> None:
    """Optional EMA of the weights (Lightning's EMAWeightAveraging): validation and the saved
    checkpoint use the averaged weights."""
    main(
        [
            "fit",
            "--config",
            TINY,
            "--trainer.max_epochs",
            "1",
            "--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging",
            "--trainer.callbacks.decay",
            "0.5",
        ]
    )
    run = run_dirs("digits_mixer")[-1]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert any("EMAWeightAveraging" in key for key in checkpoint["callbacks"])


def test_data_benchmark_reports_both_pipelines(tmp_path: Path) -> None:
    root = write_hf(tmp_path / "hf", train=64, test=8)
    result = throughput(str(root), workers=(0,), images=32, batch_size=16, repeats=1)
    figures = result["workers=0"]
    assert figures["baseline_img_per_s"] > 0 and figures["ours_img_per_s"] > 0
    assert figures["ours_over_baseline"] == pytest.approx(
        figures["ours_img_per_s"] / figures["baseline_img_per_s"], rel=1e-2
    )
