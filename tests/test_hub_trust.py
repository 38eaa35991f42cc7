"""Results and files to trust around the hub (issue 47, items 8 and 11): `mixer push` writes and uploads
only its own files, from a new or empty folder; weights with NaN or inf are refused where they enter
(`mixer convert --from`, `model.init_from`); the import policy denies a loader by the object's real
location, whatever name reaches it. Nothing here reaches the network."""

from __future__ import annotations

import importlib
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from test_push import fake_hub
from test_security import PWNED, refused

from helpers import TEST_CONFIGS, error_field, one_line_error
from mixer_lightning.cli import main
from mixer_lightning.commands.push import FILES

DIGITS = str(TEST_CONFIGS / "digits_mixer.yaml")


def test_push_writes_and_uploads_only_its_files_from_a_new_or_empty_folder(trained, monkeypatch, capsys) -> None:
    import huggingface_hub.constants as hub

    ckpt = trained("mixer")
    capsys.readouterr()  # the fit that trained it, on first use
    Path("keys").mkdir()
    Path("keys", "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    run = Path(shutil.copytree(Path(ckpt).parent.parent, "run"))  # a run directory: checkpoints, config.yaml
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)  # nothing reaches the network, whatever push tries
    for folder in ("keys", str(run)):
        for overwrite in ([], ["--overwrite"]):
            argv = ["push", "--ckpt_path", ckpt, "--out", folder, "--repo_id", "lab/x", *overwrite]
            assert error_field(capsys, argv) == "out"
    assert sorted(os.listdir("keys")) == ["id_rsa"] and not any(run.glob("*.safetensors"))

    # Offline: the folder is written, and the command the one line gives uploads what push wrote, only that.
    line = one_line_error(capsys, ["push", "--ckpt_path", ckpt, "--out", "new", "--repo_id", "lab/x"], 1)
    (folder,) = re.findall(r"`hf upload lab/x (\S+)`", line)
    assert sorted(os.listdir(folder)) == sorted(FILES)

    # An earlier push's folder is replaced with --overwrite (and uploaded: its three files only).
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    calls = fake_hub(monkeypatch)
    main(["push", "--ckpt_path", ckpt, "--out", "new", "--repo_id", "lab/x", "--overwrite"])
    assert calls[-1] == ("upload_folder", "lab/x", sorted(FILES))


def with_a_nan(folder: Path) -> None:
    """One NaN in the first tensor of `folder`'s model.safetensors."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    first = sorted(tensors)[0]
    tensors[first].view(-1)[0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_a_hub_folder_with_non_finite_weights_is_one_line_where_it_enters(trained, capsys) -> None:
    ckpt = trained("mixer")
    main(["push", "--ckpt_path", ckpt, "--out", "repo"])
    with_a_nan(Path("repo"))
    capsys.readouterr()
    assert error_field(capsys, ["convert", "--from", "repo", "--out", "x.ckpt"]) == "from"
    assert not Path("x.ckpt").exists()
    argv = ["fit", "--config", DIGITS, "--model.init_from", "repo", "--trainer.fast_dev_run", "true"]
    assert error_field(capsys, argv) == "model.init_from"
    assert not Path("runs").exists()


@pytest.mark.parametrize("damage", ["a list", "not JSON", "hyper_parameters a list", "a header that lies"])
def test_a_hostile_hub_folder_is_one_line_where_it_enters(damage, trained, capsys) -> None:
    """config.json that is no JSON object, odd hyper_parameters, a safetensors header larger than its file: each was
    a traceback (AttributeError in our code) or the library's line without the flag; now one line naming it."""
    import json
    import struct

    main(["push", "--ckpt_path", trained("mixer"), "--out", "repo"])
    config, weights = Path("repo/config.json"), Path("repo/model.safetensors")
    if damage == "a list":
        config.write_text("[1, 2]")
    elif damage == "not JSON":
        config.write_text("nope{")
    elif damage == "hyper_parameters a list":
        settings = json.loads(config.read_text())
        settings["mixer_lightning"]["hyper_parameters"] = [1]
        config.write_text(json.dumps(settings))
    else:
        weights.write_bytes(struct.pack("<Q", 10**9) + weights.read_bytes()[8:])
    capsys.readouterr()
    assert error_field(capsys, ["convert", "--from", "repo", "--out", "x.ckpt"]) == "from"
    argv = ["fit", "--config", DIGITS, "--model.init_from", "repo", "--trainer.fast_dev_run", "true"]
    assert error_field(capsys, argv) == "model.init_from"


@pytest.mark.parametrize("name", ["timm.models._helpers.load_checkpoint", "timm.models._factory.load_checkpoint"])
def test_a_denied_loader_is_denied_under_every_name_that_reaches_it(name, monkeypatch, capsys) -> None:
    """A stand-in for timm's load_checkpoint, where timm defines it and where it is imported again: both
    names are refused before it could be called (it would write PWNED)."""

    def load_checkpoint(num_classes: int, image_size: int, in_chans: int) -> torch.nn.Module:
        Path(PWNED).write_text("called")
        return torch.nn.Linear(1, 1)

    load_checkpoint.__module__ = "timm.models._helpers"  # where timm defines the real one
    module, _, attribute = name.rpartition(".")
    monkeypatch.setattr(importlib.import_module(module), attribute, load_checkpoint)
    argv = ["fit", "--config", DIGITS, "--model.net", name, "--trainer.fast_dev_run", "true"]
    assert refused(capsys, argv) == "model.net"


def test_every_denied_object_is_denied_where_it_is_defined() -> None:
    """Each denied name that resolves to a function or class is also denied at its real location (what
    jsonargparse checks after resolving any other name for it)."""
    import pkgutil

    from mixer_lightning.safety.trust import DENIED_INSIDE_TRUSTED

    for entry in DENIED_INSIDE_TRUSTED:
        obj = pkgutil.resolve_name(entry)
        if not hasattr(obj, "__qualname__"):
            continue  # a module: every object defined in it lies under the entry
        real = f"{obj.__module__}.{obj.__qualname__}"
        assert any(real == d or real.startswith(d + ".") for d in DENIED_INSIDE_TRUSTED), (entry, real)


def test_the_model_card_names_a_partial_test_and_skips_a_damaged_record(trained, capsys) -> None:
    run = Path(shutil.copytree(Path(trained("mixer")).parent.parent, "runs/x/version_0"))
    ckpt = str(run / "checkpoints" / "last.ckpt")
    main(["test", "--ckpt_path", ckpt, "--trainer.limit_test_batches", "1"])
    Path("runs/x/version_1").mkdir()
    Path("runs/x/version_1/test_metrics.json").write_text('{"test/acc1": 0.9, "checkpoint": {"sha2')  # cut short
    capsys.readouterr()
    main(["push", "--ckpt_path", ckpt, "--out", "repo"])
    card = Path("repo/README.md").read_text()
    assert "Test metrics (version_0/test_metrics" in card and "partial: 32 of" in card and "version_1" not in card
