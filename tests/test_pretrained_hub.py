"""Pretrained weights by name: ``timm:NAME.TAG`` and ``hf-hub:ORG/REPO`` through timm and
huggingface_hub, read from a local hub cache with ``HF_HUB_OFFLINE=1`` (nothing is downloaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import timm
import torch

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


def tiny_timm_repo(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    """A small timm MLP-Mixer saved as timm writes hub repos (config.json + model.safetensors)."""
    from timm.models import save_for_hf

    model_args = {"img_size": 32, "mlp_ratio": [0.0625, 0.0625], "num_classes": 10}
    model = timm.create_model("mixer_s32_224", **model_args).eval()
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "crop_pct": 1.0,
        "input_size": (3, 32, 32),
        "interpolation": "bilinear",
    }
    save_for_hf(model, tmp_path / "repo", model_args=model_args)
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
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "--from", "hf-hub:lab/absent", "--out", "x.ckpt"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("mixer: error: --from: cannot fetch 'hf-hub:lab/absent' from the hub or its cache"), err
    with pytest.raises(SystemExit):
        main(["convert", "--from", "timm:mixer_q99_224.nothing", "--out", "x.ckpt"])
    assert "--from: timm knows no model 'mixer_q99_224.nothing'" in capsys.readouterr().err
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
