"""The shared training logic: metrics, parameter groups, schedule, predictions."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from lightning.pytorch import Trainer

from helpers import TEST_CONFIGS, error_field
from mixer_lightning.data import ImageDataModule
from mixer_lightning.models import MLPMixer
from mixer_lightning.optim import WarmupDecayLR, param_groups
from mixer_lightning.tasks import ClassifierModule


def tiny_module(**kwargs) -> ClassifierModule:
    net = functools.partial(MLPMixer, patch_size=2, channels=16, num_blocks=1)
    return ClassifierModule(net, num_classes=10, image_size=8, in_chans=1, **kwargs)


def test_metrics_are_logged_per_stage_with_namespaced_names() -> None:
    module = tiny_module()
    data = ImageDataModule("digits", batch_size=32)
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=2,
        limit_test_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, data)
    logged = set(trainer.callback_metrics)
    assert {"train/loss", "train/acc1", "val/loss", "val/acc1", "val/acc5"} <= logged
    (results,) = trainer.test(module, data, verbose=False)
    assert set(results) == {"test/loss", "test/acc1", "test/acc5"}
    probabilities = torch.cat(trainer.predict(module, data.predict_dataloader()))
    assert probabilities.shape[1] == 10
    torch.testing.assert_close(probabilities.sum(1), torch.ones(len(probabilities)))


def test_no_weight_decay_on_biases_and_norms() -> None:
    module = tiny_module()
    decay, no_decay = param_groups(module)
    names = {id(p): n for n, p in module.named_parameters()}
    assert no_decay["weight_decay"] == 0.0 and "weight_decay" not in decay
    assert all(p.ndim >= 2 for p in decay["params"])
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert "net.norm.weight" in no_decay_names and "net.head.bias" in no_decay_names
    assert "net.blocks.0.token_mixing.mlp.fc1.weight" not in no_decay_names
    optimizer = torch.optim.AdamW(param_groups(module), weight_decay=0.05)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]


def schedule(**kwargs) -> tuple[torch.optim.Optimizer, WarmupDecayLR]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return optimizer, WarmupDecayLR(optimizer, **kwargs)


def lrs(optimizer, scheduler, steps: int) -> list[float]:
    values = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        values.append(optimizer.param_groups[0]["lr"])
    return values


def test_warmup_then_cosine_in_epochs() -> None:
    optimizer, scheduler = schedule(warmup_epochs=2, warmup_start_lr=1e-6, min_lr=1e-5)
    scheduler.set_training_length(total_steps=100, steps_per_epoch=10)
    values = lrs(optimizer, scheduler, 100)
    assert values[0] == pytest.approx(1e-6)
    assert values[10] == pytest.approx(1e-6 + (1 - 1e-6) * 0.5)
    assert values[20] == pytest.approx(1.0)
    assert values[60] == pytest.approx(1e-5 + (1 - 1e-5) * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert values[100] == pytest.approx(1e-5)
    assert all(a >= b for a, b in zip(values[20:-1], values[21:], strict=True))


def test_linear_decay_and_constant() -> None:
    optimizer, scheduler = schedule(warmup_steps=4, decay="linear")
    scheduler.set_training_length(total_steps=14, steps_per_epoch=7)
    assert lrs(optimizer, scheduler, 14) == pytest.approx([0, 0.25, 0.5, 0.75] + [1 - i / 10 for i in range(11)])
    optimizer, scheduler = schedule(decay="constant")
    assert lrs(optimizer, scheduler, 3) == [1.0] * 4


def test_schedule_stepped_per_iteration_by_the_trainer() -> None:
    module = tiny_module(lr_scheduler=lambda opt: WarmupDecayLR(opt, warmup_steps=2, min_lr=0.0))
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=5,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, ImageDataModule("digits", batch_size=32))
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.total_steps == 10 and scheduler.last_epoch == 10
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--model.label_smoothing", "1.5"], "model.label_smoothing"),
        (["--model.layer_decay", "0"], "model.layer_decay"),
        (["--model.net.omega", "10"], "model.net.omega"),  # the network's own check, named as the flag
    ],
)
def test_bad_arguments_name_the_field(flags: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(TEST_CONFIGS / "digits_mixer.yaml")
    assert error_field(capsys, ["fit", "--config", config, "--trainer.fast_dev_run", "true", *flags]) == field


def test_a_built_network_or_a_class_in_plain_python() -> None:
    """The network as an nn.Module, or a class (the data facts given at build time)."""
    net = MLPMixer(num_classes=10, image_size=8, in_chans=1, patch_size=2, channels=16, num_blocks=1)
    module = ClassifierModule(net, num_classes=10, image_size=8, in_chans=1)
    assert module.net is net and "net" not in module.hparams and module.hparams["lr_scheduler"]["class_path"]
    module = ClassifierModule(MLPMixer, num_classes=10, image_size=32, in_chans=3)
    assert module.hparams["net"] == {"class_path": "mixer_lightning.models.MLPMixer", "init_args": {}}
    assert isinstance(module.net, MLPMixer) and module.net.num_classes == 10
