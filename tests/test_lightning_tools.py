"""Lightning's own tools with our modules (docs/usage.md, "Lightning's tools"): the learning-rate finder
(callback and `Tuner.lr_find`), EMA, early stopping, the batch-size finder, SWA, the profiler and gradient
clipping; layer-wise lr decay (``model.layer_decay``); evaluation losses synced across DDP processes; the
resolved widths on record; the modules and networks from plain Python."""

from __future__ import annotations

import os
import re
import shutil
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.tuner import Tuner

from helpers import TEST_CONFIGS, accuracy, error_field, read_json, run_dirs, run_with_stacks_on_timeout
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import MLPMixer, SMixer, create_model
from mixer_lightning.tasks import ClassifierModule

DIGITS = str(TEST_CONFIGS / "digits_mixer.yaml")
FINETUNE = str(TEST_CONFIGS / "finetune_digits.yaml")
RP_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
MIXER = str(Path(sys.executable).parent / "mixer")
FINDER = "--trainer.callbacks+=lightning.pytorch.callbacks.LearningRateFinder"


def last_checkpoint(name: str) -> dict:
    return torch.load(run_dirs(name)[-1] / "checkpoints" / "last.ckpt", weights_only=False)


# ------------------------------------------------------------------------------- learning-rate finder


def test_the_lr_finder_callback_sets_the_schedules_peak_and_keeps_the_layer_decay_scales() -> None:
    """The finder runs 30 steps, restores the initial state and sets `model.lr`: the schedule's peaks
    (``base_lrs``, from which `WarmupDecayLR` computes every step) become the suggestion, times each
    group's layer_decay scale, and the training that follows uses them."""
    main(
        [
            "fit",
            "--config",
            DIGITS,
            "--trainer.max_epochs",
            "8",
            "--trainer.limit_train_batches",
            "5",
            "--model.layer_decay",
            "0.5",
            FINDER,
            "--trainer.callbacks.num_training_steps",
            "30",
        ]
    )
    checkpoint = last_checkpoint("digits_mixer")
    groups = checkpoint["optimizer_states"][0]["param_groups"]
    (base_lrs,) = [scheduler["base_lrs"] for scheduler in checkpoint["lr_schedulers"]]
    found = max(base_lrs)
    assert found != pytest.approx(1e-3)  # the configured AdamW lr
    assert base_lrs == pytest.approx([found * group["lr_scale"] for group in groups])
    assert [group["initial_lr"] for group in groups] == pytest.approx(base_lrs)
    assert {group["lr_scale"] for group in groups} == {0.25, 0.5, 1.0}  # stem, block 0 + norm, head
    # The cosine schedule from those peaks: the last step's lr of each group is below its own peak.
    assert all(0 <= group["lr"] < peak for group, peak in zip(groups, base_lrs, strict=True))


def test_tuner_lr_find_from_python_sets_the_modules_lr() -> None:
    net = partial(MLPMixer, patch_size=2, channels=16, num_blocks=1)
    module = ClassifierModule(net, num_classes=10, image_size=8, in_chans=1)
    assert module.lr == pytest.approx(1e-3)  # AdamW's default: the optimiser callable's lr
    trainer = Trainer(accelerator="cpu", max_epochs=3, logger=False, enable_checkpointing=False)
    finder = Tuner(trainer).lr_find(module, datamodule=ImageDataModule("digits"), num_training=20)
    assert finder is not None and module.lr == pytest.approx(finder.suggestion())
    optimizer = module.configure_optimizers()["optimizer"]
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([finder.suggestion()] * 2)


# ------------------------------------------------------------------------- the documented tool flags

TOOLS = {
    "ema": ["--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging", "--trainer.callbacks.decay", "0.9"],
    "early_stopping": [
        "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
        "--trainer.callbacks.monitor",
        "val/acc1",
        "--trainer.callbacks.mode",
        "max",
    ],
    "batch_size_finder": [
        "--trainer.callbacks+=lightning.pytorch.callbacks.BatchSizeFinder",
        "--trainer.callbacks.max_trials",
        "2",
    ],
    "swa": [
        "--trainer.callbacks+=lightning.pytorch.callbacks.StochasticWeightAveraging",
        "--trainer.callbacks.swa_lrs",
        "0.01",
    ],
    "profiler": ["--trainer.profiler", "simple"],
    "gradient_clipping": ["--trainer.gradient_clip_val", "1.0"],
    "lr_finder": [FINDER, "--trainer.callbacks.num_training_steps", "8"],
}


@pytest.mark.slow  # ~15 s each on a busy 2-core machine
@pytest.mark.parametrize("tool", list(TOOLS))
def test_each_documented_lightning_tool_flag_trains(tool: str) -> None:
    """The flag lines of docs/usage.md's "Lightning's tools", on the tiny config (2 epochs × 4 batches:
    several of these tools skip themselves under fast_dev_run)."""
    main(["fit", "--config", DIGITS, *TOOLS[tool]])
    run = run_dirs("digits_mixer")[-1]
    last = run / "checkpoints" / "last.ckpt"
    if tool == "swa":  # the average replaces the weights after the last validation: last.ckpt holds it
        checkpoint = torch.load(last, weights_only=False)
        average = checkpoint["callbacks"]["StochasticWeightAveraging"]["average_model_state"]
        for key, value in checkpoint["state_dict"].items():
            assert torch.equal(value, average[key]), key
        return
    assert read_json(run / "fit_summary.json")["val/acc1"] == pytest.approx(accuracy(last, run / "config.yaml", "val"))


def test_the_usage_docs_give_the_tested_flag_lines() -> None:
    usage = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    # the section ends at the next heading ("\n#" alone would stop at the first comment of its bash block)
    section = re.split(r"\n#{2,3} ", usage.split("### Lightning's tools", 1)[1], maxsplit=1)[0]
    for flags in TOOLS.values():
        assert " ".join(flags) in section


# ------------------------------------------------------------------------------ layer-wise lr decay


def test_layer_decay_scales_each_layers_lr_in_fine_tuning(trained) -> None:
    """timm's param_groups_layer_decay through our group_matcher: L = 1 block, decay 0.5 → head 0.01,
    block 0 and the final norm 0.005, stem 0.0025 (the SGD lr of finetune_digits.yaml), each split into
    decay / no decay."""
    main(
        [
            "fit",
            "--config",
            FINETUNE,
            "--model.init_from",
            trained("mixer"),
            "--model.layer_decay",
            "0.5",
            "--trainer.max_steps",
            "1",
        ]
    )
    checkpoint = last_checkpoint("finetune_digits")
    groups = checkpoint["optimizer_states"][0]["param_groups"]
    assert sorted(group["initial_lr"] for group in groups) == pytest.approx([0.0025] * 2 + [0.005] * 2 + [0.01] * 2)
    state = checkpoint["state_dict"]
    names = [name.removeprefix("net.") for name in state if name.startswith("net.") and state[name].is_floating_point()]
    assert sum(len(group["params"]) for group in groups) == len(names)


def test_layer_decay_out_of_range_is_one_line(capsys) -> None:
    assert "model.layer_decay" in error_field(capsys, ["fit", "--config", DIGITS, "--model.layer_decay", "1.5"])
    assert not Path("runs").exists() or not any(Path("runs").rglob("*.ckpt"))


# ------------------------------------------------------------------------ validation loss under DDP


@pytest.mark.slow  # ~1 min: two processes each start Python, Lightning and a gloo group
def test_val_loss_under_ddp_is_the_mean_over_the_whole_validation_set(trained, tmp_path: Path) -> None:
    """144 validation images on 2 processes (72 each: batches 32, 32, 8): the logged val/loss is the
    mean over all 144, as on one device, not process 0's mean over its half."""
    run = tmp_path / "run"
    shutil.copytree(Path(trained("mixer")).parents[1], run)
    checkpoint = str(run / "checkpoints" / "last.ckpt")
    whole = ["validate", "--ckpt_path", checkpoint, "--trainer.limit_val_batches", "1.0"]
    main(whole)
    one = read_json(run / "val_metrics.json")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ddp = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    result = run_with_stacks_on_timeout([MIXER, *whole, *ddp], timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    two = read_json(run / "val_metrics.json")
    assert two["val/loss"] == pytest.approx(one["val/loss"], abs=1e-6)
    assert two["val/acc1"] == pytest.approx(one["val/acc1"], abs=1e-6)
    assert "sync_dist=True" not in result.stdout + result.stderr


@pytest.mark.slow  # ~1 min, as above
def test_under_ddp_each_test_image_is_evaluated_once(trained, tmp_path: Path) -> None:
    """359 test images on 2 processes: Lightning's padding sampler evaluated 360 (one twice, test/acc1
    k/360); each image once, test/acc1 is the one-device figure and a whole number of images over 359."""
    run = tmp_path / "run"
    shutil.copytree(Path(trained("mixer")).parents[1], run)
    whole = ["test", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]
    main(whole)
    one = read_json(run / "test_metrics.json")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ddp = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    result = run_with_stacks_on_timeout([MIXER, *whole, *ddp], timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    two = read_json(run / "test_metrics.json")
    assert two["of"] == 359 and two["images"] == 359 and not two["partial"]
    assert two["test/acc1"] * 359 == pytest.approx(round(two["test/acc1"] * 359), abs=1e-4)
    assert two["test/acc1"] == pytest.approx(one["test/acc1"], abs=1e-6)
    assert two["test/loss"] == pytest.approx(one["test/loss"], abs=1e-5)


# ------------------------------------------------------------------------------ resolved widths (Ω)


def test_a_mixer_given_by_omega_records_its_resolved_tokens(capsys) -> None:
    """``omega: 1000`` at C = 8 solves S = 12 (γ = 1, RP S-Mixer): the run header says S, m, Ω and p,
    and hparams.yaml and the checkpoints hold tokens: 12; ``mixer test`` of the run (config.yaml: omega) solves S again."""
    main(
        [
            "fit",
            "--config",
            RP_S_MIXER,
            "--model.net.tokens",
            "null",
            "--model.net.omega",
            "1000",
            "--trainer.max_epochs",
            "1",
        ]
    )
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model"))
    assert "S=12, C=8, m=96, Ω=960, p=0.1042" in header  # the widths solved from Ω
    (run,) = run_dirs("digits_rp_s_mixer")
    assert yaml.safe_load((run / "hparams.yaml").read_text())["net"]["init_args"]["tokens"] == 12
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=False)
    init_args = checkpoint["hyper_parameters"]["net"]["init_args"]
    assert init_args["tokens"] == 12 and init_args["omega"] == 1000
    main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    best = run / "checkpoints" / "best.ckpt"
    assert read_json(run / "test_metrics.json")["test/acc1"] == pytest.approx(accuracy(best, run / "config.yaml"))


# ------------------------------------------------------------------------------------ plain Python


def test_a_module_without_data_facts_takes_them_from_the_data_module() -> None:
    module = ClassifierModule(partial(MLPMixer, patch_size=2, channels=16, num_blocks=1))
    Trainer(accelerator="cpu", fast_dev_run=True, logger=False).fit(module, ImageDataModule("digits"))
    assert (module.num_classes, module.image_size, module.in_chans) == (10, 8, 1)
    assert {k: module.hparams[k] for k in ("num_classes", "image_size", "in_chans")} == {
        "num_classes": 10,
        "image_size": 8,
        "in_chans": 1,
    }
    assert module(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_a_module_without_data_facts_nor_data_module_says_what_is_missing() -> None:
    module = ClassifierModule(partial(SMixer, patch_size=2, channels=8, num_blocks=1))
    data = ImageDataModule("digits")
    data.setup("fit")
    trainer = Trainer(accelerator="cpu", fast_dev_run=True, logger=False)
    with pytest.raises(ConfigError) as error:
        trainer.fit(module, train_dataloaders=data.train_dataloader())
    assert error.value.field == "model"  # which facts are missing, and where they come from


def test_create_model_with_pretrained_points_at_the_weight_sources() -> None:
    with pytest.raises(ConfigError) as error:
        create_model("mixer_b16", pretrained=True)
    assert error.value.field == "pretrained"


@pytest.mark.parametrize(
    ("family", "arguments"),
    [
        ("mlp_mixer", {"patch_size": 2, "channels": 8, "num_blocks": 2}),
        ("s_mixer", {"patch_size": 2, "channels": 8, "num_blocks": 2}),
        ("sw_mlp", {"patch_size": 2, "channels": 4, "num_blocks": 1}),
        ("kron_mlp", {}),
        ("monarch_mlp", {}),
    ],
)
def test_reset_classifier_and_get_classifier_as_timm(family: str, arguments: dict) -> None:
    net = create_model(family, num_classes=10, image_size=8, in_chans=1, **arguments)
    x = torch.randn(2, 1, 8, 8)
    features = net.forward_head(net.forward_features(x), pre_logits=True)
    net.reset_classifier(3)
    assert net.get_classifier() is net.head and net.num_classes == 3
    assert torch.equal(net(x), torch.zeros(2, 3))  # a new head starts at zero, as fine-tuning's
    net.reset_classifier(0)
    torch.testing.assert_close(net(x), features)
    with pytest.raises(ConfigError):
        net.reset_classifier(3, global_pool="token")
