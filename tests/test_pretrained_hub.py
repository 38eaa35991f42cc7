"""Pretrained weights by name: ``timm:NAME.TAG`` and ``hf-hub:ORG/REPO`` through timm and
huggingface_hub, read from a local hub cache with ``HF_HUB_OFFLINE=1`` (nothing is downloaded)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from helpers import error_field
from helpers.fakedata import write_fine_tune_config
from mixer_lightning.cli import main
from mixer_lightning.tasks.loading import load_classifier
from mixer_lightning.weights import read_weights

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def place_in_cache(cache: Path, repo_id: str, files: Path) -> None:
    """`files` as the main revision of the model repo `repo_id` in huggingface_hub's cache layout."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(files, repo / "snapshots" / COMMIT)


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants as hub

    cache = tmp_path / "hub_cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    return cache


def tiny_timm_repo(tmp_path: Path, model_config: dict | None = None) -> tuple[torch.nn.Module, Path]:
    """A small timm MLP-Mixer saved as timm writes hub repos (config.json + model.safetensors);
    `model_config` as timm's save_for_hf takes it (``label_names``, ...)."""
    from timm.models import save_for_hf

    model_args = {"img_size": 32, "mlp_ratio": [0.0625, 0.0625], "num_classes": 10}
    model = timm.create_model("mixer_s32_224", **model_args).eval()
    with torch.no_grad():  # timm's zero head would give every class the same probability
        model.head.weight.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "crop_pct": 1.0,
        "input_size": (3, 32, 32),
        "interpolation": "bilinear",
    }
    save_for_hf(model, tmp_path / "repo", model_config=model_config, model_args=model_args)
    return model, tmp_path / "repo"


def test_a_hub_repo_is_read_from_the_cache_offline(tmp_path, offline_cache) -> None:
    model, files = tiny_timm_repo(tmp_path)
    place_in_cache(offline_cache, "lab/tiny-mixer", files)
    weights = read_weights("hf-hub:lab/tiny-mixer")
    assert weights.format == "timm" and weights.architecture["channels"] == 512
    assert weights.architecture["patch_size"] == 32 and weights.architecture["token_hidden"] == 32
    assert weights.preprocessing["mean"] == [0.5, 0.5, 0.5] and weights.preprocessing["crop_pct"] == 1.0
    assert torch.equal(weights.state_dict["stem.proj.weight"], model.stem.proj.weight)


def test_convert_and_fine_tune_from_a_hub_name(tmp_path, offline_cache, capsys) -> None:
    model, files = tiny_timm_repo(tmp_path)
    place_in_cache(offline_cache, "lab/tiny-mixer", files)
    main(["convert", "--from", "hf-hub:lab/tiny-mixer", "--out", "tiny.ckpt"])
    converted = load_classifier("tiny.ckpt")
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(converted.net(images), model(images), atol=1e-5)
    # Fine-tuning: no preset or architecture given, the hub model's architecture is taken.
    write_fine_tune_config(Path("finetune.yaml"), "hf-hub:lab/tiny-mixer", tmp_path / "hf5")
    main(["fit", "--config", "finetune.yaml"])
    tuned = load_classifier(next(Path("runs/hub").glob("version_0/checkpoints/last.ckpt")))
    assert tuned.net.head.out_features == 5 and tuned.net.stem.proj.out_channels == 512


def test_a_name_missing_from_the_offline_cache_is_one_line(offline_cache, capsys) -> None:
    assert error_field(capsys, ["convert", "--from", "hf-hub:lab/absent", "--out", "x.ckpt"]) == "from"
    assert error_field(capsys, ["convert", "--from", "timm:mixer_b16_224.goog_in21k", "--out", "x.ckpt"]) == "from"
    assert error_field(capsys, ["convert", "--from", "timm:mixer_q99_224.nothing", "--out", "x.ckpt"]) == "from"
    assert not Path("x.ckpt").exists()


@pytest.mark.slow
def test_a_timm_name_with_its_pretrained_tag(tmp_path, offline_cache) -> None:
    """``timm:mixer_b16_224.goog_in21k_ft_in1k`` from a cache holding (random) weights of its shape."""
    from safetensors.torch import save_file

    model = timm.create_model("mixer_b16_224").eval()
    (tmp_path / "b16").mkdir()
    save_file(model.state_dict(), tmp_path / "b16" / "model.safetensors")
    place_in_cache(offline_cache, "timm/mixer_b16_224.goog_in21k_ft_in1k", tmp_path / "b16")
    weights = read_weights("timm:mixer_b16_224.goog_in21k_ft_in1k")
    assert weights.preprocessing["mean"] == [0.5, 0.5, 0.5] and weights.preprocessing["interpolation"] == "bicubic"
    assert torch.equal(weights.state_dict["head.weight"], model.head.weight)


def test_a_converted_hub_model_predicts_as_timm_does(tmp_path, offline_cache, capsys) -> None:
    """The checkpoint `mixer convert` writes from hub weights carries their data facts (timm's
    pretrained_cfg: mean, std, crop, interpolation; the hub's class names), so `mixer predict` needs
    nothing else and computes what timm computes on timm's own evaluation pre-processing."""
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    names = [f"kind {i}" for i in range(10)]
    model, files = tiny_timm_repo(tmp_path, {"label_names": names})
    place_in_cache(offline_cache, "lab/tiny-mixer", files)
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for i, (height, width) in enumerate([(40, 48), (32, 32), (57, 35)]):
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(photos / f"{i}.png")
    main(["convert", "--from", "hf-hub:lab/tiny-mixer", "--out", "tiny.ckpt"])
    main(
        [
            "predict",
            "--ckpt_path",
            "tiny.ckpt",
            "--data.predict_root",
            str(photos),
            "--prediction_writer.output",
            "out.csv",
            "--prediction_writer.topk",
            "3",
        ]
    )
    with open("out.csv", newline="") as f:
        rows = {Path(row["file"]).name: row for row in csv.DictReader(f)}
    assert sorted(rows) == ["0.png", "1.png", "2.png"]
    transform = create_transform(**resolve_data_config({}, model=model))
    for name, row in rows.items():
        with torch.no_grad():
            expected = model(transform(Image.open(photos / name).convert("RGB"))[None]).softmax(1)[0]
        top = expected.topk(3)
        assert [int(row[f"class_{k}"]) for k in (1, 2, 3)] == top.indices.tolist()
        assert [row[f"name_{k}"] for k in (1, 2, 3)] == [names[i] for i in top.indices.tolist()]
        assert np.allclose([float(row[f"prob_{k}"]) for k in (1, 2, 3)], top.values.numpy(), atol=1e-5)


def test_docs_onnx_example_with_the_centre_crop_of_hub_weights(tmp_path, offline_cache, capsys) -> None:
    """The onnxruntime example of docs/usage.md, on its other branch (``resmall_crop``: timm's centre
    crop), reproduces `mixer predict`'s CSV of a converted hub model (tests/test_export.py: the other)."""
    from test_export import assert_docs_example_reproduces_predict, write_photos

    _, files = tiny_timm_repo(tmp_path, {"label_names": [f"kind {i}" for i in range(10)]})
    place_in_cache(offline_cache, "lab/tiny-mixer", files)
    main(["convert", "--from", "hf-hub:lab/tiny-mixer", "--out", "tiny.ckpt"])
    assert_docs_example_reproduces_predict("tiny.ckpt", write_photos(tmp_path / "photos", "RGB"), capsys)
