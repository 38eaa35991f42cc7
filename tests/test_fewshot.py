"""`mixer fewshot`: linear few-shot accuracy of frozen pre-logit features (Mixer paper Sec. 3; the
big_vision ``fewshot_lsr`` protocol)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from helpers import error_field
from helpers.trained import DATA_CONFIG
from mixer_lightning.analysis.fewshot import L2_GRID, RidgeSolver, draw_shots
from mixer_lightning.cli import main
from mixer_lightning.commands.fewshot import parse_l2


def fewshot(capsys: pytest.CaptureFixture, *args: str) -> dict:
    capsys.readouterr()
    main(["fewshot", *args, "--config", DATA_CONFIG, "--device", "cpu", "--json"])
    return json.loads(capsys.readouterr().out)


def test_mixer_few_shot_accuracy_with_lambda_chosen_on_held_out_training_images(trained, capsys) -> None:
    result = fewshot(capsys, "--ckpt", trained("mixer"), "--shots", "1,5", "--seeds", "0,1,2")
    assert (result["model"], result["features"], result["classes"]) == ("MLPMixer", 16, 10)
    assert (result["train_images"], result["test_images"]) == (1438, 359)  # digits: 80/20 split
    one, five = result["results"]
    for r in (one, five):
        assert r["l2"] == "auto" and r["holdout_per_class"] == 10 and [run["seed"] for run in r["runs"]] == [0, 1, 2]
        assert all(run["l2"] in L2_GRID and 0 <= run["holdout_accuracy"] <= 1 for run in r["runs"])
        assert r["accuracy"] == pytest.approx(np.mean([run["accuracy"] for run in r["runs"]]))
    assert five["accuracy"] > 0.3  # well above chance (0.1) after a few steps of training
    assert five["accuracy"] > one["accuracy"]


def test_fixed_lambda_and_text_output(trained, capsys) -> None:
    sw_mlp = trained("sw_mlp")
    result = fewshot(capsys, "--ckpt", sw_mlp, "--shots", "5", "--seeds", "0", "--l2", "2**10")
    (r,) = result["results"]
    assert result["features"] == 128 and r["l2"] == 1024.0 and r["runs"][0]["holdout_accuracy"] is None
    main(["fewshot", "--ckpt", sw_mlp, "--config", DATA_CONFIG, "--device", "cpu", "--shots", "5", "--seeds", "0,1"])
    out = capsys.readouterr().out
    assert "5-shot linear accuracy:" in out and "over seeds 0,1 (λ chosen on 10 held-out training images" in out


@pytest.mark.parametrize(
    "args, field",
    [
        (["--shots", "200"], "shots"),  # class 0 has 150 training images
        (["--shots", "0"], "shots"),
        (["--l2", "-1"], "l2"),
        (["--l2", "lots"], "l2"),
        (["--holdout", "0"], "holdout"),  # λ chosen on no held-out images
        (["--holdout", "-1"], "holdout"),
    ],
)
def test_bad_fewshot_arguments(args: list[str], field: str, trained, capsys) -> None:
    mixer = trained("mixer")
    capsys.readouterr()
    assert field in error_field(capsys, ["fewshot", "--ckpt", mixer, "--config", DATA_CONFIG, *args])


@pytest.mark.parametrize("examples, dims", [(60, 8), (12, 40)])  # XᵀX and XXᵀ branches
def test_ridge_solution_is_sklearn_ridge_on_whitened_features_with_a_bias_column(examples: int, dims: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(examples, dims, dtype=torch.float64) * torch.linspace(0.5, 3, dims) + 2.0
    y = torch.arange(examples) % 4
    solver = RidgeSolver.fit(x, y, num_classes=4)
    whitened = (x - x.mean(0)) / (x.std(0, unbiased=False) + 1e-5)
    design = torch.cat([whitened, torch.full((examples, 1), 100.0, dtype=torch.float64)], dim=1)
    targets = 2.0 * torch.nn.functional.one_hot(y, 4).double() - 1.0
    for l2 in (2.0**-3, 1.0, 2.0**10):
        expected = Ridge(alpha=l2, fit_intercept=False, solver="cholesky").fit(design.numpy(), targets.numpy()).coef_.T
        np.testing.assert_allclose(solver.weights(l2).numpy(), expected, rtol=1e-6, atol=1e-8)


def test_shots_are_per_class_seeded_and_disjoint_from_the_held_out_images() -> None:
    labels = torch.arange(200) % 4
    chosen, held = draw_shots(labels, 4, shots=5, holdout=10, seed=3)
    assert len(chosen) == 20 and len(held) == 40 and not set(chosen) & set(held)
    assert [int((labels[chosen] == c).sum()) for c in range(4)] == [5, 5, 5, 5]
    assert draw_shots(labels, 4, 5, 10, seed=3) == (chosen, held)
    assert draw_shots(labels, 4, 5, 10, seed=4)[0] != chosen
    assert parse_l2("auto") == "auto" and parse_l2("2^10") == 1024.0 and parse_l2("1,2**-2") == [1.0, 0.25]
