"""`mixer bench --table_s3`: Hayase & Karakida Table S.3 (memory, FLOPs, time per epoch of the dense SW-MLP,
the RP MLP-Mixer and the MLP-Mixer) at its CIFAR and ImageNet settings, beside the paper's figures."""

from __future__ import annotations

import json

import pytest
import torch

from mixer_lightning.benchmarks import table_s3 as sparse
from mixer_lightning.benchmarks.table_s3 import (
    TABLE_S3_SETTINGS,
    forward_flops,
    sw_mlp_dense_arithmetic,
    table_s3_model,
)
from mixer_lightning.cli import main

TINY = {
    "cifar": dict(
        image_size=8, in_chans=3, patch_size=2, tokens=16, channels=8, num_blocks=1, gamma=2.0, num_classes=10
    ),
    "imagenet": dict(
        image_size=16, in_chans=3, patch_size=4, tokens=16, channels=48, num_blocks=2, gamma=4.0, num_classes=100
    ),
}


def test_the_papers_sw_mlp_figures_are_8_bytes_and_2_flops_per_dense_entry() -> None:
    """The paper's dense SW-MLP figures follow from 4L layers of γm×m (App. C.1: each of the Mixer's four
    FC layers per block replaced by M ⊙ A): ImageNet exactly at its stated S·C = 150,528; CIFAR at
    m = 4096 (S = C = 64), not at the stated S·C = 64·48 = 3072."""
    imagenet = sw_mlp_dense_arithmetic(TABLE_S3_SETTINGS["imagenet"])
    assert imagenet["paper_bytes"] == pytest.approx(23.2e12, rel=0.005)  # Table S.3: 23.2 TB
    assert imagenet["flops"] == pytest.approx(5.80e12, rel=0.005)  # 5.80 T
    cifar = sw_mlp_dense_arithmetic(TABLE_S3_SETTINGS["cifar"])
    assert cifar["width_m"] == 3072 and cifar["flops"] == pytest.approx(805e6 * (3072 / 4096) ** 2, rel=0.005)
    square = sw_mlp_dense_arithmetic({**TABLE_S3_SETTINGS["cifar"], "channels": 64})
    assert square["paper_bytes"] == pytest.approx(3.22e9, rel=0.005) and square["flops"] == pytest.approx(
        805e6, rel=0.005
    )


def test_imagenet_mixers_on_the_meta_device() -> None:
    with torch.device("meta"):
        mixer = table_s3_model("mixer", TABLE_S3_SETTINGS["imagenet"])
        rp = table_s3_model("rp_mixer", TABLE_S3_SETTINGS["imagenet"])
    flops = forward_flops(mixer, TABLE_S3_SETTINGS["imagenet"], "meta")
    # 2·(stem + 8 blocks × (2·C·γS·S + 2·S·γC·C) + head) multiply-adds
    s, c = 256, 588
    assert flops == 2 * (s * 588 * c + 8 * (2 * c * 4 * s * s + 2 * s * 4 * c * c) + c * 1000)
    assert forward_flops(rp, TABLE_S3_SETTINGS["imagenet"], "meta") == flops  # permutations are gathers
    assert sum(p.numel() for p in rp.parameters()) == sum(p.numel() for p in mixer.parameters())


def test_table_s3_through_the_bench_command(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command at test size (the settings replaced by tiny ones): the measured dense SW-MLP equals
    its arithmetic, every figure sits beside the paper's with the ratio, and the models' ratios too."""
    monkeypatch.setattr(sparse, "TABLE_S3_SETTINGS", TINY)
    main(["bench", "--table_s3", "--repeats", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    cifar, imagenet = report["cifar"], report["imagenet"]
    dense, mixer, rp = (cifar["rows"][k] for k in ("sw_mlp_dense", "mixer", "rp_mixer"))
    arithmetic = cifar["sw_mlp_dense_arithmetic"]
    assert dense["params_bytes"] == arithmetic["bytes"] and dense["flops"] == arithmetic["flops"]
    assert mixer["flops"] == rp["flops"] and rp["params_bytes"] > mixer["params_bytes"]  # RP: permutation indices
    assert cifar["rows"]["sw_mlp_sparse"]["params_bytes"] < dense["params_bytes"]
    assert cifar["steps_per_epoch"] == 391  # ⌈50,000 / 128⌉: an epoch of CIFAR at App. C.3's batch
    assert all(row["epoch_seconds"] == pytest.approx(row["step_seconds"] * 391) for row in cifar["rows"].values())
    assert dense["vs_paper"]["flops"] == pytest.approx(dense["flops"] / 805e6)
    ratio = cifar["ratios"]["sw_mlp_dense/mixer flops"]
    assert ratio["ours"] == pytest.approx(dense["flops"] / mixer["flops"]) and ratio["paper"] == pytest.approx(
        805 / 12.5
    )
    assert imagenet["rows"]["sw_mlp_dense"]["flops"] == imagenet["sw_mlp_dense_arithmetic"]["flops"]
    main(["bench", "--table_s3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "Table S.3, CIFAR" in out and "Table S.3, ImageNet" in out and "SW-MLP (dense)" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--table_s3", "--model", "mixer_s16"])
    assert exit_info.value.code == 2


@pytest.mark.slow
def test_table_s3_at_its_settings(capsys: pytest.CaptureFixture) -> None:
    """The real settings (about 4 GB for the dense SW-MLP's AdamW step at m = 3072)."""
    main(["bench", "--table_s3", "--repeats", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    dense = report["cifar"]["rows"]["sw_mlp_dense"]
    assert dense["params_bytes"] == report["cifar"]["sw_mlp_dense_arithmetic"]["bytes"]
    assert report["cifar"]["width_m"] == 3072 and report["cifar"]["steps_per_epoch"] == 391
    assert report["imagenet"]["rows"]["sw_mlp_dense"]["vs_paper"]["memory"] == pytest.approx(1.0, abs=0.005)
