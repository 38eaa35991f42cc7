"""`mixer export`: every family's network to ONNX, torch.export and TorchScript, checked against
eager by the command itself and again here, by loading the file, on a batch of another size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mixer_lightning.cli import main


def export(capsys, *args: str) -> dict:
    main(["export", *args, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["mixer", "rp_s_mixer", "sw_mlp"])
@pytest.mark.parametrize("fmt", ["onnx", "pt2", "torchscript"])
def test_every_family_exports_and_matches_eager(kind, fmt, trained, capsys) -> None:
    from mixer_lightning.tasks.loading import load_classifier

    ckpt = trained(kind)
    capsys.readouterr()  # (the first use trains the checkpoint, printing its run)
    out = Path(f"model.{fmt}")
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
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", ckpt, "--format", "pt2", "--out", "notes.pt2"])
    assert exit_info.value.code == 2 and Path("notes.pt2").read_text() == "my notes"
    assert "mixer: error: out: 'notes.pt2' exists; pass --overwrite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", ckpt, "--format", "tflite", "--out", "m.tflite"])
    assert "format: unknown format 'tflite'; choose one of onnx, pt2, torchscript" in capsys.readouterr().err
    assert (
        export(capsys, "--ckpt_path", ckpt, "--format", "pt2", "--out", "notes.pt2", "--overwrite")["out"]
        == "notes.pt2"
    )
    assert not list(Path(".").glob(".notes.pt2.tmp-*"))
