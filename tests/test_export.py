"""`mixer export`: every family's network to ONNX, torch.export and TorchScript, checked against
eager by the command itself and again here, by loading the file, on a batch of another size."""

from __future__ import annotations

import ast
import contextlib
import csv
import errno
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import error_field
from mixer_lightning.cli import main


def export(capsys, *args: str) -> dict:
    main(["export", *args, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["mixer", "rp_s_mixer", "sw_mlp"])
@pytest.mark.parametrize("fmt", ["onnx", "pt2", "torchscript"])
def test_every_family_exports_and_matches_eager(kind, fmt, trained, capsys) -> None:
    from mixer_lightning.models.export import SUFFIXES
    from mixer_lightning.tasks.loading import load_classifier

    ckpt = trained(kind)
    capsys.readouterr()  # (the first use trains the checkpoint, printing its run)
    out = Path("model").with_suffix(SUFFIXES[fmt])  # .onnx, .pt2, .pt: the name says what the file is
    report = export(capsys, "--ckpt_path", ckpt, "--format", fmt, "--out", str(out))
    assert out.is_file() and report["max_abs_diff"] < 1e-4, report
    # Run the file independently on images of another batch size than traced.
    module = load_classifier(ckpt)
    images = torch.rand(5, module.in_chans, module.image_size, module.image_size)
    with torch.no_grad():
        expected = module.net(images)
        if fmt == "onnx":
            import onnxruntime

            session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
            got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: images.numpy()})[0])
        elif fmt == "pt2":
            got = torch.export.load(out).module()(images)
        else:
            got = torch.jit.load(str(out))(images)
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-4)


def test_export_refuses_to_replace_a_file_without_overwrite(trained, capsys) -> None:
    ckpt = trained("mixer")
    capsys.readouterr()
    Path("notes.pt2").write_text("my notes")
    assert error_field(capsys, ["export", "--ckpt_path", ckpt, "--format", "pt2", "--out", "notes.pt2"]) == "out"
    assert Path("notes.pt2").read_text() == "my notes"
    assert "format" in error_field(capsys, ["export", "--ckpt_path", ckpt, "--format", "tflite", "--out", "m.tflite"])
    assert "batch_size" in error_field(
        capsys, ["export", "--ckpt_path", ckpt, "--format", "pt2", "--out", "m.pt2", "--batch_size", "0"]
    )
    assert (
        export(capsys, "--ckpt_path", ckpt, "--format", "pt2", "--out", "notes.pt2", "--overwrite")["out"]
        == "notes.pt2"
    )
    assert not list(Path(".").glob(".notes.pt2.tmp-*"))


def dead_pid() -> int:
    """The id of a process that has ended (a writer killed midway leaves such a PID in its temporary's name)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("fmt, name", [("onnx", "m.onnx"), ("pt2", "m.pt2"), ("torchscript", "m.pt")])
def test_export_writes_through_the_atomic_writer(fmt, name, trained, capsys, monkeypatch) -> None:
    """A full disk is one line naming --out; the old file is kept and no temporary is left."""
    ckpt = trained("mixer")
    Path(name).write_text("the previous export")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # the disk fills as the file is written out
    capsys.readouterr()
    args = ["export", "--ckpt_path", ckpt, "--format", fmt, "--out", name, "--overwrite"]
    assert error_field(capsys, args, code=1) == "out"
    assert Path(name).read_text() == "the previous export"
    assert not list(Path(".").glob(f".{name}.tmp-*"))


def test_export_to_a_place_it_cannot_write_is_one_line(trained, capsys, monkeypatch) -> None:
    ckpt = trained("mixer")

    def read_only(source, target) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(target))

    monkeypatch.setattr(os, "replace", read_only)
    capsys.readouterr()
    # The OS's error, on the file asked for: exit 1 (a machine problem, not a mistake in the input).
    assert (
        error_field(capsys, ["export", "--ckpt_path", ckpt, "--format", "torchscript", "--out", "m.pt"], code=1)
        == "m.pt"
    )
    assert sorted(Path(".").iterdir()) == []


def test_export_removes_only_its_own_orphans(trained, capsys) -> None:
    """A killed `mixer export --out m.pt` left .m.pt.tmp-PID: the next export to m.pt removes it; a
    look-alike of another name in the user's folder is not ours to touch."""
    ckpt = trained("mixer")
    pid = dead_pid()
    own, other = Path(f".m.pt.tmp-{pid}"), Path(f".other.tmp-{pid}")
    own.write_text("half an export")
    other.write_text("another tool's file")
    export(capsys, "--ckpt_path", ckpt, "--format", "torchscript", "--out", "m.pt")
    assert not own.exists() and other.read_text() == "another tool's file"


def docs_onnx_example() -> str:
    """The onnxruntime example of docs/usage.md ("Exporting for inference")."""
    from helpers import ROOT

    text = (ROOT / "docs" / "usage.md").read_text()
    return next(block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "onnxruntime" in block)


def run_docs_example(model: Path, image: Path) -> list[tuple]:
    code = docs_onnx_example().replace('"model.onnx"', repr(str(model))).replace('"photo.jpg"', repr(str(image)))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/usage.md", "exec"), {})
    return ast.literal_eval(printed.getvalue().strip())


def write_photos(folder: Path, mode: str) -> Path:
    """Images of other sizes than the model's, some not square (the crop matters)."""
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, (height, width) in enumerate([(40, 48), (32, 32), (57, 35)]):
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).convert(mode).save(folder / f"{i}.png")
    return folder


def assert_docs_example_reproduces_predict(ckpt: str, photos: Path, capsys) -> None:
    main(["export", "--ckpt_path", ckpt, "--format", "onnx", "--out", "model.onnx"])
    main(["predict", "--ckpt_path", ckpt, "--data.predict_root", str(photos), "--prediction_writer.output", "p.csv"])
    capsys.readouterr()
    with open("p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for row in rows:
        printed = run_docs_example(Path("model.onnx"), photos / row["file"])
        assert [(c, n) for c, n, _ in printed] == [(int(row[f"class_{k}"]), row[f"name_{k}"]) for k in range(1, 6)]
        assert np.allclose([float(p) for *_, p in printed], [float(row[f"prob_{k}"]) for k in range(1, 6)], atol=1e-5)


def test_onnx_export_carries_names_and_data_facts(trained, tmp_path, capsys) -> None:
    """The ONNX model's input is `image`, its output `logits`, and its metadata holds the checkpoint's
    data facts, with which the ~10-line onnxruntime example of docs/usage.md reproduces `mixer
    predict`'s CSV (the digits Mixer: grey images resized)."""
    import onnx

    from mixer_lightning.tasks.loading import read_checkpoint

    ckpt = trained("mixer")
    assert_docs_example_reproduces_predict(ckpt, write_photos(tmp_path / "photos", "L"), capsys)
    model = onnx.load("model.onnx")
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == ["logits"]
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    facts = read_checkpoint(ckpt)["data"]
    assert {k: meta[k] for k in facts} == facts and len(meta["class_names"]) == 10
    assert meta["family"] == "MLPMixer" and len(meta["checkpoint_sha256"]) == 64
    main(["export", "--ckpt_path", ckpt, "--format", "torchscript", "--out", "model.pt"])
    extra = {"mixer.json": ""}
    torch.jit.load("model.pt", _extra_files=extra)
    assert json.loads(extra["mixer.json"])["class_names"] == facts["class_names"]
