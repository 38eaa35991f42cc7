"""The MLP-Mixer network as a plain nn.Module."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from helpers import TEST_CONFIGS, error_field
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import MLPMixer, create_model, get_entry, list_models, num_params
from mixer_lightning.models.layers import SkipLayer
from mixer_lightning.models.pk import drop_path_rates


def test_tokens_channels_gamma_and_depth_are_free_of_the_patch_grid() -> None:
    model = MLPMixer(
        num_classes=7, image_size=16, in_chans=2, patch_size=4, tokens=24, channels=12, gamma=3, num_blocks=3
    )
    assert model.stem.num_patches == 16  # S0
    first = model.blocks[0].token_mixing
    assert isinstance(first.skip, SkipLayer) and first.skip.proj.weight.shape == (24, 16)  # W̃ ∈ R^{S×S0}
    assert first.mlp.fc1.weight.shape == (72, 16) and first.mlp.fc2.weight.shape == (24, 72)  # S0 → γS → S
    assert model.blocks[1].token_mixing.mlp.fc1.weight.shape == (72, 24)
    assert model.blocks[1].channel_mixing.mlp.fc1.weight.shape == (36, 12)  # D_C = γC
    assert len(model.blocks) == 3
    x = torch.randn(5, 2, 16, 16)
    assert model.forward_features(x).shape == (5, 24, 12)
    assert model(x).shape == (5, 7)
    skips = model.forward_skip_inputs(x)
    assert len(skips) == 6 and skips[0].shape == (5, 16, 12) and skips[1].shape == (5, 24, 12)


def test_skip_layer_when_asked_even_if_s_equals_s0() -> None:
    assert MLPMixer(image_size=8, patch_size=2, channels=8, num_blocks=1).blocks[0].token_mixing.skip is None
    model = MLPMixer(image_size=8, patch_size=2, channels=8, num_blocks=1, skip_layer=True)
    assert isinstance(model.blocks[0].token_mixing.skip, SkipLayer)


def test_runs_in_float64() -> None:
    model = MLPMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=8, num_blocks=2).double()
    out = model(torch.randn(2, 1, 8, 8, dtype=torch.float64))
    assert out.dtype == torch.float64


def test_head_starts_at_zero() -> None:
    model = create_model("mlp_mixer", num_classes=5, image_size=8, patch_size=4, channels=8, num_blocks=1)
    assert torch.count_nonzero(model.head.weight) == 0
    assert torch.all(model(torch.randn(2, 3, 8, 8)) == 0)


def test_stochastic_depth_rises_linearly_over_every_mlp() -> None:
    assert drop_path_rates(0.1, 4) == pytest.approx([0.0, 0.1 / 3, 0.2 / 3, 0.1])
    model = MLPMixer(image_size=8, patch_size=4, channels=8, num_blocks=2, drop_path=0.3)
    rates = [getattr(m.drop_path, "drop_prob", 0.0) for b in model.blocks for m in (b.token_mixing, b.channel_mixing)]
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_table1_parameter_counts() -> None:
    expected = {
        "mixer_s32": 19,
        "mixer_s16": 18,
        "mixer_b32": 60,
        "mixer_b16": 59,
        "mixer_l32": 206,
        "mixer_l16": 207,
        "mixer_h14": 431,
    }
    for name, millions in expected.items():
        with torch.device("meta"):
            model = create_model(name)
        assert round(num_params(model, exclude_head=True) / 1e6) == millions, name
    assert set(expected) <= set(list_models("mixer_*"))


def test_a_patch_size_that_does_not_divide_the_image_names_the_field() -> None:
    with pytest.raises(ConfigError) as error:
        MLPMixer(image_size=8, patch_size=3, channels=8, num_blocks=1)
    assert error.value.field == "patch_size"


@pytest.mark.parametrize(
    "flag, value",
    [
        ("channels", "0"),
        ("tokens", "-4"),
        ("gamma", "0"),
        ("num_blocks", "0"),
        ("drop_path", "1.0"),
        ("init", "he"),
        ("act", "relu6"),
    ],
)
def test_bad_architecture_arguments_name_the_flag(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The signature's types (jsonargparse restricted types, Literals) check what a config gives."""
    args = ["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), f"--model.net.{flag}", value]
    assert error_field(capsys, args) == f"model.net.{flag}"


def test_normal_init_is_hayase_fan_in_gaussian() -> None:
    """``init: normal`` draws every weight i.i.d. N(0, 1/fan_in), untruncated (Hayase Sec. 4.3, eq. S.39),
    so a γn×n weight's largest singular value sits at the Marchenko-Pastur edge 1 + √γ."""
    torch.manual_seed(0)
    gamma = 4
    model = MLPMixer(
        num_classes=10,
        image_size=32,
        patch_size=4,
        tokens=300,
        channels=200,
        gamma=gamma,
        num_blocks=2,
        init="normal",
        skip_layer=True,
    )
    block = model.blocks[1]
    for weight, fan_in in [
        (block.token_mixing.mlp.fc1.weight, 300),  # W1 ∈ R^{γS×S}
        (block.token_mixing.mlp.fc2.weight, gamma * 300),
        (block.channel_mixing.mlp.fc1.weight, 200),  # W3ᵀ ∈ R^{γC×C}
        (model.blocks[0].token_mixing.skip.proj.weight, 64),  # W̃ ∈ R^{S×S0}
        (model.stem.proj.weight, 3 * 4 * 4),  # per-patch FC, C0 = 3P²
    ]:
        sigma = 1 / math.sqrt(fan_in)
        assert weight.std().item() == pytest.approx(sigma, rel=0.05)
        assert weight.abs().max().item() > 3 * sigma  # not truncated at 2σ (timm's lecun_normal_ is)
    for weight in (block.token_mixing.mlp.fc1.weight, block.channel_mixing.mlp.fc1.weight):
        top = torch.linalg.matrix_norm(weight.detach().double(), ord=2).item()
        assert top == pytest.approx(1 + math.sqrt(gamma), rel=0.08)  # Sec. 4.3: c_γ = 1 + √γ
    biases = [m.bias for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None]
    assert all(torch.count_nonzero(b) == 0 for b in biases)
    assert torch.count_nonzero(model.head.weight) == 0
    # The other modes are not this one: xavier's γn×n weights have variance 2/((1+γ)n).
    xavier = MLPMixer(image_size=32, patch_size=4, tokens=300, channels=200, gamma=gamma, num_blocks=1)
    assert xavier.blocks[0].channel_mixing.mlp.fc1.weight.std().item() == pytest.approx(
        math.sqrt(2 / (5 * 200)), rel=0.05
    )


def test_hayase_presets_use_the_papers_norm_eps_and_init_tolstikhins_keep_flax() -> None:
    for name in ("mixer_ss8", "mixer_ss_w", "mixer_b_w"):
        assert get_entry(name).defaults["norm_eps"] == 1e-5 and get_entry(name).defaults["init"] == "normal"
    with torch.device("meta"):
        ss8 = create_model("mixer_ss8", num_classes=10)
        b16 = create_model("mixer_b16")
    assert {m.eps for m in ss8.modules() if isinstance(m, nn.LayerNorm)} == {1e-5}
    assert {m.eps for m in b16.modules() if isinstance(m, nn.LayerNorm)} == {1e-6}
    for name in ("mixer_s32", "mixer_s16", "mixer_b32", "mixer_b16", "mixer_l32", "mixer_l16", "mixer_h14"):
        assert "norm_eps" not in get_entry(name).defaults and "init" not in get_entry(name).defaults


@pytest.mark.parametrize(
    "family, offers",
    [
        ("mlp_mixer", {"Classifier", "SkipInputs", "MixingNetwork"}),
        ("s_mixer", {"Classifier", "SkipInputs", "MixingNetwork"}),
        ("sw_mlp", {"Classifier", "SkipInputs", "SparseNetwork"}),
        ("kron_mlp", {"Classifier", "StructuredNetwork"}),
        ("monarch_mlp", {"Classifier", "StructuredNetwork"}),
    ],
)
def test_every_family_offers_what_its_analyses_read(family: str, offers: set[str]) -> None:
    """The protocols of `mixer_lightning.models.protocols`, and the analysis that reads each, work on
    every family that offers them (and only those)."""
    from mixer_lightning.analysis.features import skip_input_names
    from mixer_lightning.analysis.spectrum import weight_layers
    from mixer_lightning.models import protocols

    sizes = {"kron_mlp": {}, "monarch_mlp": {}}.get(family, {"patch_size": 2, "channels": 8})
    net = create_model(family, num_classes=3, image_size=8, in_chans=1, **sizes)
    names = ("Classifier", "SkipInputs", "MixingNetwork", "SparseNetwork", "StructuredNetwork")
    assert {name for name in names if isinstance(net, getattr(protocols, name))} == offers
    x = torch.randn(2, 1, 8, 8)
    assert net.forward_head(net.forward_features(x)).shape == (2, 3)
    if "SkipInputs" in offers:
        assert len(skip_input_names(net)) == len(net.forward_skip_inputs(x)) > 0
    layers = weight_layers(net)  # the spectra's layers: one per FC layer of the effective wide MLP
    assert layers and all(0 < density <= 1 for _, _, density in layers)
