"""Nothing runs code named in a file: a checkpoint is data, a config names only trusted classes.

A plain-data checkpoint passes ``torch.load(weights_only=True)``; what it names (``_class_path``,
class paths in its hyper-parameters) must be looked up among this project's families, never imported
and called. Each entry point that reads a name from a file is driven through the real ``mixer``
command with a hostile file; the shell command it carries must not run, and the refusal is one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS
from mixer_lightning.cli import main

PWNED = "pwned.txt"


def hostile_checkpoint(path: Path, **hparams) -> str:
    """A plain-data checkpoint (it passes weights_only=True) whose module class is `os.system`."""
    hparams = hparams or {"_class_path": "os.system", "command": f"id > {PWNED}"}
    torch.save({"state_dict": {}, "hyper_parameters": hparams, "pytorch-lightning_version": "2.6.0"}, path)
    assert torch.load(path, weights_only=True)["hyper_parameters"] == hparams  # the unpickler lets it through
    return str(path)


def refused(capsys, args: list[str], *words: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = lines[-1]  # (earlier lines: Lightning's log records, when pytest has closed their stream)
    assert err.startswith("mixer: error:") and not any(line.startswith("Traceback") for line in lines), lines
    for word in words:
        assert word in err, err
    assert not Path(PWNED).exists(), "the checkpoint's command ran"
    return err


DATA = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.mark.parametrize(
    "command",
    [
        ["cka", "--ckpt", "{ckpt}", "--ckpt", "{ckpt}", "--config", DATA],
        ["visualize", "--ckpt", "{ckpt}", "--out", "pictures"],
        ["fewshot", "--ckpt", "{ckpt}", "--config", DATA],
        ["test", "--config", DATA, "--ckpt_path", "{ckpt}"],
        ["fit", "--config", DATA, "--ckpt_path", "{ckpt}", "--trainer.max_epochs", "1"],
        ["fit", "--config", DATA, "--model.init_args.init_from", "{ckpt}", "--trainer.fast_dev_run", "true"],
        ["convert", "--from", "{ckpt}", "--model", "mixer_s16", "--out", "converted.ckpt"],
    ],
    ids=["cka", "visualize", "fewshot", "test", "fit-resume", "init_from", "convert"],
)
def test_a_checkpoint_naming_os_system_is_refused_and_runs_nothing(command, tmp_path, capsys) -> None:
    ckpt = hostile_checkpoint(tmp_path / "hostile.ckpt")
    err = refused(capsys, [a.replace("{ckpt}", ckpt) for a in command], "os.system", "refused")
    assert "hostile.ckpt" in err
    assert not Path("converted.ckpt").exists() and not Path("pictures").exists()


def test_a_class_path_nested_in_hyper_parameters_is_refused(tmp_path, capsys) -> None:
    ckpt = hostile_checkpoint(
        tmp_path / "nested.ckpt",
        _class_path="mixer_lightning.tasks.mixer.MLPMixerModule",
        optimizer={"class_path": "subprocess.Popen", "init_args": {"args": ["id"]}},
    )
    refused(capsys, ["test", "--config", DATA, "--ckpt_path", ckpt], "subprocess.Popen", "trusted")


def test_a_config_naming_an_untrusted_class_is_refused_before_import(tmp_path, capsys, monkeypatch) -> None:
    config = yaml.safe_load(Path(DATA).read_text())
    config["trainer"] = {"callbacks": [{"class_path": "os.system", "init_args": {"command": f"id > {PWNED}"}}]}
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(yaml.safe_dump(config))
    refused(
        capsys,
        ["fit", "--config", str(hostile), "--trainer.fast_dev_run", "true"],
        "os.system",
        "MIXER_TRUSTED_MODULES",
    )
    # The same file read by the project's own commands (sweep manifests, analysis configs).
    refused(capsys, ["sweep", "--config", str(hostile), "--omega", "2**10", "--emit", "sweep"], "os.system")
    assert not Path("sweep").exists()
    # A package the user trusts explicitly is let through to jsonargparse (which then checks the type).
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "os")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(hostile), "--trainer.fast_dev_run", "true"])
    assert exit_info.value.code != 0 and not Path(PWNED).exists()  # os.system is not a Callback


def test_a_pickle_refused_by_torch_says_it_was_refused_for_safety(tmp_path, capsys) -> None:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"id > {PWNED}",))

    path = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": Payload()}}, path)
    refused(capsys, ["test", "--config", DATA, "--ckpt_path", str(path)], "refused for safety", "system")
    refused(capsys, ["cka", "--ckpt", str(path), "--ckpt", str(path), "--config", DATA], "refused for safety")


def test_a_text_file_given_as_a_checkpoint_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "notes.ckpt"
    path.write_text("hello world\n")
    refused(capsys, ["test", "--config", DATA, "--ckpt_path", str(path)], "not a PyTorch file")
    refused(capsys, ["fewshot", "--ckpt", str(path), "--config", DATA], "not a PyTorch file")
