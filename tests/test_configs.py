"""Every config under configs/ parses (``--print_config``) and trains one batch on the CPU.

Each experiment config runs as written (its model, recipe, augmentation, mixup, callbacks), composed
with the ``configs/trainer/cpu.yaml`` overlay, on a tiny dataset in the real on-disk format of the
config's own dataset (tests/helpers/fakedata.py), with a batch of 2 and no workers.

One CLI call costs ~1 s of argument parsing, so the fast suite checks a representative config of
each dataset and recipe (`FAST`); the slow suite (``pytest -m slow tests/test_configs.py``, ~15 min on
2 CPU cores) checks every config, including those of models too big for a quick CPU step (the dense
Table S.3 SW-MLP, configs/cifar10_s3_sw_mlp_dense.yaml, peaks at ~8 GB of memory).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import CONFIGS
from helpers.fakedata import WRITERS, patch_torchvision_checks
from mixer_lightning.cli import main

EXPERIMENTS = sorted(p for p in CONFIGS.glob("*.yaml"))
OVERLAYS = sorted((CONFIGS / "trainer").glob("*.yaml"))
FAST = {"quickstart.yaml", "cifar10_mixer_ss_w.yaml", "stl10_fig5_s_mixer.yaml"}
FAST_OVERLAYS = {"cpu.yaml", "fsdp.yaml"}


def marked(paths: list[Path], fast: set[str]) -> list:
    return [pytest.param(p, id=p.stem, marks=() if p.name in fast else pytest.mark.slow) for p in paths]


def data_args(config: Path) -> dict:
    content = yaml.safe_load(config.read_text()) or {}
    data = content.get("data") or {}
    return data.get("init_args", data) if isinstance(data, dict) else {}


def print_config(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def test_there_is_a_config_for_every_experiment_of_this_issue() -> None:
    names = {p.name for p in EXPERIMENTS}
    for name in (
        "quickstart.yaml",
        "cifar10_mixer_ss8.yaml",
        "cifar10_mixer_ss_w.yaml",
        "cifar100_mixer_ss8.yaml",
        "cifar100_mixer_ss_w.yaml",
        "imagenet_mixer_b16.yaml",
        "imagenet_mixer_b_w.yaml",
        "imagenet_mixer_b16_tolstikhin.yaml",
        "imagenet_mixer_l16_tolstikhin.yaml",
        "cifar10_fig2_mixer.yaml",
        "cifar10_fig4_mixer.yaml",
        # issue 14: fine-tuning, ImageNet-21k, input permutations, and the figures without a config before
        "imagenet_mixer_b16_tolstikhin_finetune.yaml",
        "imagenet_mixer_l16_tolstikhin_finetune.yaml",
        "imagenet21k_mixer_b16_tolstikhin.yaml",
        "imagenet21k_mixer_l16_tolstikhin.yaml",
        "imagenet_mixer_b16_permutation.yaml",
        "cifar100_fig5_sw_mlp.yaml",
        "stl10_fig5_sw_mlp.yaml",
        "cifar10_s1_sw_mlp.yaml",
        "cifar10_d2_mlp_mixer.yaml",
        "cifar10_d2_rp_mlp_mixer.yaml",
        "cifar10_d2_sw_mlp.yaml",
        "cifar100_d2_mlp_mixer.yaml",
        "cifar100_d2_rp_mlp_mixer.yaml",
        "cifar100_d2_sw_mlp.yaml",
        "cifar10_d3_mlp_mixer.yaml",
        "cifar10_d3_rp_mlp_mixer.yaml",
        "cifar10_d7_s_mixer.yaml",
        "cifar10_d7_rp_s_mixer.yaml",
        "cifar10_d7_mlp_mixer_sgd.yaml",
        "cifar10_d7_rp_mlp_mixer_sgd.yaml",
        "cifar10_d7_mlp_mixer_adamw.yaml",
        "cifar10_d7_rp_mlp_mixer_adamw.yaml",
        "cifar10_s3_mlp_mixer.yaml",
        "cifar10_s3_rp_mlp_mixer.yaml",
        "cifar10_s3_sw_mlp_dense.yaml",
        "imagenet_s3_mlp_mixer.yaml",
        "imagenet_s3_rp_mlp_mixer.yaml",
    ):
        assert name in names
    assert {p.stem for p in OVERLAYS} >= {"cpu", "gpu", "ddp", "fsdp", "bf16", "tpu", "multinode"}


@pytest.mark.parametrize("config", marked(EXPERIMENTS, FAST))
def test_config_prints_and_states_what_it_reproduces(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = print_config(["fit", "--config", str(config)], capsys)
    assert printed["model"]["net"]["class_path"].startswith("mixer_lightning.models.")
    assert printed["data"]["class_path"] == "mixer_lightning.data.ImageDataModule"
    first_line = config.read_text().splitlines()[0]
    assert first_line.startswith("#"), f"{config.name} must start with a comment naming what it reproduces"


@pytest.mark.parametrize("overlay", marked(OVERLAYS, FAST_OVERLAYS))
def test_every_overlay_composes_with_an_experiment(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = CONFIGS / "imagenet_mixer_b_w.yaml"
    printed = print_config(["fit", "--config", str(experiment), "--config", str(overlay)], capsys)
    wanted = yaml.safe_load(overlay.read_text())["trainer"]
    for key, value in wanted.items():
        got = printed["trainer"][key]
        if isinstance(value, dict):  # a strategy given by class path
            assert got["class_path"] == value["class_path"]
        else:
            assert got == value, key
    assert printed["model"]["net"]["init_args"]["channels"] == 588  # the experiment (Mixer-B-W) is untouched
    assert printed["data"]["init_args"]["auto_augment"] == "rand-m9-mstd0.5-inc1"


def fast_dev_run(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = data_args(config).get("dataset", "digits")
    args = ["fit", "--config", str(config), "--config", str(CONFIGS / "trainer" / "cpu.yaml")]
    if dataset in WRITERS:
        patch_torchvision_checks(monkeypatch)
        root = WRITERS[dataset](tmp_path / "fake" / dataset)
        args += ["--data.init_args.root", str(root), "--data.init_args.download", "false"]
    args += [
        "--data.init_args.batch_size",
        "2",
        "--data.init_args.eval_batch_size",
        "2",
        "--data.init_args.num_workers",
        "0",
        "--trainer.fast_dev_run",
        "true",
    ]
    main(args)


@pytest.mark.parametrize("config", marked(EXPERIMENTS, FAST))
def test_config_trains_one_batch_on_cpu(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_dev_run(config, tmp_path, monkeypatch)


def test_the_hf_overlay_names_the_hub_dataset_not_a_path_of_this_machine() -> None:
    text = (CONFIGS / "data" / "cifar10_hf.yaml").read_text()
    assert yaml.safe_load(text)["data"]["init_args"]["root"] == "uoft-cs/cifar10"
    assert "--data.root" in text  # the header says how to give a local copy
