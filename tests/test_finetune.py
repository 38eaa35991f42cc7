"""Through the real command line: `mixer convert`, and fine-tuning with `model.init_from` /
`model.upscale` (Mixer supplementary C) followed by `mixer test --ckpt_path`."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from timm.models.mlp_mixer import MlpMixer

from helpers import CONFIGS, TEST_CONFIGS, error_field, field_of, read_json, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule
from mixer_lightning.models import MLPMixer
from mixer_lightning.models.upscale import upscale_tokens
from mixer_lightning.weights import to_jax_npz

DIGITS = str(TEST_CONFIGS / "digits_mixer.yaml")
FINETUNE = str(TEST_CONFIGS / "finetune_digits.yaml")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def digits_timm(num_classes: int = 10, seed: int = 0) -> MlpMixer:
    """A timm MlpMixer of tests/configs/digits_mixer.yaml's architecture (8 px, 1 channel, P = 2,
    C = 16, γ = 2, one block), every parameter random."""
    torch.manual_seed(seed)
    model = MlpMixer(
        num_classes=num_classes, img_size=8, in_chans=1, patch_size=2, num_blocks=1, embed_dim=16, mlp_ratio=(2.0, 2.0)
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 or name.startswith("head"):
                p.normal_()
    return model.eval()


def digits_test_loss(model: torch.nn.Module) -> float:
    data = ImageDataModule("digits")
    data.setup("test")
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in data.test_dataloader():
            total += F.cross_entropy(model(x), y, reduction="sum").item()
            count += len(y)
    return total / count


def net_state(checkpoint: Path) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, weights_only=True)["state_dict"]
    return {k.removeprefix("net."): v for k, v in state.items() if k.startswith("net.")}


def test_convert_timm_weights_then_mixer_test_reproduces_timm(capsys: pytest.CaptureFixture[str]) -> None:
    timm_model = digits_timm()
    torch.save(timm_model.state_dict(), "timm_digits.pth")
    main(["convert", "--from", "timm_digits.pth", "--out", "digits.ckpt"])  # architecture read from the shapes
    assert "Wrote digits.ckpt: mlp_mixer" in capsys.readouterr().out
    net = torch.load("digits.ckpt", weights_only=True)["hyper_parameters"]["net"]
    assert net["class_path"] == "mixer_lightning.models.MLPMixer" and net["init_args"]["act"] == "gelu"
    main(["test", "--config", DIGITS, "--ckpt_path", "digits.ckpt", *QUIET])
    metrics = read_json(run_dirs("digits_mixer")[-1] / "test_metrics.json")
    assert metrics["test/loss"] == pytest.approx(digits_test_loss(timm_model), abs=1e-5)
    assert abs(metrics["test/loss"] - np.log(10)) > 0.1  # not the zero head of a fresh model


def test_convert_jax_npz_round_trip_defaults_and_errors(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model = MLPMixer(
        num_classes=10, image_size=8, in_chans=1, patch_size=2, channels=16, gamma=2, num_blocks=1, act="gelu_tanh"
    )
    arrays = to_jax_npz(model, "digits.npz")
    main(["convert", "--from", "digits.npz", "--model", "mlp_mixer", "--out", "digits.ckpt"])
    out = capsys.readouterr().out
    assert "act gelu_tanh" in out and "official JAX" in out
    hparams = torch.load("digits.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["net"]["init_args"]["act"] == "gelu_tanh"
    # and back to the JAX layout from the converted checkpoint: the same arrays
    main(["convert", "--from", "digits.ckpt", "--out", "back.npz"])
    with np.load("back.npz") as back:
        assert sorted(back.files) == sorted(arrays)
        for key, array in arrays.items():
            np.testing.assert_array_equal(back[key], array)
    # nothing already written is lost
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "--from", "digits.npz", "--out", "digits.ckpt"])
    assert exit_info.value.code == 2
    assert field_of(capsys.readouterr().err) == "out"
    # a missing key is named as the file spells it
    np.savez("broken.npz", **{k: v for k, v in arrays.items() if k != "MixerBlock_0/channel_mixing/Dense_1/bias"})
    with pytest.raises(SystemExit):
        main(["convert", "--from", "broken.npz", "--model", "mlp_mixer", "--out", "broken.ckpt"])
    err = capsys.readouterr().err
    assert field_of(err) == "from" and "MixerBlock_0/channel_mixing/Dense_1/bias" in err
    assert not Path("broken.ckpt").exists()
    # model.init_from a JAX file: act defaults to flax's tanh GELU; same validation metrics as the model
    with caplog.at_level(logging.INFO):
        main(["validate", "--config", DIGITS, "--model.init_from", "digits.npz", *QUIET])
    assert "model.net: act='gelu_tanh' from digits.npz" in caplog.text
    metrics = read_json(run_dirs("digits_mixer")[-1] / "val_metrics.json")
    data = ImageDataModule("digits")
    data.setup("validate")
    with torch.no_grad():
        losses = [F.cross_entropy(model.eval()(x), y, reduction="sum") for x, y in data.val_dataloader()]
    assert metrics["val/loss"] == pytest.approx(sum(losses).item() / len(data.val_set), abs=1e-5)


def test_convert_with_a_preset_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(digits_timm().state_dict(), "timm_digits.pth")
    with pytest.raises(SystemExit):
        main(["convert", "--from", "timm_digits.pth", "--model", "mixer_ss8", "--out", "ss8.ckpt"])
    err = capsys.readouterr().err
    assert (
        err.startswith(
            "mixer: error: --from: stem.proj.weight in timm_digits.pth has shape (16, 1, 2, 2), the "
            "model needs (986, 1, 8, 8)"
        )
        and err.count("\n") == 1
    )
    with pytest.raises(SystemExit):
        main(["convert", "--from", "timm_digits.pth", "--model", "mixer_s32", "--out", "s32.ckpt"])
    assert field_of(capsys.readouterr().err) == "model.patch_size"


def test_finetune_at_twice_the_resolution(caplog: pytest.LogCaptureFixture) -> None:
    """timm weights (7 classes, 8 px) → `mixer convert` → fine-tuning on 10-class digits at 16 px with
    upscale 2: the run starts from exactly the supplementary's block-diagonal copy of the pre-trained
    network with a new zero head, and its checkpoint works without the 8-px file."""
    timm_model = digits_timm(num_classes=7)
    Path("pretrained").mkdir()
    torch.save(timm_model.state_dict(), "pretrained/timm7.pth")
    main(["convert", "--from", "pretrained/timm7.pth", "--out", "pretrained/base.ckpt"])
    with caplog.at_level(logging.INFO):
        # lr 0: the weights stay at their initialisation, which the checkpoint then shows.
        main(
            [
                "fit",
                "--config",
                FINETUNE,
                "--model.init_from",
                "pretrained/base.ckpt",
                "--model.optimizer.lr",
                "0",
                "--trainer.max_steps",
                "1",
            ]
        )
    log = caplog.text
    assert "patch_size=2, tokens=16, channels=16, token_hidden=32, channel_hidden=32, num_blocks=1" in log
    assert "the file's head has 7 classes, the model 10: head re-initialised to zero" in log
    assert "8 px → 16 px" in log
    run = run_dirs("finetune_digits")[-1]
    base = MLPMixer(num_classes=10, image_size=8, in_chans=1, patch_size=2, channels=16, gamma=2, num_blocks=1)
    base.load_state_dict(net_state(Path("pretrained/base.ckpt")) | dict(base.head.state_dict(prefix="head.")))
    torch.nn.init.zeros_(base.head.weight)
    expected = upscale_tokens(base, 2).state_dict()
    got = net_state(run / "checkpoints" / "last.ckpt")
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    assert got["blocks.0.token_mixing.mlp.fc1.weight"].shape == (4 * 32, 4 * 16)
    assert torch.equal(got["blocks.0.channel_mixing.mlp.fc1.weight"], timm_model.blocks[0].mlp_channels.fc1.weight)
    hparams = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["init_from"] is None and hparams["upscale"] == 2 and hparams["net"]["init_args"]["channels"] == 16

    shutil.rmtree("pretrained")  # the fine-tuned checkpoint is self-contained
    with pytest.warns(Warning, match="^model.upscale: "):  # the field it is about
        main(
            [
                "test",
                "--config",
                str(run / "config.yaml"),
                "--ckpt_path",
                str(run / "checkpoints" / "last.ckpt"),
                *QUIET,
            ]
        )
    assert "test/acc1" in read_json(run_dirs("finetune_digits")[-1] / "test_metrics.json")


@pytest.mark.parametrize(
    "args, field",
    [
        (["--model.init_from", "timm_digits.pth", "--model.net.channels", "24"], "model.init_from"),  # C 16 vs 24
        (["--model.upscale", "3", "--data.image_size", "16"], "model.upscale"),  # 3 does not divide 16
    ],
)
def test_fine_tuning_mistakes_are_one_line(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(digits_timm().state_dict(), "timm_digits.pth")
    assert error_field(capsys, ["fit", "--config", DIGITS, "--trainer.fast_dev_run", "true", *args]) == field


def test_imagenet_finetune_448_config(capsys: pytest.CaptureFixture[str]) -> None:
    """The paper's fine-tuning recipe, checked as parsed (it needs ImageNet and a 224 checkpoint to run)."""
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "imagenet_finetune_448.yaml"), "--print_config"])
    import yaml

    config = yaml.safe_load(capsys.readouterr().out)
    trainer, model, data = config["trainer"], config["model"], config["data"]["init_args"]
    assert trainer["gradient_clip_val"] == 1.0 and trainer["gradient_clip_algorithm"] == "norm"
    assert any(c["init_args"].get("batch_size") == 512 for c in trainer["callbacks"])
    assert model["optimizer"]["class_path"] == "torch.optim.SGD"
    assert model["optimizer"]["init_args"]["momentum"] == 0.9 and model["optimizer"]["init_args"]["weight_decay"] == 0
    assert (
        model["lr_scheduler"]["init_args"]["decay"] == "cosine" and model["lr_scheduler"]["init_args"]["warmup_steps"]
    )
    assert (
        model["upscale"] == 2
        and model["net"]["init_args"]["channels"] == 1024  # Mixer-L/16 (Tolstikhin Table 1)
        and "--model.init_from" in str((CONFIGS / "imagenet_finetune_448.yaml").read_text())
    )
    assert data["image_size"] == 448 and data["dataset"] == "imagenet" and data["mixup"] == 0
