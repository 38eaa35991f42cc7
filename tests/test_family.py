"""A family in two steps: a network class and a config. A toy family defined in this file trains,
tests and reloads through the real `mixer` with no other file changed; checkpoints written before the
LightningModule took the network (one module class per family, flat arguments) still load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from helpers import TEST_CONFIGS, accuracy, read_json, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import SMixer
from mixer_lightning.models.registry import upgrade_hparams
from mixer_lightning.tasks.loading import load_classifier


class TinyMLP(nn.Module):
    """The toy family: flatten the image, one hidden ReLU layer, a linear head."""

    def __init__(self, num_classes: int, image_size: int, in_chans: int, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_chans * image_size * image_size, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


CONFIG = {
    "trainer": {
        "accelerator": "cpu",
        "max_epochs": 1,
        "limit_train_batches": 3,
        "limit_val_batches": 1,
        "enable_progress_bar": False,
        "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"name": "toy"}},
    },
    "model": {"net": {"class_path": f"{__name__}.TinyMLP", "init_args": {"hidden": 16}}},
    "data": {"class_path": "mixer_lightning.data.ImageDataModule", "init_args": {"dataset": "digits"}},
}


def test_a_family_defined_here_trains_tests_and_reloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", __name__)  # a config may import only trusted packages
    with open("toy.yaml", "w") as f:
        yaml.safe_dump(CONFIG, f)
    main(["fit", "--config", "toy.yaml"])
    (run,) = run_dirs("toy")
    last = run / "checkpoints" / "last.ckpt"
    hparams = torch.load(last, weights_only=True)["hyper_parameters"]  # plain data
    assert hparams["net"] == {"class_path": f"{__name__}.TinyMLP", "init_args": {"hidden": 16}}
    assert (hparams["num_classes"], hparams["image_size"], hparams["in_chans"]) == (10, 8, 1)
    main(["test", "--ckpt_path", str(last)])
    assert read_json(run / "test_metrics.json")["test/acc1"] == pytest.approx(accuracy(last, run / "config.yaml"))
    module = load_classifier(last)  # rebuilt from the checkpoint alone
    assert isinstance(module.net, TinyMLP) and module.net.head.in_features == 16
    monkeypatch.delenv("MIXER_TRUSTED_MODULES")  # not trusted: neither a config nor a checkpoint imports it
    with pytest.raises(ConfigError) as error:
        load_classifier(last)
    assert error.value.field == "ckpt_path"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "toy.yaml"])
    assert exit_info.value.code == 2


# What `mixer fit` wrote before the LightningModule took the network (tests/configs/digits_rp_s_mixer.yaml).
LEGACY = {
    "_class_path": "mixer_lightning.tasks.SMixerModule",
    "num_classes": 10,
    "image_size": 8,
    "in_chans": 1,
    "preset": None,
    "patch_size": 2,
    "tokens": 12,
    "channels": 8,
    "omega": None,
    "num_blocks": 2,
    "permute": True,
    "skip_layer": True,
    "drop_rate": None,
    "drop_path": None,
    "norm_eps": None,
    "act": None,
    "init": None,
    "scheduler_interval": "step",
    "label_smoothing": 0.0,
    "layer_decay": None,
    "init_from": None,
    "upscale": None,
    "compile": False,
    "_instantiator": "lightning.pytorch.cli.instantiate_module",
}


def test_upgrade_hparams_maps_every_legacy_family() -> None:
    net = {
        "class_path": "mixer_lightning.models.SMixer",
        "init_args": {
            "patch_size": 2,
            "tokens": 12,
            "channels": 8,
            "num_blocks": 2,
            "permute": True,
            "skip_layer": True,
        },
    }
    upgraded = upgrade_hparams(LEGACY)
    assert upgraded["net"] == net and "_class_path" not in upgraded and "preset" not in upgraded
    assert upgraded["num_classes"] == 10 and upgraded["_instantiator"] == LEGACY["_instantiator"]
    assert upgrade_hparams(upgraded) == upgraded  # the current form is left as it is
    ss8 = upgrade_hparams({"_class_path": "mixer_lightning.tasks.mixer.MLPMixerModule", "preset": "mixer_ss8"})
    assert ss8["net"]["class_path"] == "mixer_lightning.models.MLPMixer"  # the preset, written out
    assert ss8["net"]["init_args"] == dict(
        patch_size=8, tokens=16, channels=986, gamma=4.0, num_blocks=2, norm_eps=1e-5, init="normal"
    )
    kron = upgrade_hparams({"_class_path": "mixer_lightning.tasks.KronMLPModule", "factors": [8, 8], "bias": None})
    assert kron["net"] == {
        "class_path": "mixer_lightning.models.ShallowMLP",
        "init_args": {"structure": "kron", "factors": [8, 8]},
    }


def test_checkpoints_written_before_still_load(trained, capsys: pytest.CaptureFixture[str]) -> None:
    """The same weights under the legacy hyper-parameters: `load_classifier`, ``mixer test --ckpt_path``
    and ``model.init_from`` build the same RP S-Mixer (its permutations from the file) and give the same figures."""
    shutil.copy(trained("rp_s_mixer"), "new.ckpt")
    checkpoint = torch.load("new.ckpt", weights_only=True)
    torch.save({**checkpoint, "hyper_parameters": dict(LEGACY)}, "legacy.ckpt")
    old, new = load_classifier("legacy.ckpt"), load_classifier("new.ckpt")
    assert isinstance(old.net, SMixer) and old.net.tokens == 12 and all(old.net.permute)
    x = torch.randn(4, 1, 8, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    config = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
    figures = {}
    for name, args in {
        "test new": ["test", "--ckpt_path", "new.ckpt"],
        "test legacy": ["test", "--ckpt_path", "legacy.ckpt"],
        "init_from legacy": ["test", "--model.init_from", "legacy.ckpt", "--seed_everything", "7"],
    }.items():
        main([*args, "--config", config])
        figures[name] = read_json(run_dirs("digits_rp_s_mixer")[-1] / "test_metrics.json")["test/loss"]
    assert figures["test legacy"] == figures["test new"] == pytest.approx(figures["init_from legacy"], abs=1e-6)


def test_runs_and_sweeps_written_before_are_evaluated_and_resumed(trained, capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory an earlier release wrote (config.yaml with ``model.class_path: ...SMixerModule`` and flat
    arguments, step_checkpoint with ModelCheckpoint's arguments, legacy hyper-parameters) is tested by
    ``mixer test --ckpt_path`` as it is; a sweep's own legacy point config is rewritten in the current form."""
    from mixer_lightning.commands.sweep.runs import upgrade_config_file

    config = yaml.safe_load((TEST_CONFIGS / "digits_rp_s_mixer.yaml").read_text())
    flat = {
        k: v for k, v in LEGACY.items() if not k.startswith("_") and k not in ("num_classes", "image_size", "in_chans")
    }
    legacy = {
        **config,
        "model": {
            "class_path": LEGACY["_class_path"],
            "init_args": {**flat, "optimizer": config["model"]["optimizer"]},
        },
        "step_checkpoint": {"dirpath": None, "filename": None, "save_last": True, "every_n_train_steps": 500},
    }
    run = Path("runs/old/version_0")
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("# written by an earlier release\n" + yaml.safe_dump(legacy))
    checkpoint = torch.load(trained("rp_s_mixer"), weights_only=True)
    torch.save({**checkpoint, "hyper_parameters": dict(LEGACY)}, run / "checkpoints" / "last.ckpt")
    main(["test", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    assert 0 <= read_json(run / "test_metrics.json")["test/acc1"] <= 1
    assert (run / "config.yaml").read_text().startswith("# written by an earlier release")  # the run is left as it was

    point = Path("point.yaml")
    point.write_text(
        "# Sweep point A (seed 0)\n" + yaml.safe_dump({k: v for k, v in legacy.items() if k != "step_checkpoint"})
    )
    assert upgrade_config_file(point) and not upgrade_config_file(point)  # once
    assert point.read_text().startswith("# Sweep point A (seed 0)\n")
    main(["fit", "--config", str(point), "--trainer.max_epochs", "1"])
    assert read_json(run_dirs("digits_rp_s_mixer")[-1] / "fit_summary.json")["epochs"] == 1
