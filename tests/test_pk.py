"""PK layers, RP Mixers, the S-Mixer and Mixers given by Ω: models and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import TEST_CONFIGS, error_field, read_json, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import MLPMixer, Permutation, SMixer, create_model
from mixer_lightning.width import omega

RP_CONFIG = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")


def test_permutation_and_its_backward_are_exactly_indexing() -> None:
    # Exactly, not to a tolerance: the published runs re-run to the image whatever kernel moves the entries.
    torch.manual_seed(0)
    perm = Permutation(12)
    x = torch.randn(3, 12, requires_grad=True)
    weights = torch.randn(3, 12)
    y = perm(x)
    (y * weights).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    reference = x[:, perm.index]
    (reference * weights).sum().backward()
    assert torch.equal(y, reference) and torch.equal(ours, x.grad)
    assert torch.autograd.gradcheck(lambda t: perm(t), (torch.randn(2, 12, dtype=torch.float64, requires_grad=True),))


def test_permutations_are_frozen_buffers_restored_from_the_state_dict() -> None:
    kwargs = dict(num_classes=4, image_size=8, in_chans=1, patch_size=2, channels=6, num_blocks=2, permute=True)
    torch.manual_seed(0)
    model = SMixer(**kwargs)
    names = [name for name, _ in model.named_buffers() if name.endswith("index")]
    assert len(names) == 8  # J1 and J2 of 2 blocks × (token, channel)
    assert not any("permute" in name for name, _ in model.named_parameters())
    torch.manual_seed(1)
    other = SMixer(**kwargs)
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        model.head.weight.normal_()
        assert not torch.equal(
            model.blocks[0].token_mixing.permute_in.index, other.blocks[0].token_mixing.permute_in.index
        )
        other.load_state_dict(model.state_dict())
        torch.testing.assert_close(other(x), model(x), rtol=0, atol=0)
    # the inverse used by the backward pass follows the loaded permutation
    layer = other.blocks[0].token_mixing.permute_in
    assert torch.equal(layer.index[layer.inverse], torch.arange(layer.size))


def test_a_broken_permutation_in_a_checkpoint_is_refused() -> None:
    model = SMixer(num_classes=4, image_size=8, in_chans=1, patch_size=2, channels=6, num_blocks=1, permute=True)
    state = model.state_dict()
    state["blocks.0.token_mixing.permute_in.index"] = torch.zeros_like(state["blocks.0.token_mixing.permute_in.index"])
    with pytest.raises(RuntimeError, match="blocks.0.token_mixing.permute_in.index"):  # the key named
        model.load_state_dict(state)


def test_per_block_permute_flags() -> None:
    model = create_model(
        "s_mixer",
        num_classes=3,
        image_size=8,
        patch_size=2,
        channels=6,
        num_blocks=4,
        permute=[True, False, False, False],
    )
    assert [layer.permuted for layer in model.mixing_layers()] == [True, True] + [False] * 6
    with pytest.raises(ConfigError) as error:  # one flag per block
        create_model("s_mixer", image_size=8, patch_size=2, channels=6, num_blocks=4, permute=[True, False, True])
    assert error.value.field == "permute"


def test_s_mixer_layers_are_single_fc_with_square_weights() -> None:
    model = create_model("s_mixer", num_classes=3, image_size=16, patch_size=4, tokens=10, channels=6, num_blocks=2)
    first, second = model.blocks[0], model.blocks[1]
    assert first.token_mixing.mlp.fc.weight.shape == (10, 16)  # S0 = 16 -> S = 10
    assert first.token_mixing.skip is not None and first.token_mixing.skip.proj.weight.shape == (10, 16)
    assert second.token_mixing.mlp.fc.weight.shape == (10, 10)  # W ∈ R^{S×S}
    assert second.channel_mixing.mlp.fc.weight.shape == (6, 6)  # V ∈ R^{C×C}
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 3)


def test_models_given_by_omega() -> None:
    model = create_model("s_mixer", image_size=32, patch_size=4, channels=16, omega=2**18, num_blocks=1)
    assert model.tokens == 173  # the paper's (C, S) = (16, 173) at Ω = 2^18
    mixer = create_model("mlp_mixer", image_size=32, patch_size=4, channels=64, omega=2**19, gamma=2, num_blocks=1)
    assert mixer.tokens == 64 and mixer.token_hidden == 128 and mixer.channel_hidden == 128
    assert omega(mixer.tokens, mixer.channels, 2) == 2**19
    with pytest.raises(ConfigError) as error:  # S = 100 contradicts Ω = 2^18
        create_model("s_mixer", image_size=32, patch_size=4, channels=16, omega=2**18, tokens=100)
    assert error.value.field == "tokens"
    with pytest.raises(ConfigError) as error:  # Ω = 100 is unreachable at C = 64
        create_model("s_mixer", image_size=32, patch_size=4, channels=64, omega=100)
    assert error.value.field == "omega"


def test_rp_checkpoint_reproduces_its_validation_accuracy_exactly() -> None:
    main(["fit", "--config", RP_CONFIG])
    (run,) = run_dirs("digits_rp_s_mixer")
    summary = read_json(run / "fit_summary.json")
    # Evaluate with another seed: the permutations must come from the checkpoint, not the seed.
    main(
        [
            "validate",
            "--config",
            str(run / "config.yaml"),
            "--ckpt_path",
            summary["best_checkpoint"],
            "--seed_everything",
            "123",
        ]
    )
    metrics = read_json(run_dirs("digits_rp_s_mixer")[-1] / "val_metrics.json")
    assert metrics["val/acc1"] == summary["best_score"]
    checkpoint = torch.load(summary["best_checkpoint"], weights_only=True)
    assert sum(key.endswith("permute_in.index") for key in checkpoint["state_dict"]) == 4


@pytest.mark.parametrize("axis", ["token", "channel"])
def test_output_only_rp_layer_is_the_literal_pk_layer_with_a_structured_j1(axis: str) -> None:
    # σ[J2 (I ⊗ W) J1 vec X] (Def. 5.1) with J1 the normal layer's grouping and J2 random (App. A.2.3).
    torch.manual_seed(0)
    model = SMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, tokens=5, channels=6, num_blocks=2,
                   permute=True, permute_j1=False)  # fmt: skip
    block = model.blocks[1]
    layer = block.token_mixing if axis == "token" else block.channel_mixing
    assert layer.permuted and layer.permute_in is None
    x = torch.randn(4, 5, 6)  # (B, S, C), the normalised input of the branch
    fc = layer.mlp.fc
    if axis == "token":  # J1 = I on vec(X): the blocks are X's C columns of S entries
        blocks, grouped = 6, x.transpose(1, 2).reshape(4, -1)
    else:  # J1 = J_c: the blocks are X's S rows of C entries
        blocks, grouped = 5, x.reshape(4, -1)
    kron = torch.kron(torch.eye(blocks), fc.weight.detach())
    literal = torch.nn.functional.gelu(grouped @ kron.T + fc.bias.detach().repeat(blocks))[:, layer.permute_out.index]
    torch.testing.assert_close(layer.branch(x), literal.reshape(4, 5, 6))  # read back row-major as (S, C)


def test_output_only_rp_trains_and_its_checkpoint_holds_only_j2() -> None:
    main(["fit", "--config", RP_CONFIG, "--model.net.permute_j1", "false", "--trainer.max_epochs", "1"])
    summary = read_json(run_dirs("digits_rp_s_mixer")[-1] / "fit_summary.json")
    state = torch.load(summary["best_checkpoint"], weights_only=True)["state_dict"]
    assert sum(key.endswith("permute_out.index") for key in state) == 4
    assert not any(key.endswith("permute_in.index") for key in state)
    main(["validate", "--config", str(run_dirs("digits_rp_s_mixer")[-1] / "config.yaml"),
          "--ckpt_path", summary["best_checkpoint"], "--seed_everything", "7"])  # fmt: skip
    metrics = read_json(run_dirs("digits_rp_s_mixer")[-1] / "val_metrics.json")
    assert metrics["val/acc1"] == summary["best_score"]


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--model.net.permute", "[true, false, true]"], "model.net.permute"),  # one flag per block
        (["--model.net.omega", "10"], "model.net.omega"),  # unreachable with C = 8
        (["--model.net.omega", "5000", "--model.net.tokens", "3"], "model.net.tokens"),  # contradicts Ω
        (["--model.net.channels", "-1"], "model.net.channels"),
    ],
)
def test_bad_pk_arguments_are_one_line_errors(flags: list[str], field: str, capsys: pytest.CaptureFixture) -> None:
    assert error_field(capsys, ["fit", "--config", RP_CONFIG, *flags]) == field
    assert not Path("runs").exists()


def test_mlp_mixer_rp_trains_through_the_cli() -> None:
    main(
        [
            "fit",
            "--config",
            str(TEST_CONFIGS / "digits_mixer.yaml"),
            "--model.net.permute",
            "true",
            "--model.net.skip_layer",
            "true",
            "--trainer.max_epochs",
            "1",
        ]
    )
    checkpoint = torch.load(run_dirs("digits_mixer")[-1] / "checkpoints" / "last.ckpt", weights_only=True)
    assert any(key.endswith("skip.proj.weight") for key in checkpoint["state_dict"])
    assert any(key.endswith("permute_out.index") for key in checkpoint["state_dict"])


def test_presets_build_their_family() -> None:
    assert isinstance(create_model("mixer_ss8", num_classes=10), MLPMixer)
