"""`mixer push`: a checkpoint as a Hugging Face Hub repo (model.safetensors, timm's config.json with the
pretrained_cfg, a model card), read back by timm and by our own loading from the folder and from an
offline hub cache; nothing here reaches the network (HfApi's calls are replaced)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import timm
import torch
import yaml

from helpers import TEST_CONFIGS, error_field
from helpers.fakedata import write_hf
from mixer_lightning.cli import main
from mixer_lightning.tasks.loading import load_classifier
from mixer_lightning.weights import read_weights

# timm's mixer_s32_224 shape (patch 32, 8 blocks, C = 512) with tiny MLPs, on 32 px images: 1 token.
TIMM_SHAPED = {"patch_size": 32, "channels": 512, "num_blocks": 8, "token_hidden": 32, "channel_hidden": 32}


@pytest.fixture(scope="module")
def timm_shaped(tmp_path_factory: pytest.TempPathFactory) -> str:
    """best.ckpt of a one-step `mixer fit` of a timm-shaped MLP-Mixer on a 5-class 32 px HF dataset,
    then `mixer test` of it (its run then records test metrics for this checkpoint)."""
    root = tmp_path_factory.mktemp("push_run")
    write_hf(root / "data", train=16, test=8, size=32, classes=5)
    config = {
        "model": {"net": {"class_path": "mixer_lightning.models.MLPMixer", "init_args": TIMM_SHAPED}},
        "data": {
            "class_path": "mixer_lightning.data.ImageDataModule",
            "init_args": {"dataset": "hf", "root": str(root / "data"), "batch_size": 8, "val_split": 0},
        },
        "trainer": {
            "max_epochs": 1,
            "limit_train_batches": 1,
            "limit_val_batches": 1,
            "enable_progress_bar": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": str(root / "runs"), "name": "tiny"},
            },
        },
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(root / "tiny.yaml")])
    best = root / "runs" / "tiny" / "version_0" / "checkpoints" / "best.ckpt"
    main(["test", "--ckpt_path", str(best)])
    return str(best)


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty huggingface_hub cache, offline (as tests/test_pretrained_hub.py's)."""
    import huggingface_hub.constants as hub

    cache = tmp_path / "hub_cache"
    cache.mkdir()
    for name, value in (("HF_HUB_OFFLINE", True), ("HF_HUB_CACHE", str(cache))):
        monkeypatch.setenv(name, str(int(value)) if value is True else value)
        monkeypatch.setattr(hub, name, value)
    return cache


def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list:
    """HfApi's network calls replaced by records of what they were given: (name, arguments)."""
    import huggingface_hub

    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, **kwargs):
        patterns = kwargs.get("allow_patterns")
        names = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir() if not patterns or p.name in patterns)
        calls.append(("upload_folder", kwargs["repo_id"], names))

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)

    def file_exists(self, repo_id, filename, **kwargs):
        calls.append(("file_exists", repo_id, filename))
        return False

    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists", file_exists)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return calls


def test_a_timm_shaped_mixer_round_trips_through_timm_and_back(
    timm_shaped, tmp_path: Path, offline_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_pretrained_hub import place_in_cache

    ours = load_classifier(timm_shaped)
    facts = torch.load(timm_shaped, weights_only=True)["data"]
    main(["push", "--ckpt_path", timm_shaped, "--out", "repo"])
    assert "mixer_s32_224" in capsys.readouterr().out
    assert sorted(p.name for p in Path("repo").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads(Path("repo/config.json").read_text())
    assert config["architecture"] == "mixer_s32_224" and config["num_classes"] == 5
    assert config["model_args"]["img_size"] in (32, [32, 32]) and config["model_args"]["mlp_ratio"] == [0.0625, 0.0625]
    cfg = config["pretrained_cfg"]
    assert cfg["mean"] == facts["mean"] and cfg["std"] == facts["std"] and cfg["input_size"] == [3, 32, 32]
    assert cfg["crop_pct"] == 1.0 and cfg["interpolation"] == facts["interpolation"]
    assert config["label_names"] == [f"c{i}" for i in range(5)]
    assert config["mixer_lightning"]["checkpoint"]["path"] == timm_shaped
    readme = Path("repo/README.md").read_text()
    assert "library_name: timm" in readme and "```yaml" in readme and "patch_size: 32" in readme
    assert "Test metrics (version_0/test_metrics.json)" in readme and "test/acc1:" in readme  # this checkpoint's

    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = ours.net(images)
        # timm, from the folder's weights file.
        model = timm.create_model(
            config["architecture"],
            pretrained=True,
            # num_classes: else timm drops a head whose size differs from the registered cfg's 1000.
            pretrained_cfg_overlay=dict(file=str(Path("repo/model.safetensors").absolute()), num_classes=5),
            **config["model_args"],
        ).eval()
        torch.testing.assert_close(model(images), expected, rtol=0, atol=1e-5)
        model = timm.create_model(f"local-dir:{Path('repo').absolute()}", pretrained=True).eval()
        torch.testing.assert_close(model(images), expected, rtol=0, atol=1e-5)
        # timm, as a hub repo (from the cache, offline).
        place_in_cache(offline_cache, "lab/tiny-push", Path("repo"))
        model = timm.create_model("hf-hub:lab/tiny-push", pretrained=True).eval()
        torch.testing.assert_close(model(images), expected, rtol=0, atol=1e-5)
        assert tuple(model.pretrained_cfg["mean"]) == tuple(facts["mean"])

    # Ours: the folder and the hub repo back to checkpoints that compute the same function.
    main(["convert", "--from", "repo", "--out", "from_folder.ckpt"])
    main(["convert", "--from", "hf-hub:lab/tiny-push", "--out", "from_hub.ckpt"])
    with torch.no_grad():
        for path in ("from_folder.ckpt", "from_hub.ckpt"):
            torch.testing.assert_close(load_classifier(path).net(images), expected, rtol=0, atol=1e-6)


def test_a_timm_shaped_mixer_is_uploaded_by_timms_push_to_hf_hub(timm_shaped, monkeypatch, capsys) -> None:
    calls = fake_hub(monkeypatch)
    main(["push", "--ckpt_path", timm_shaped, "--repo_id", "lab/tiny", "--private"])
    assert calls == [
        ("create_repo", "lab/tiny", {"private": True, "exist_ok": True}),
        ("file_exists", "lab/tiny", "README.md"),  # push_to_hf_hub writes a model card into a repo without one
        ("upload_folder", "lab/tiny", ["README.md", "config.json", "model.safetensors"]),  # no pickle file
    ]
    assert "https://huggingface.co/lab/tiny" in capsys.readouterr().out


def test_another_family_keeps_our_layout_and_loads_back(trained, tmp_path: Path, capsys) -> None:
    rp = trained("rp_s_mixer")
    capsys.readouterr()  # the fit that trained it, on first use
    main(["push", "--ckpt_path", rp, "--out", "rp_repo", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["architecture"] == "mixer_lightning:SMixer" and not report["timm"]
    assert "timm has no SMixer" in report["why_not_timm"]
    config = json.loads(Path("rp_repo/config.json").read_text())
    assert config["pretrained_cfg"]["input_size"] == [1, 8, 8] and config["model_args"]["net"]["init_args"]["permute"]
    assert "library_name: mixer-lightning" in Path("rp_repo/README.md").read_text()

    weights = read_weights("rp_repo")
    module = load_classifier(rp)
    state = module.net.state_dict()
    assert sorted(weights.state_dict) == sorted(state)  # the RP permutations are in it
    assert all(torch.equal(weights.state_dict[k], v) for k, v in state.items())
    # model.init_from: the folder rebuilds the same network (its architecture from the folder's config).
    from mixer_lightning.models import SMixer
    from mixer_lightning.tasks import ClassifierModule

    rebuilt = ClassifierModule(partial(SMixer), num_classes=10, image_size=8, in_chans=1, init_from="rp_repo").eval()
    images = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.net(images), module.net(images), rtol=0, atol=0)
    # ... and its preprocessing becomes the data's defaults, as an hf-hub: name's does (it was ignored)
    capsys.readouterr()
    main(["fit", "--config", str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), "--model.init_from", "rp_repo",
          "--trainer.fast_dev_run", "true"])  # fmt: skip
    out = capsys.readouterr().out
    line = next((x for x in out.splitlines() if x.endswith("(the preprocessing of rp_repo)")), out)
    assert line.startswith(f"data   mean={config['pretrained_cfg']['mean']}, std={config['pretrained_cfg']['std']}")


def test_what_push_refuses_and_the_upload(trained, tmp_path: Path, monkeypatch, capsys) -> None:
    import huggingface_hub.constants as hub

    ckpt = trained("mixer")
    capsys.readouterr()  # the fit that trained it, on first use
    main(["push", "--ckpt_path", ckpt, "--out", "repo"])
    before = Path("repo/config.json").read_bytes()
    assert error_field(capsys, ["push", "--ckpt_path", ckpt, "--out", "repo"]) == "out"  # no --overwrite
    assert Path("repo/config.json").read_bytes() == before

    # Offline (huggingface_hub refuses every request): the folder is written, the upload is one line.
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    assert error_field(capsys, ["push", "--ckpt_path", ckpt, "--out", "off", "--repo_id", "lab/x"], 1) == "repo_id"
    assert (Path("off") / "model.safetensors").is_file()

    # Online (HfApi replaced): the repo is created and only the three files uploaded.
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    calls = fake_hub(monkeypatch)
    Path("off", "notes.txt").write_text("mine, not the hub's")  # --out is the repo: nothing else in it
    assert (
        error_field(capsys, ["push", "--ckpt_path", ckpt, "--out", "off", "--overwrite", "--repo_id", "lab/x"]) == "out"
    )
    Path("off", "notes.txt").unlink()
    main(["push", "--ckpt_path", ckpt, "--out", "off", "--overwrite", "--repo_id", "lab/x", "--private"])
    assert calls == [
        ("create_repo", "lab/x", {"private": True, "exist_ok": True}),
        ("upload_folder", "lab/x", ["README.md", "config.json", "model.safetensors"]),
    ]
    assert "https://huggingface.co/lab/x" in capsys.readouterr().out

    # A checkpoint without data facts has no preprocessing to state.
    checkpoint = torch.load(ckpt, weights_only=True)
    del checkpoint["data"]
    torch.save(checkpoint, "bare.ckpt")
    assert error_field(capsys, ["push", "--ckpt_path", "bare.ckpt", "--out", "bare"]) == "ckpt_path"
    assert not Path("bare").exists()
    assert error_field(capsys, ["push", "--ckpt_path", ckpt]) == "out"  # nowhere to write or upload
