"""A family in two steps: a network class and a config. A toy family defined in this file trains,
tests and reloads through the real `mixer` with no other file changed; a checkpoint or run of another layout
(one module class per family, flat arguments) is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from helpers import TEST_CONFIGS, accuracy, error_field, read_json, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
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


# What a layout before ``model.net`` wrote (one module class per family, flat arguments).
LEGACY = {
    "_class_path": "mixer_lightning.tasks.SMixerModule",
    "num_classes": 10,
    "image_size": 8,
    "in_chans": 1,
    "patch_size": 2,
    "tokens": 12,
    "channels": 8,
    "num_blocks": 2,
    "permute": True,
    "_instantiator": "lightning.pytorch.cli.instantiate_module",
}


def test_a_checkpoint_or_run_of_another_layout_is_one_line(trained, capsys: pytest.CaptureFixture[str]) -> None:
    """`mixer test`, `model.init_from` and `load_classifier` name the checkpoint; a run whose config.yaml is of
    that layout is refused by the parse, naming the config."""
    checkpoint = torch.load(trained("rp_s_mixer"), weights_only=True)
    torch.save({**checkpoint, "hyper_parameters": dict(LEGACY)}, "legacy.ckpt")
    with pytest.raises(ConfigError) as error:
        load_classifier("legacy.ckpt")
    assert error.value.field == "ckpt_path"
    config = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
    assert error_field(capsys, ["test", "--config", config, "--ckpt_path", "legacy.ckpt"]) == "ckpt_path"
    assert error_field(capsys, ["test", "--config", config, "--model.init_from", "legacy.ckpt"]) == "model.init_from"
    assert error_field(capsys, ["test", "--ckpt_path", "legacy.ckpt"]) == "ckpt_path"  # no config: its network

    config = yaml.safe_load((TEST_CONFIGS / "digits_rp_s_mixer.yaml").read_text())
    legacy = {**config, "model": {"class_path": LEGACY["_class_path"], "init_args": {"channels": 8}}}
    run = Path("runs/old/version_0")
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(legacy))
    torch.save(checkpoint, run / "checkpoints" / "last.ckpt")
    assert error_field(capsys, ["test", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]).startswith("model")


def test_the_report_of_a_run_of_ones_own_family_needs_no_trust(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mixer sweep report` of a run reads its figures and parameter count without importing its network: no
    MIXER_TRUSTED_MODULES needed to read the metrics of a run of one's own family (training it still needs it)."""
    import json

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", __name__)
    with open("toy.yaml", "w") as f:
        yaml.safe_dump(CONFIG, f)
    main(["fit", "--config", "toy.yaml"])
    monkeypatch.delenv("MIXER_TRUSTED_MODULES")
    capsys.readouterr()
    main(["sweep", "report", str(run_dirs("toy")[0]), "--json", "--out", "compare"])
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["parameters"] == 8 * 8 * 16 + 16 + 16 * 10 + 10  # TinyMLP(hidden=16) on 8×8×1 digits
