"""The Mixer as a wide, sparse MLP: the identities of Hayase & Karakida, checked numerically in float64."""

from __future__ import annotations

import pytest
import torch

from mixer_lightning.analysis.effective import (
    EffectiveWideMLP,
    commutation_matrix,
    effective_linears,
    kron_identity,
    permutation_matrix,
    unvec,
    vec,
)
from mixer_lightning.models import MLPMixer, SMixer

torch.set_default_dtype(torch.float32)
S, C = 6, 4


def kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # torch.kron of a transposed (non-contiguous) operand fails in torch 2.14 ("view size is not compatible").
    return torch.kron(a.contiguous(), b.contiguous())


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def test_vec_of_a_product_is_a_kronecker_product() -> None:
    w, x, v = rand(5, S), rand(S, C), rand(C, 3)
    torch.testing.assert_close(vec(w @ x @ v), kron(v.T, w) @ vec(x))  # eq. (6)
    torch.testing.assert_close(vec(x @ v), kron(v.T, torch.eye(S, dtype=torch.float64)) @ vec(x))
    torch.testing.assert_close(vec(w @ x), kron(torch.eye(C, dtype=torch.float64), w) @ vec(x))
    torch.testing.assert_close(unvec(vec(x), S, C), x)


def test_commutation_matrix_swaps_kronecker_factors() -> None:
    x = rand(S, C)
    jc = commutation_matrix(S, C)
    torch.testing.assert_close(jc @ vec(x), vec(x.T))  # Definition 3.1
    a, b = rand(S, S), rand(C, C)
    torch.testing.assert_close(jc.T @ kron(a, b) @ jc, kron(b, a))
    # The form the reviewer corrected: J_cᵀ (I_S ⊗ Vᵀ) J_c = Vᵀ ⊗ I_S (not V ⊗ I_S).
    v = rand(C, C)
    eye_s = torch.eye(S, dtype=torch.float64)
    torch.testing.assert_close(jc.T @ kron(eye_s, v.T) @ jc, kron(v.T, eye_s))
    assert not torch.allclose(jc.T @ kron(eye_s, v.T) @ jc, kron(v, eye_s))


def small_smixer(**kwargs) -> SMixer:
    torch.manual_seed(0)
    defaults = dict(num_classes=3, image_size=8, in_chans=2, patch_size=4, tokens=S, channels=C, num_blocks=2)
    return SMixer(**{**defaults, **kwargs}).double()


def test_normal_mixing_layers_are_kronecker_products() -> None:
    model = small_smixer()
    token, channel = model.blocks[1].token_mixing, model.blocks[1].channel_mixing
    (t,) = effective_linears(token)
    (c,) = effective_linears(channel)
    w = token.mlp.fc.weight.detach()
    v = channel.mlp.fc.weight.detach().T  # Y = X V: V is the transposed FC weight
    torch.testing.assert_close(t.weight, kron(torch.eye(C, dtype=torch.float64), w))  # I_C ⊗ W
    torch.testing.assert_close(c.weight, kron(v.T, torch.eye(S, dtype=torch.float64)))  # Vᵀ ⊗ I_S
    assert t.density == pytest.approx(1 / C) and c.density == pytest.approx(1 / S)


def test_rp_layer_is_a_permuted_kronecker_layer_with_the_spectrum_of_w() -> None:
    model = small_smixer(permute=True)
    layer = model.blocks[1].token_mixing
    (effective,) = effective_linears(layer)
    w = layer.mlp.fc.weight.detach()
    j1, j2 = permutation_matrix(layer.permute_in.index), permutation_matrix(layer.permute_out.index)
    jc = commutation_matrix(S, C)
    # J2 (I ⊗ W) J1 on the layer's (row-major) flattening, which is J_c vec(X).
    torch.testing.assert_close(jc @ effective.weight @ jc.T, j2 @ kron_identity(w, C) @ j1)
    assert effective.density == pytest.approx(1 / C)
    assert not torch.equal(effective.weight, kron_identity(w, C))  # the block structure is gone
    sv_effective = torch.linalg.svdvals(effective.weight)
    sv_w = torch.linalg.svdvals(w).repeat_interleave(C)  # each singular value of W, C times
    torch.testing.assert_close(sv_effective, torch.sort(sv_w, descending=True).values)
    # And the module computes exactly that matrix (before σ).
    x = rand(2, S, C)
    branch_pre_act = layer.permute_out(
        torch.nn.functional.linear(layer.permute_in(x.reshape(2, -1)).view(2, C, S), w, layer.mlp.fc.bias).reshape(
            2, -1
        )
    ).view(2, S, C)
    torch.testing.assert_close(vec(branch_pre_act), vec(x) @ effective.weight.T + effective.bias)


@pytest.mark.parametrize(
    "family, kwargs",
    [
        ("s_mixer", {}),
        ("s_mixer", {"permute": True}),
        ("s_mixer", {"permute": [True, False], "tokens": 5}),  # S ≠ S0: the first block's SkipLayer
        ("s_mixer", {"permute": True, "permute_j1": False, "tokens": 5}),  # output-only RP
        ("mlp_mixer", {"gamma": 2, "permute": [False, True], "permute_j1": False}),
        ("mlp_mixer", {"gamma": 2}),
        ("mlp_mixer", {"gamma": 2, "permute": True, "skip_layer": True}),
        ("mlp_mixer", {"token_hidden": 3, "channel_hidden": 7, "permute": [False, True]}),
    ],
)
def test_a_whole_mixer_equals_its_effective_wide_mlp(family: str, kwargs: dict) -> None:
    torch.manual_seed(1)
    common = dict(num_classes=3, image_size=8, in_chans=2, patch_size=2, tokens=S, channels=C, num_blocks=2)
    cls = SMixer if family == "s_mixer" else MLPMixer
    model = cls(**{**common, **kwargs}).double().eval()
    with torch.no_grad():  # a non-zero head, so the logits say something
        model.head.weight.normal_()
        model.head.bias.normal_()
    images = rand(3, 2, 8, 8)
    wide = EffectiveWideMLP(model)
    with torch.no_grad():
        torch.testing.assert_close(wide(images), model(images), rtol=1e-10, atol=1e-10)
    for layer, linears in wide.layers:  # every FC of the wide MLP is m×m-sized, 1/C or 1/S dense
        expected = 1 / layer.channels if layer.axis == "token" else 1 / layer.tokens
        assert all(linear.density <= expected + 1e-12 for linear in linears)


def test_corollary_3_4_linear_s_mixer_is_a_weight_shared_monarch_matrix() -> None:
    model = small_smixer()
    w = model.blocks[1].token_mixing.mlp.fc.weight.detach()  # S×S
    v = model.blocks[1].channel_mixing.mlp.fc.weight.detach().T  # C×C
    x = rand(S, C)
    jc = commutation_matrix(S, C)
    left = kron(torch.eye(S, dtype=torch.float64), v.T)  # L = I_S ⊗ Vᵀ: S blocks of C×C, shared
    right = kron(torch.eye(C, dtype=torch.float64), w)  # R = I_C ⊗ W: C blocks of S×S, shared
    monarch = jc.T @ left @ jc @ right  # M = P L Pᵀ R with P = J_cᵀ
    torch.testing.assert_close(monarch @ vec(x), vec(w @ x @ v))  # the linear S-Mixer H = W X V
    torch.testing.assert_close(monarch, kron(v.T, w))
    # L and R are block diagonal (the Monarch form), and their blocks are all equal (weight sharing).
    for matrix, size in ((left, C), (right, S)):
        blocks = [matrix[i * size : (i + 1) * size, i * size : (i + 1) * size] for i in range(matrix.shape[0] // size)]
        assert all(torch.equal(b, blocks[0]) for b in blocks)
        off_diagonal = matrix.clone()
        for i in range(len(blocks)):
            off_diagonal[i * size : (i + 1) * size, i * size : (i + 1) * size] = 0
        assert torch.count_nonzero(off_diagonal) == 0
