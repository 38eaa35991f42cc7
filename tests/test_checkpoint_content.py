"""The one checkpoint reader checks what a checkpoint holds, not only the names in it: non-finite weights,
hyper-parameters of another family than the class it names, and zip records that torch.save never writes
(compressed: a small file that inflates to gigabytes before torch's error). Each is exit 2 naming the
checkpoint's field, before anything is written, for every command that reads a checkpoint."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from helpers import TEST_CONFIGS, field_of, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.fixture
def good() -> Path:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    return run / "checkpoints" / "last.ckpt"


def nonfinite(good: Path, value: float, name: str) -> Path:
    checkpoint = torch.load(good, weights_only=True)
    weight = next(k for k, v in checkpoint["state_dict"].items() if v.is_floating_point() and v.numel() > 1)
    checkpoint["state_dict"][weight].view(-1)[0] = value
    path = good.parent.parent.parent / name  # beside the run, not in it
    torch.save(checkpoint, path)
    return path


def misnamed(good: Path) -> Path:
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["hyper_parameters"]["net"]["class_path"] = "mixer_lightning.models.SWMLP"  # with MLPMixer's arguments
    path = good.parent.parent.parent / "misnamed.ckpt"
    torch.save(checkpoint, path)
    return path


def zip_bomb(good: Path) -> Path:
    """`good` with its largest record replaced by 64 MB of zeros, deflated (torch.save writes STORED)."""
    path = good.parent.parent.parent / "bomb.ckpt"
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(path, "w") as bomb:
        largest = max(source.infolist(), key=lambda e: e.file_size)
        for entry in source.infolist():
            if entry is largest:
                bomb.writestr(entry.filename, bytes(64 << 20), compress_type=zipfile.ZIP_DEFLATED)
            else:
                bomb.writestr(entry, source.read(entry), compress_type=zipfile.ZIP_STORED)
    assert path.stat().st_size < (1 << 20)
    return path


def photos() -> str:
    Path("photos").mkdir(exist_ok=True)
    Image.new("RGB", (8, 8), (120, 30, 200)).save("photos/a.png")
    return "photos"


COMMANDS = {
    "test": lambda ckpt: ["test", "--config", TINY, "--ckpt_path", ckpt],
    "predict": lambda ckpt: ["predict", "--ckpt_path", ckpt, "--data.predict_root", photos()],
    "export": lambda ckpt: ["export", "--ckpt_path", ckpt, "--format", "torchscript", "--out", "m.pt"],
    "visualize": lambda ckpt: ["visualize", "--ckpt", ckpt, "--out", "pics"],
}
FIELDS = {"test": "ckpt_path", "predict": "ckpt_path", "export": "ckpt_path", "visualize": "ckpt", "fit": "ckpt_path"}


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The field ``mixer ARGV`` names, checking that it exits with 2 and writes nothing."""
    before = sorted(str(p) for p in Path(".").rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    after = sorted(str(p) for p in Path(".").rglob("*") if not str(p).startswith("photos"))
    assert after == [p for p in before if not p.startswith("photos")]  # nothing written
    return field_of(err)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("value, word", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_a_checkpoint_with_non_finite_weights_is_one_line(good, command, value, word, capsys) -> None:
    """Before: exit 0 with nan figures (test), PNGs of NaNs (visualize), an export 'checked' with
    max |Δ| nan."""
    ckpt = str(nonfinite(good, value, f"{word}.ckpt"))
    capsys.readouterr()
    assert refused(COMMANDS[command](ckpt), capsys) == FIELDS[command]


def test_resuming_a_diverged_checkpoint_is_one_line(good, capsys) -> None:
    nan = str(nonfinite(good, float("nan"), "nan.ckpt"))
    capsys.readouterr()
    assert refused(["fit", "--config", TINY, "--trainer.max_epochs", "2", "--ckpt_path", nan], capsys) == "ckpt_path"


@pytest.mark.parametrize("command", ["predict", "test"])
def test_a_checkpoint_naming_another_family_is_one_line(good, command, capsys) -> None:
    """A checkpoint whose network names another family than its arguments fit: one line, nothing written."""
    ckpt = str(misnamed(good))
    capsys.readouterr()
    argv = COMMANDS[command](ckpt) if command == "predict" else ["test", "--ckpt_path", ckpt]
    # predict builds the network the checkpoint names: the argument SWMLP does not take; test (no config
    # outside a run) asks for the config first.
    assert refused(argv, capsys) == {"predict": "model.net", "test": "config"}[command]


def test_a_compressed_record_is_refused_before_anything_is_inflated(good, monkeypatch, capsys) -> None:
    """A deflated record inflates to its declared size inside torch.load before torch's size check
    (a 2 MB file: ~2 GB of memory); refused from the zip's directory, torch.load never called."""
    bomb = str(zip_bomb(good))

    def never(*args, **kwargs):
        raise AssertionError("torch.load was called on a compressed archive")

    monkeypatch.setattr(torch, "load", never)
    capsys.readouterr()
    assert refused(COMMANDS["export"](bomb), capsys) == FIELDS["export"]
