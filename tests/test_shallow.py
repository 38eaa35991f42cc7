"""Shallow Kronecker and Monarch MLPs (Hayase & Karakida 2024, Sec. 3.3, Fig. 2(d))."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import TEST_CONFIGS, accuracy, error_field, read_json, run_dirs
from mixer_lightning.analysis import singular_values
from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import KronLinear, MonarchLinear, ShallowMLP, create_model, num_params


def commutation(rows: int, cols: int) -> torch.Tensor:
    """J with J vec(X) = vec(Xᵀ) for X ∈ R^{rows×cols}, built entry by entry (column-major vec)."""
    j = torch.zeros(rows * cols, rows * cols, dtype=torch.float64)
    for r in range(rows):
        for c in range(cols):
            j[r * cols + c, c * rows + r] = 1  # vec(Xᵀ)[r·cols + c] = Xᵀ[c, r] = X[r, c] = vec(X)[c·rows + r]
    return j


def vec(matrix: torch.Tensor) -> torch.Tensor:
    return matrix.t().reshape(-1)


class LargestTensor(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("a, b", [(3, 5), (4, 4)])
def test_kron_layer_is_v_kron_w_without_forming_it(a: int, b: int) -> None:
    torch.manual_seed(0)
    layer = KronLinear(a, b).double()
    with torch.no_grad():
        layer.bias.normal_()
    x = torch.randn(7, a * b, dtype=torch.float64)
    explicit = torch.kron(layer.V, layer.W)  # (V ⊗ W) ∈ R^{ab×ab}
    torch.testing.assert_close(layer(x), x @ explicit.t() + layer.bias)
    # vec(W X Vᵀ) = (V ⊗ W) vec(X) with X ∈ R^{b×a}
    X = torch.randn(b, a, dtype=torch.float64)
    torch.testing.assert_close(layer(vec(X)[None])[0] - layer.bias, vec(layer.W @ X @ layer.V.t()))
    with LargestTensor() as probe:
        layer(torch.randn(2, a * b, dtype=torch.float64)).sum().backward()
    assert probe.largest < (a * b) ** 2


@pytest.mark.parametrize("a, b", [(3, 5), (4, 4)])
def test_monarch_layer_is_p_l_pt_r(a: int, b: int) -> None:
    torch.manual_seed(1)
    layer = MonarchLinear(a, b).double()
    with torch.no_grad():
        layer.bias.normal_()
    R = torch.block_diag(*layer.R)  # a blocks of b×b
    L = torch.block_diag(*layer.L)  # b blocks of a×a
    Jc = commutation(b, a)  # Pᵀ = J_c for X ∈ R^{b×a}
    explicit = Jc.t() @ L @ Jc @ R  # eq. 12: M = J_cᵀ L J_c R
    x = torch.randn(6, a * b, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x @ explicit.t() + layer.bias)
    torch.testing.assert_close(layer.effective_weight(), explicit)
    with LargestTensor() as probe:
        layer(torch.randn(2, a * b, dtype=torch.float64)).sum().backward()
    assert probe.largest < (a * b) ** 2
    assert sum(p.numel() for p in (layer.L, layer.R)) == a * b * b + b * a * a


def test_monarch_with_shared_blocks_is_the_kronecker_layer() -> None:
    """Corollary 3.4: a Mixer layer is a Monarch matrix whose diagonal blocks are shared."""
    torch.manual_seed(2)
    kron, monarch = KronLinear(3, 4).double(), MonarchLinear(3, 4).double()
    with torch.no_grad():
        monarch.R.copy_(kron.W.expand(3, 4, 4))
        monarch.L.copy_(kron.V.expand(4, 3, 3))
    torch.testing.assert_close(monarch.effective_weight(), torch.kron(kron.V, kron.W))


def test_kron_singular_values_from_the_structure() -> None:
    torch.manual_seed(3)
    layer = KronLinear(5, 6)
    explicit = torch.linalg.svdvals(torch.kron(layer.V, layer.W).double())
    torch.testing.assert_close(singular_values(layer), explicit)
    monarch = MonarchLinear(4, 4)
    torch.testing.assert_close(singular_values(monarch), torch.linalg.svdvals(monarch.effective_weight().double()))


@pytest.mark.parametrize("family", ["kron_mlp", "monarch_mlp"])
@pytest.mark.parametrize("second_act", [False, True])
def test_shallow_mlp_is_bc_b2_relu_b1_on_the_flat_image(family: str, second_act: bool) -> None:
    torch.manual_seed(4)
    model = create_model(family, num_classes=10, image_size=8, in_chans=1, second_act=second_act).double()
    assert model.factors == (8, 8) and model.features == 64
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    flat = x.flatten(1)
    b1, b2 = (layer.effective_weight() for layer in model.structured_layers())
    hidden = torch.relu(flat @ b1.t() + model.b1.bias) @ b2.t() + model.b2.bias
    if second_act:
        hidden = torch.relu(hidden)
    torch.testing.assert_close(model(x), model.head(hidden))


def test_defaults_and_sizes() -> None:
    mnist = create_model("kron_mlp", num_classes=10, image_size=28, in_chans=1)
    assert mnist.factors == (28, 28)
    assert num_params(mnist, exclude_head=True) == 2 * (28 * 28 + 28 * 28 + 784)  # V, W, bias per layer
    monarch = create_model("monarch_mlp", num_classes=10, image_size=28, in_chans=1)
    assert num_params(monarch, exclude_head=True) == 2 * (2 * 28**3 + 784)
    rectangular = ShallowMLP(image_size=4, in_chans=3, structure="monarch", factors=[6, 8])
    assert rectangular(torch.randn(2, 3, 4, 4)).shape == (2, 10)
    cifar = create_model("monarch_mlp", num_classes=10, image_size=32, in_chans=3)  # n = 3072 is not a square
    assert cifar.factors == (48, 64) and cifar(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    for dtype in (torch.bfloat16, torch.float64):
        out = create_model("monarch_mlp", num_classes=3, image_size=8, in_chans=1).to(dtype)(
            torch.randn(2, 1, 8, 8, dtype=dtype)
        )
        assert out.dtype == dtype


def test_factors_must_multiply_to_the_input_size() -> None:
    with pytest.raises(ConfigError) as error:
        ShallowMLP(image_size=8, in_chans=1, factors=(5, 5))
    assert error.value.field == "factors"


@pytest.mark.parametrize("family", ["kron", "monarch"])
def test_fit_then_test_through_the_cli(family: str) -> None:
    config = str(TEST_CONFIGS / f"shallow_{family}_digits.yaml")
    main(["fit", "--config", config])
    (run,) = run_dirs(f"shallow_{family}_digits")
    best = run / "checkpoints" / "best.ckpt"
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)])
    metrics = read_json(run_dirs(f"shallow_{family}_digits")[-1] / "test_metrics.json")
    assert metrics["test/acc1"] == pytest.approx(accuracy(best, run / "config.yaml"))
    assert metrics["test/acc1"] <= metrics["test/acc5"]
    hparams = torch.load(best, weights_only=False)["hyper_parameters"]
    assert (hparams["image_size"], hparams["in_chans"]) == (8, 1)


@pytest.mark.parametrize("flag, value", [("factors", "[4, 8]"), ("factors", "[64]"), ("structure", "butterfly")])
def test_bad_arguments_are_one_line(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(TEST_CONFIGS / "shallow_kron_digits.yaml")  # 4·8 = 32 is not the input size n = 64
    assert error_field(capsys, ["fit", "--config", config, f"--model.net.{flag}", value]) == f"model.net.{flag}"
