"""`mixer visualize`: token-mixing units (Mixer Fig. 5, supp. Fig. 1), stem units (supp. Fig. 2) and the
sparsity patterns of effective weights (Hayase & Karakida Fig. 1, S.9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import error_field
from mixer_lightning.analysis.effective import effective_linears
from mixer_lightning.analysis.visualize import (
    first_effective_weight,
    paired_order,
    spatial_frequency,
    spatial_token_blocks,
    token_positions,
    unit_images,
)
from mixer_lightning.cli import main
from mixer_lightning.commands.visualize import demo_patterns
from mixer_lightning.models import MLPMixer, SMixer
from mixer_lightning.models.layers import PatchEmbed


def visualize(capsys: pytest.CaptureFixture, *args: str) -> dict:
    capsys.readouterr()
    main(["visualize", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_a_mixer_gets_all_three_pictures(trained, capsys) -> None:
    result = visualize(capsys, "--ckpt", trained("mixer"), "--out", "pictures")
    assert result == {
        "network": "MLP-Mixer",
        "written": ["pictures/token_mixing_units.png", "pictures/stem_units.png", "pictures/sparsity_patterns.png"],
        "skipped": [],
    }
    assert all(Path(p).stat().st_size > 10_000 for p in result["written"])


def test_an_rp_mixer_has_no_spatial_token_units(trained, capsys) -> None:
    rp = trained("rp_s_mixer")
    result = visualize(capsys, "--ckpt", rp, "--out", "rp")
    assert result["written"] == ["rp/stem_units.png", "rp/sparsity_patterns.png"]
    assert "block 1: its token mixing is randomly permuted (RP)" in result["skipped"][0]
    assert error_field(capsys, ["visualize", "--ckpt", rp, "--out", "rp", "--what", "token_units"]) == "what"


def test_an_sw_mlp_and_a_shallow_mlp(trained, capsys) -> None:
    result = visualize(capsys, "--ckpt", trained("sw_mlp"), "--out", "sw")
    assert result["written"] == ["sw/stem_units.png", "sw/sparsity_patterns.png"]
    assert result["skipped"] == ["token_units: the SW-MLP has no token-mixing layers"]
    assert error_field(capsys, ["visualize", "--ckpt", trained("kron"), "--out", "kron"]) == "ckpt"  # none applies


def test_demo_draws_figure_s9(capsys) -> None:
    result = visualize(capsys, "--demo", "--out", "docs")
    assert (
        result["written"] == ["docs/sparsity_patterns.png"]
        and Path("docs/sparsity_patterns.png").stat().st_size > 20_000
    )
    panels = dict(demo_patterns(8, 8, seed=0))
    token, channel = panels["Mixer token mixing: I_C ⊗ W"], panels["Mixer channel mixing: Wᵀ ⊗ I_S"]
    rp = panels["RP Mixer token mixing: J2 (I ⊗ W) J1"]
    for weight in (token, channel, rp):
        assert weight.shape == (64, 64) and int((weight != 0).sum()) == 64 * 8  # density 1/C = 1/8
    assert bool((token[:8, 8:] == 0).all())  # block diagonal: the first 8 outputs read the first 8 inputs
    assert not bool((rp[:8, 8:] == 0).all())  # the permutations scatter the blocks
    assert bool((rp.abs().sum(0) > 0).all()) and bool((rp.abs().sum(1) > 0).all())  # every unit still connected


@pytest.mark.parametrize(
    "args, field",
    [
        (["--out", "x"], "ckpt"),  # no checkpoint, no --demo
        (["--demo", "--out", "x", "--what", "stem_units"], "what"),  # --demo draws the sparsity patterns only
        (["--demo", "--out", "x", "--tokens", "1"], "tokens"),
        (["--demo", "--out", "x", "--units", "-1"], "units"),
    ],
)
def test_bad_visualize_arguments(args: list[str], field: str, capsys) -> None:
    assert field in error_field(capsys, ["visualize", *args])


def test_units_follow_the_patch_grid_and_pair_with_their_inverse() -> None:
    stem = PatchEmbed(16, 2, 1, 4)  # an 8×8 patch grid
    positions = token_positions(stem)
    assert positions[:3].tolist() == [[0, 0], [0, 1], [0, 2]] and positions[8].tolist() == [1, 0]
    upscaled = PatchEmbed(16, 2, 1, 4, regions=2)  # region by region: token 16 starts the top-right region
    assert token_positions(upscaled)[16].tolist() == [0, 4] and token_positions(upscaled)[32].tolist() == [4, 0]
    rows, cols = torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="ij")
    smooth = torch.cos(torch.pi * rows / 8).flatten()
    checker = torch.cos(torch.pi * (rows + cols)).flatten()
    weight = torch.stack([checker, smooth, -checker + 0.01 * torch.randn(64), -smooth])
    images = unit_images(weight, stem)
    assert torch.equal(images[1], torch.cos(torch.pi * rows / 8))
    frequency = spatial_frequency(images)
    assert frequency[1] < frequency[0] and frequency[3] < frequency[2]
    pairs = paired_order(images)
    assert pairs[0] in ((1, 3), (3, 1)) and dict(pairs)[0] == 2 and dict(pairs)[2] == 0  # smooth first, inverses


def test_which_blocks_have_a_spatial_grid() -> None:
    normal = MLPMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=4, num_blocks=3)
    assert spatial_token_blocks(normal) == ([1, 2, 3], [])
    skip = SMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, tokens=12, channels=4, num_blocks=3)
    blocks, notes = spatial_token_blocks(skip)
    assert blocks == [1] and "SkipLayer (S0 = 16 → S = 12 tokens)" in notes[0]
    rp = SMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=4, num_blocks=2, permute=[False, True])
    assert spatial_token_blocks(rp, [1, 2])[0] == [1]


def test_the_fast_effective_weight_is_the_effective_linear() -> None:
    torch.manual_seed(0)
    mixer = MLPMixer(
        num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=4, num_blocks=2, permute=[False, True]
    )
    s_mixer = SMixer(
        num_classes=3,
        image_size=8,
        in_chans=1,
        patch_size=2,
        tokens=12,
        channels=4,
        num_blocks=2,
        permute=[False, True],
    )
    for layer in mixer.mixing_layers() + s_mixer.mixing_layers():  # normal, RP, SkipLayer S0 → S
        assert torch.equal(first_effective_weight(layer), effective_linears(layer, torch.float32)[0].weight)
