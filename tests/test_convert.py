"""Weights from timm and from the official JAX layout (`mixer_lightning.weights`)."""

from __future__ import annotations

import argparse
import math
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.layers import GatedMlp, GluMlp
from timm.layers.activations import GELUTanh
from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock, SpatialGatingBlock

from mixer_lightning.errors import ConfigError
from mixer_lightning.models import MLPMixer, create_model
from mixer_lightning.models.upscale import tile_images, upscale_tokens
from mixer_lightning.weights import from_timm, infer_architecture, load_weights, read_weights, to_jax_npz
from mixer_lightning.weights.keys import from_jax_key, from_timm_key, jax_key, timm_key

TIMM_MIXERS = ["mixer_b16_224", "mixer_b32_224", "mixer_l16_224", "mixer_l32_224", "mixer_s16_224", "mixer_s32_224"]
# One per size class (S, B, L) in the fast suite; the heavier /16 ones of B and L are slow on 2 cores.
FAST_TIMM_MIXERS = ["mixer_s32_224", "mixer_s16_224", "mixer_b32_224", "mixer_l32_224"]
TIMM_NOT_MIXERS = [
    "gmixer_12_224",
    "gmixer_24_224",
    "gmlp_b16_224",
    "gmlp_s16_224",
    "gmlp_ti16_224",
    "resmlp_12_224",
    "resmlp_24_224",
    "resmlp_36_224",
    "resmlp_big_24_224",
]
# max |diff| of logits and features in float32, in units of max(1, max |expected|): float32 keeps about 7
# digits, so outputs of ~35 (Mixer-L/16's logits) differ by a few ulps, ~1e-5; a wrong mapping is off by O(1)
TOLERANCE = 1e-5


def fill_random(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random values in every parameter, scaled by 1/sqrt(fan_in) (the zero head and unit LayerNorms of
    a fresh model would hide a mapping mistake). Large matrices repeat a random block per parameter,
    which costs a copy instead of generating 200 M random numbers for Mixer-L."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            scale = 1 / math.sqrt(p[0].numel()) if p.ndim > 1 else 1.0
            flat, size = p.view(-1), min(p.numel(), 1 << 16)
            chunk = torch.randn(size, generator=generator) * scale
            whole = flat.numel() // size * size
            flat[:whole].view(-1, size).copy_(chunk.expand(whole // size, size))
            flat[whole:].copy_(chunk[: flat.numel() - whole])
    return model.eval()


def assert_same_function(timm_model: torch.nn.Module, ours: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        features, expected_features = ours.forward_features(x), timm_model.forward_features(x)
        logits, expected = ours.forward_head(features), timm_model.forward_head(expected_features)
    error = max(
        ((logits - expected).abs().max() / expected.abs().max().clamp(min=1)).item(),
        ((features - expected_features).abs().max() / expected_features.abs().max().clamp(min=1)).item(),
    )
    assert error <= TOLERANCE
    assert expected.abs().max() > 0.1  # not a trivially zero comparison
    return error


def test_the_registered_timm_mixers_are_the_ones_tested() -> None:
    assert timm.list_models("mixer_*") == TIMM_MIXERS
    listed = timm.list_models("gmixer_*") + timm.list_models("gmlp_*") + timm.list_models("resmlp_*")
    assert sorted(listed) == TIMM_NOT_MIXERS


@pytest.mark.parametrize(
    "name", [n if n in FAST_TIMM_MIXERS else pytest.param(n, marks=pytest.mark.slow) for n in TIMM_MIXERS]
)
def test_from_timm_parity_on_every_registered_variant(name: str) -> None:
    """Every registered variant at 64 px (S = 4 or 16 tokens: the timm registry's blocks, widths and
    depth, with a short token sequence to stay fast); tests below repeat it at 224 (slow)."""
    with torch.device("meta"):  # the structure only; fill_random gives the values
        timm_model = timm.create_model(name, pretrained=False, img_size=64)
    fill_random(timm_model.to_empty(device="cpu"))
    ours = from_timm(timm_model)
    assert isinstance(ours, MLPMixer) and not ours.training
    assert ours.token_hidden == timm_model.blocks[0].mlp_tokens.fc1.out_features
    assert_same_function(timm_model, ours, torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)))


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_MIXERS)
def test_from_timm_parity_at_224(name: str) -> None:
    torch.manual_seed(0)  # timm's init, the noise below and the input: the same figures on every run
    timm_model = timm.create_model(name, pretrained=False).eval()  # timm's own init
    with torch.no_grad():  # its zero head and unit LayerNorms would hide mistakes
        for key, p in timm_model.named_parameters():
            if p.ndim == 1 or key.startswith("head"):
                p.normal_(std=0.5)
    ours = from_timm(timm_model)
    preset = create_model(name.removesuffix("_224"))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in preset.state_dict().items()}
    error = assert_same_function(timm_model, ours, torch.randn(2, 3, 224, 224))
    print(
        f"{name}: max |diff| of logits and features, over max(1, their scale): {error:.3g}"
    )  # the figure in docs/notes (pytest -s)


@pytest.mark.parametrize(
    "kwargs, act",
    [
        (dict(act_layer=GELUTanh, norm_layer=partial(torch.nn.LayerNorm, eps=1e-5), num_classes=0), "gelu_tanh"),
        (dict(act_layer=partial(torch.nn.GELU, approximate="tanh"), mlp_ratio=(1.5, 2.5)), "gelu_tanh"),
        (dict(mlp_layer=partial(timm.layers.Mlp, bias=False), proj_drop_rate=0.1, drop_path_rate=0.2), "gelu"),
    ],
)
def test_from_timm_custom_mixers(kwargs: dict, act: str) -> None:
    torch.manual_seed(0)
    timm_model = fill_random(MlpMixer(img_size=24, in_chans=1, patch_size=4, num_blocks=3, embed_dim=20, **kwargs))
    ours = from_timm(timm_model)
    assert ours.blocks[0].token_mixing.mlp.act.approximate == ("tanh" if act == "gelu_tanh" else "none")
    assert ours.norm.eps == timm_model.norm.eps
    assert ours.blocks[0].channel_mixing.mlp.drop1.p == kwargs.get("proj_drop_rate", 0.0)
    # timm: one constant drop-path rate; ours rises linearly to it at the last MLP.
    assert ours.blocks[-1].channel_mixing.drop_path.__dict__.get("drop_prob", 0.0) == kwargs.get("drop_path_rate", 0)
    assert_same_function(timm_model, ours, torch.randn(3, 1, 24, 24))
    ours64, timm64 = from_timm(timm_model.double()), timm_model
    x = torch.randn(2, 1, 24, 24, dtype=torch.float64)
    torch.testing.assert_close(ours64(x), timm64(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", TIMM_NOT_MIXERS)
def test_timm_models_that_are_not_plain_mixers_are_refused(name: str) -> None:
    with torch.device("meta"):  # the check reads the structure only
        timm_model = timm.create_model(name, pretrained=False)
    with pytest.raises(ConfigError) as error:
        from_timm(timm_model)
    assert error.value.field == "timm_model"


@pytest.mark.parametrize(
    "kwargs", [dict(stem_norm=True), dict(act_layer=torch.nn.SiLU), dict(global_pool=""), dict(img_size=(16, 24))]
)
def test_custom_timm_models_outside_the_mixer_family_are_refused(kwargs: dict) -> None:
    args = dict(img_size=16, patch_size=4, num_blocks=1, embed_dim=8) | kwargs
    with pytest.raises(ConfigError) as error:
        from_timm(MlpMixer(**args))
    assert error.value.field == "timm_model"


def tiny_timm(num_classes: int = 10, **kwargs) -> MlpMixer:
    torch.manual_seed(0)
    args = dict(num_classes=num_classes, img_size=8, in_chans=1, patch_size=2, num_blocks=2, embed_dim=16)
    return fill_random(MlpMixer(**(args | kwargs)))


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_timm_state_dict_files_load_by_key_mapping(suffix: str) -> None:
    timm_model = tiny_timm()
    path = Path(f"timm{suffix}")
    torch.save(timm_model.state_dict(), path) if suffix == ".pth" else save_file(timm_model.state_dict(), path)
    weights = read_weights(path)
    assert weights.format == "timm" and "blocks.1.token_mixing.mlp.fc2.weight" in weights.state_dict
    architecture = infer_architecture(weights.state_dict)
    assert architecture["image_size"] == 8 and architecture["token_hidden"] == 8 and architecture["num_blocks"] == 2
    architecture.pop("permute")
    ours = MLPMixer(**architecture)
    messages = load_weights(ours, weights)
    assert "30" in messages[0]  # tensors loaded
    assert_same_function(timm_model, ours.eval(), torch.randn(4, 1, 8, 8))


def test_a_file_needing_pickled_code_is_refused_with_the_reason() -> None:
    timm_model = tiny_timm()
    # What timm's train.py writes: the state dict beside the argparse Namespace of its arguments.
    torch.save({"state_dict": timm_model.state_dict(), "args": argparse.Namespace(lr=0.1)}, "train_checkpoint.pth.tar")
    with pytest.raises(ConfigError) as error:
        read_weights("train_checkpoint.pth.tar")
    assert error.value.field == "init_from" and "argparse.Namespace" in error.value.problem  # what it would import


@pytest.mark.parametrize(
    "timm_kwargs",
    [
        dict(mlp_layer=GluMlp, mlp_ratio=(1.0, 4.0)),  # gmixer: fc1 twice as wide as fc2's input
        dict(block_layer=ResBlock, norm_layer=Affine, mlp_ratio=4),  # ResMLP: keys no Mixer has
        dict(block_layer=SpatialGatingBlock, mlp_layer=GatedMlp, mlp_ratio=6),  # gMLP
    ],
)
def test_state_dicts_of_other_timm_blocks_are_refused(timm_kwargs: dict, capsys) -> None:
    from helpers import error_field

    torch.save(
        MlpMixer(img_size=8, in_chans=1, patch_size=2, num_blocks=1, embed_dim=8, **timm_kwargs).state_dict(),
        "other.pth",
    )
    assert error_field(capsys, ["convert", "--from", "other.pth", "--out", "x.ckpt"]) == "from"
    assert not Path("x.ckpt").exists()


# ---------------------------------------------------------------------------------------------
# Official JAX layout.


def jax_listing1(params: dict[str, np.ndarray], image: np.ndarray, num_blocks: int) -> np.ndarray:
    """The Mixer supplementary's Listing 1 (flax) in numpy, reading the npz arrays by their JAX names:
    conv kernel HWIO, dense kernels (in, out), nn.gelu = tanh approximation, LayerNorm ε = 1e-6.
    Independent of `convert.py`, so a layout mistake made consistently in both directions shows."""

    def dense(x, name):
        return x @ params[f"{name}/kernel"] + params[f"{name}/bias"]

    def layer_norm(x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-6) * params[f"{name}/scale"] + params[f"{name}/bias"]

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    def mlp(x, name):
        return dense(gelu(dense(x, f"{name}/Dense_0")), f"{name}/Dense_1")

    kernel = params["stem/kernel"]  # (P, P, in, C)
    p = kernel.shape[0]
    n, h, w, c = image.shape  # NHWC, as flax
    patches = image.reshape(n, h // p, p, w // p, p, c)
    x = np.einsum("nhpwqc,pqco->nhwo", patches, kernel) + params["stem/bias"]
    x = x.reshape(n, -1, x.shape[-1])  # einops 'n h w c -> n (h w) c': raster order
    for i in range(num_blocks):
        y = layer_norm(x, f"MixerBlock_{i}/LayerNorm_0")
        x = x + mlp(y.swapaxes(1, 2), f"MixerBlock_{i}/token_mixing").swapaxes(1, 2)
        x = x + mlp(layer_norm(x, f"MixerBlock_{i}/LayerNorm_1"), f"MixerBlock_{i}/channel_mixing")
    x = layer_norm(x, "pre_head_layer_norm").mean(axis=1)
    return dense(x, "head")


def jax_mixer(**kwargs) -> MLPMixer:
    torch.manual_seed(0)
    args = dict(
        num_classes=7,
        image_size=12,
        in_chans=3,
        patch_size=4,
        channels=10,
        token_hidden=6,
        channel_hidden=14,
        num_blocks=2,
        act="gelu_tanh",
    )
    return fill_random(MLPMixer(**(args | kwargs))).double()


def test_to_jax_npz_writes_the_official_layout_and_listing1_computes_our_function() -> None:
    model = jax_mixer()
    arrays = to_jax_npz(model, "mixer.npz")
    with np.load("mixer.npz") as npz:
        assert sorted(npz.files) == sorted(arrays)
    expected_keys = {
        "stem/kernel",
        "stem/bias",
        "pre_head_layer_norm/scale",
        "pre_head_layer_norm/bias",
        "head/kernel",
        "head/bias",
    }
    for i in range(2):
        for part in ("LayerNorm_0", "LayerNorm_1"):
            expected_keys |= {f"MixerBlock_{i}/{part}/scale", f"MixerBlock_{i}/{part}/bias"}
        for mlp in ("token_mixing", "channel_mixing"):
            for dense in ("Dense_0", "Dense_1"):
                expected_keys |= {f"MixerBlock_{i}/{mlp}/{dense}/kernel", f"MixerBlock_{i}/{mlp}/{dense}/bias"}
    assert set(arrays) == expected_keys
    assert arrays["stem/kernel"].shape == (4, 4, 3, 10)  # HWIO
    assert arrays["MixerBlock_0/token_mixing/Dense_0/kernel"].shape == (9, 6)  # (S, D_S)
    assert arrays["MixerBlock_1/channel_mixing/Dense_1/kernel"].shape == (14, 10)  # (D_C, C)
    assert arrays["head/kernel"].shape == (10, 7)
    image = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    reference = jax_listing1(arrays, image.permute(0, 2, 3, 1).numpy(), num_blocks=2)
    with torch.no_grad():
        np.testing.assert_allclose(model(image).numpy(), reference, rtol=0, atol=1e-10)


def test_jax_npz_round_trip_and_gelu_tanh_default() -> None:
    model = jax_mixer()
    to_jax_npz(model, "mixer.npz")
    weights = read_weights("mixer.npz")
    assert weights.format == "jax" and weights.architecture == {"act": "gelu_tanh"}
    fresh = jax_mixer(act="gelu_tanh")
    fill_random(fresh, seed=5)
    load_weights(fresh, weights, new_head=False)
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)


def test_upscaled_model_exports_to_raster_order_jax() -> None:
    """A K-upscaled model's region-ordered token mixing, exported with its weights permuted to the JAX
    code's raster order, computes the same function in Listing 1."""
    big = upscale_tokens(jax_mixer(), 2)
    arrays = to_jax_npz(big, "big.npz")
    image = tile_images([torch.randn(2, 3, 12, 12, dtype=torch.float64) for _ in range(4)], 2)
    reference = jax_listing1(arrays, image.permute(0, 2, 3, 1).numpy(), num_blocks=2)
    with torch.no_grad():
        np.testing.assert_allclose(big(image).numpy(), reference, rtol=0, atol=1e-10)


def _save_npz(arrays: dict[str, np.ndarray], path: str = "broken.npz") -> str:
    np.savez(path, **arrays)
    return path


def test_jax_missing_misshaped_and_foreign_keys_are_named() -> None:
    model = jax_mixer()
    arrays = to_jax_npz(model, "mixer.npz")
    missing = {k: v for k, v in arrays.items() if k != "MixerBlock_1/token_mixing/Dense_1/bias"}
    misshaped = dict(arrays)
    misshaped["MixerBlock_0/token_mixing/Dense_0/kernel"] = arrays["MixerBlock_0/token_mixing/Dense_0/kernel"].T
    cases = [
        (lambda: load_weights(jax_mixer(), _save_npz(missing)), "MixerBlock_1/token_mixing/Dense_1/bias"),
        (lambda: load_weights(jax_mixer(), _save_npz(misshaped)), "(6, 9)"),  # the file's JAX layout, as it is
        (lambda: read_weights(_save_npz(arrays | {"Transformer/encoder_norm/scale": np.ones(3)})), "Transformer/"),
        (lambda: load_weights(jax_mixer(num_blocks=3), "mixer.npz"), "MixerBlock_2/LayerNorm_0/scale"),
    ]
    for load, named in cases:  # each names the key as the JAX file spells it
        with pytest.raises(ConfigError) as error:
            load()
        assert error.value.field == "init_from" and named in error.value.problem


def test_jax_checkpoints_nested_by_the_training_code_are_read() -> None:
    arrays = to_jax_npz(jax_mixer(), "mixer.npz")
    weights = read_weights(_save_npz({f"opt/target/{k}": v for k, v in arrays.items()}))
    assert set(weights.state_dict) == set(jax_mixer().state_dict())


def test_new_head_when_the_number_of_classes_differs() -> None:
    to_jax_npz(jax_mixer(), "mixer.npz")
    model = jax_mixer(num_classes=3)
    messages = load_weights(model, "mixer.npz")
    assert "head" in messages[-1]  # said: a new head
    assert torch.count_nonzero(model.head.weight) == 0
    with pytest.raises(ConfigError) as error:
        load_weights(jax_mixer(num_classes=3), "mixer.npz", new_head=False)
    assert error.value.field == "init_from" and "head/kernel" in error.value.problem  # the key, as the file spells it


def test_key_names_in_both_directions() -> None:
    assert jax_key("blocks.3.channel_mixing.norm.weight") == "MixerBlock_3/LayerNorm_1/scale"
    assert jax_key("blocks.0.token_mixing.mlp.fc2.weight") == "MixerBlock_0/token_mixing/Dense_1/kernel"

    for key in jax_mixer().state_dict():
        assert from_jax_key(jax_key(key)) == key
        assert from_timm_key(timm_key(key)) == key
    assert timm_key("blocks.2.token_mixing.norm.bias") == "blocks.2.norm1.bias"


def test_missing_and_non_weight_files_are_config_errors(tmp_path: Path) -> None:
    Path("garbage.pth").write_bytes(b"not a torch file")
    for path in ("nowhere.npz", "garbage.pth"):
        with pytest.raises(ConfigError) as error:
            read_weights(path)
        assert error.value.field == "init_from"


# ------------------------------------------------------------------ `mixer convert` on the command line


def tiny_npz(path: str, num_classes: int = 10, in_chans: int = 1) -> str:
    net = MLPMixer(num_classes=num_classes, image_size=8, in_chans=in_chans, patch_size=2, channels=16, gamma=2)
    to_jax_npz(net, path)
    return path


def convert_cli(*args: str) -> None:
    from mixer_lightning.cli import main

    main(["convert", *args])


def test_convert_removes_only_its_own_orphans() -> None:
    """A killed `mixer convert --out model.ckpt` leaves .model.ckpt.tmp-PID; the next convert to
    model.ckpt removes it, and leaves a look-alike of another name in the user's folder alone."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()  # its PID is now that of a process that has ended
    own, other = Path(f".model.ckpt.tmp-{process.pid}"), Path(f".other.ckpt.tmp-{process.pid}")
    own.write_text("half a checkpoint")
    other.write_text("another tool's file")
    convert_cli("--from", tiny_npz("digits.npz"), "--model", "mlp_mixer", "--out", "model.ckpt")
    assert Path("model.ckpt").is_file() and not own.exists() and other.read_text() == "another tool's file"


def test_convert_carries_the_data_facts(trained, capsys) -> None:
    """What `mixer predict` needs besides the weights goes into the converted checkpoint: a
    mixer-lightning checkpoint's own data facts; for Google's JAX ImageNet weights, their preprocessing
    (mean = std = 0.5, bicubic, 0.875 centre crop, as timm's pretrained_cfg of the same weights) and
    ImageNet's class names. A plain state dict says nothing of its data: no facts."""
    from mixer_lightning.tasks.loading import read_checkpoint

    ckpt = trained("mixer")
    convert_cli("--from", ckpt, "--out", "copy.ckpt")
    assert read_checkpoint("copy.ckpt")["data"] == read_checkpoint(ckpt)["data"]

    convert_cli("--from", tiny_npz("imagenet.npz", num_classes=1000, in_chans=3), "--out", "imagenet.ckpt")
    facts = read_checkpoint("imagenet.ckpt")["data"]
    assert facts["class_names"][0] == "tench, Tinca tinca" and len(facts["class_names"]) == 1000
    assert facts["mean"] == facts["std"] == [0.5, 0.5, 0.5] and facts["interpolation"] == "bicubic"
    assert (facts["eval_crop"], facts["eval_crop_pct"], facts["image_size"]) == ("resmall_crop", 0.875, 8)

    convert_cli("--from", tiny_npz("digits.npz"), "--out", "digits.ckpt")
    assert "data" not in read_checkpoint("digits.ckpt")
