"""One checkpoint reader for every command (`tasks.loading.read_checkpoint`), its content checked before use: a
checkpoint whose state dict, hyper-parameters or data facts are not of the form the commands read is one line
naming ``ckpt_path`` in average, test, predict, export and push (issue 47), not a traceback; an evaluation
outside a run with no logger leaves no config.yaml in the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import TEST_CONFIGS, error_field

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


def damaged(good: str, name: str, change) -> str:
    checkpoint = torch.load(good, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, name)
    return name


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.update(state_dict=list(c["state_dict"].values())),
        lambda c: c["data"].update(num_classes="ten"),
        lambda c: c["data"].update(mean=["a"]),
        lambda c: c.update(data="digits"),
        lambda c: c.update(hyper_parameters=["net"]),
    ],
    ids=["state-dict-list", "facts-num-classes", "facts-mean", "facts-text", "hparams-list"],
)
def test_a_damaged_checkpoint_is_one_line_in_every_command(trained, change, capsys: pytest.CaptureFixture) -> None:
    bad = damaged(trained("mixer"), "bad.ckpt", change)
    Path("images").mkdir()
    commands = [
        ["average", "--ckpt_path", bad, trained("mixer"), "--out", "avg.ckpt"],
        ["test", "--config", TINY, "--ckpt_path", bad],
        ["predict", "--ckpt_path", bad, "--data.predict_root", "images"],
        ["export", "--ckpt_path", bad, "--format", "torchscript", "--out", "net.pt"],
        ["push", "--ckpt_path", bad, "--out", "hub"],
        ["fit", "--config", TINY, "--model.init_from", bad],
    ]
    for command in commands:
        field = "model.init_from" if command[0] == "fit" else "ckpt_path"
        assert error_field(capsys, command) == field, command


def test_an_evaluation_outside_a_run_without_a_logger_writes_no_config_here(trained) -> None:
    import shutil

    from mixer_lightning.cli import main

    shutil.copyfile(trained("mixer"), "model.ckpt")  # in no run: the results go where the command runs
    for _ in range(2):  # a second one is not refused for the first one's file
        main(["test", "--config", TINY, "--ckpt_path", "model.ckpt", "--trainer.logger", "false"])
    assert not Path("config.yaml").exists() and Path("test_metrics.json").is_file()
