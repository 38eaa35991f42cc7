"""Exact higher-resolution fine-tuning (Mixer supplementary C): `upscale_tokens`."""

from __future__ import annotations

import pytest
import torch

from mixer_lightning.errors import ConfigError
from mixer_lightning.models import MLPMixer, SMixer
from mixer_lightning.models.layers import PatchEmbed
from mixer_lightning.models.upscale import region_tokens, tile_images, upscale_tokens


def randomised(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter random (the zero head and unit LayerNorms would hide mistakes), float64, eval."""
    generator = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.5)
    return model


def tiny_mixer(**kwargs) -> MLPMixer:
    args = dict(num_classes=5, image_size=8, in_chans=2, patch_size=2, channels=6, gamma=2, num_blocks=2)
    return randomised(MLPMixer(**{**args, **kwargs}))


def tiles(count: int, seed: int = 1, size: int = 8) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3, 2, size, size, generator=generator, dtype=torch.float64) for _ in range(count)]


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(lambda: tiny_mixer(), id="mlp_mixer"),
        pytest.param(lambda: tiny_mixer(tokens=12, skip_layer=True), id="mlp_mixer_skip_layer_s_ne_s0"),
        pytest.param(lambda: tiny_mixer(skip_layer=True), id="mlp_mixer_skip_layer_s_eq_s0"),
        pytest.param(
            lambda: randomised(SMixer(num_classes=5, image_size=8, in_chans=2, patch_size=2, channels=6, num_blocks=2)),
            id="s_mixer",
        ),
    ],
)
@pytest.mark.parametrize("factor", [2, 3])
def test_logits_on_tiled_images_are_the_mean_of_the_tiles_logits(model, factor: int) -> None:
    base = model()
    big = upscale_tokens(base, factor)
    parts = tiles(factor * factor)
    image = tile_images(parts, factor)
    assert image.shape[-1] == 8 * factor
    expected = torch.stack([base(t) for t in parts]).mean(dim=0)
    torch.testing.assert_close(big(image), expected, rtol=0, atol=1e-12)
    # The property holds for every tile content, not just on average: a different tiling too.
    torch.testing.assert_close(big(tile_images(parts[::-1], factor)), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("skip", [False, True])
def test_token_mixing_outputs_region_by_region_are_the_base_outputs(skip: bool) -> None:
    base = tiny_mixer(tokens=12 if skip else None, skip_layer=skip)
    factor = 2
    big = upscale_tokens(base, factor)
    parts = tiles(factor * factor, seed=3)
    big_inputs = big.forward_skip_inputs(tile_images(parts, factor))  # input of every mixing layer
    base_inputs = [base.forward_skip_inputs(t) for t in parts]
    assert len(big_inputs) == 2 * len(base.blocks)
    for layer, features in enumerate(big_inputs):
        for region, tokens in enumerate(region_tokens(features, factor)):
            torch.testing.assert_close(tokens, base_inputs[region][layer], rtol=0, atol=1e-12)
    # and the outputs of the last mixing layer (before the final LayerNorm)
    last = big.mixing_layers()[-1]
    out = last(big_inputs[-1])
    for region, tokens in enumerate(region_tokens(out, factor)):
        torch.testing.assert_close(tokens, base.mixing_layers()[-1](base_inputs[region][-1]), rtol=0, atol=1e-12)


def test_weights_are_block_diagonal_copies_and_biases_tiled() -> None:
    base = tiny_mixer(tokens=12, skip_layer=True)
    big = upscale_tokens(base, 2)
    for old, new in zip(base.blocks, big.blocks, strict=True):
        for fc in ("fc1", "fc2"):
            w, w2 = getattr(old.token_mixing.mlp, fc), getattr(new.token_mixing.mlp, fc)
            assert torch.equal(w2.weight, torch.block_diag(*[w.weight] * 4))
            assert torch.equal(w2.bias, w.bias.repeat(4))
            # channel mixing is unchanged
            assert torch.equal(getattr(new.channel_mixing.mlp, fc).weight, getattr(old.channel_mixing.mlp, fc).weight)
    skip, skip2 = base.blocks[0].token_mixing.skip, big.blocks[0].token_mixing.skip
    assert torch.equal(skip2.proj.weight, torch.block_diag(*[skip.proj.weight] * 4))
    assert big.blocks[0].token_mixing.mlp.fc1.weight.shape == (4 * 24, 4 * 16)  # K²D_S × K²S0
    assert big.tokens == 4 * base.tokens and big.token_hidden == 4 * base.token_hidden
    assert big.stem.image_size == 16 and big.stem.regions == 2 and big.stem.num_patches == 64
    assert torch.equal(big.stem.proj.weight, base.stem.proj.weight)
    assert base.stem.regions == 1 and base.blocks[0].token_mixing.mlp.fc1.weight.shape == (24, 16)  # untouched


def test_patch_embed_orders_tokens_region_by_region() -> None:
    # A 1-channel stem that reads the top-left pixel of each patch: the tokens then spell out the order.
    embed = PatchEmbed(image_size=8, patch_size=2, in_chans=1, channels=1, regions=2)
    with torch.no_grad():
        embed.proj.weight.zero_()
        embed.proj.weight[0, 0, 0, 0] = 1
        embed.proj.bias.zero_()
    raster = torch.arange(16.0).view(4, 4)  # patch (r, c) has label 4r + c
    image = raster.repeat_interleave(2, 0).repeat_interleave(2, 1)[None, None]
    order = embed(image)[0, :, 0].long().tolist()
    assert order == [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]
    raster_embed = PatchEmbed(8, 2, 1, 1)
    raster_embed.proj.load_state_dict(embed.proj.state_dict())
    assert raster_embed(image)[0, :, 0].long().tolist() == list(range(16))


def test_fine_tuning_is_free_to_leave_the_block_diagonal_form() -> None:
    big = upscale_tokens(tiny_mixer(), 2).train()
    big(tile_images(tiles(4), 2)).sum().backward()
    grad = big.blocks[0].token_mixing.mlp.fc1.weight.grad
    assert grad is not None and grad[:12, 16:].abs().sum() > 0  # an off-diagonal block gets a gradient


def test_dtype_device_and_training_state_are_kept() -> None:
    base = MLPMixer(num_classes=3, image_size=8, in_chans=1, patch_size=4, channels=8, num_blocks=1, drop_path=0.2)
    big = upscale_tokens(base.to(torch.bfloat16), 2)
    assert all(p.dtype == torch.bfloat16 for p in big.parameters())
    assert big(torch.randn(2, 1, 16, 16, dtype=torch.bfloat16)).shape == (2, 3)
    assert big.blocks[0].channel_mixing.drop_path.drop_prob == pytest.approx(0.2)


@pytest.mark.parametrize(
    "make, factor, message",
    [
        (lambda: tiny_mixer(permute=True), 2, "random-permuted"),
        (lambda: tiny_mixer(permute=[False, True]), 2, "block(s) [1]"),
        (lambda: torch.nn.Linear(2, 2), 2, "cannot upscale a Linear"),
    ],
)
def test_undefined_constructions_are_refused(make, factor, message: str) -> None:
    with pytest.raises(ConfigError) as error:  # `message`: why (RP blocks, not a Mixer)
        upscale_tokens(make(), factor)
    assert error.value.field == "upscale"


def test_factor_one_is_a_copy() -> None:
    base = tiny_mixer()
    same = upscale_tokens(base, 1)
    x = tiles(1)[0]
    assert same is not base and torch.equal(same(x), base(x))


@pytest.mark.slow
def test_mixer_b16_from_224_to_448_exactly() -> None:
    """The paper's case: Mixer-B/16 pre-trained at 224 px, fine-tuned at 448 px (S = 196 → 784)."""
    from mixer_lightning.models import create_model

    base = randomised(create_model("mixer_b16", num_classes=10), seed=2)
    with torch.no_grad():  # keep activations O(1) through 12 blocks with N(0, 0.25) weights
        for module in base.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
                module.weight.mul_(1 / module.weight[0].numel() ** 0.5)
    big = upscale_tokens(base, 2)
    assert big.blocks[0].token_mixing.mlp.fc1.weight.shape == (1536, 784)
    parts = [torch.randn(1, 3, 224, 224, dtype=torch.float64) for _ in range(4)]
    with torch.no_grad():
        expected = torch.stack([base(t) for t in parts]).mean(dim=0)
        torch.testing.assert_close(big(tile_images(parts, 2)), expected, rtol=0, atol=1e-10)
