"""`mixer spectrum` (Hayase & Karakida Sec. 4.3, Fig. 4 right) and the spectrum helpers behind it and
behind the SpectrumMonitor callback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from helpers import error_field
from mixer_lightning.analysis.effective import effective_linears
from mixer_lightning.analysis.spectrum import (
    d1_width_density,
    mixer_pair,
    mixing_layer_spectra,
    mp_singular_value_density,
    normalised_sparse_singular_values,
    singular_values,
    sparse_singular_values,
    spectral_norm,
    sw_mlp_weight,
)
from mixer_lightning.cli import main
from mixer_lightning.models import MLPMixer, SMixer
from mixer_lightning.models.sparse import SparseLinear, bernoulli_pattern


def spectrum(capsys: pytest.CaptureFixture, *args: str) -> dict:
    main(["spectrum", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_sw_mlp_sigma_max_grows_with_width_at_fixed_omega(capsys: pytest.CaptureFixture) -> None:
    """The paper's claim (eq. 17-18, Fig. 4 right): at fixed Ω the SW-MLP's σ_max grows with m, above
    the Mixer's 1 + √γ, roughly as eq. (17) predicts."""
    result = spectrum(
        capsys,
        "--omega",
        "2**14",
        "--gamma",
        "2",
        "--widths",
        "256,512,1024,2048",
        "--seeds",
        "0,1,2",
        "--plot",
        "spectrum.png",
    )
    edge = 1 + math.sqrt(2)
    assert result["mixer"]["mp_edge"] == pytest.approx(edge)
    rows = result["sw_mlp"]
    assert [r["m"] for r in rows] == [256, 512, 1024, 2048]
    sigmas = [r["sigma_max"] for r in rows]
    assert all(b > a + 0.05 for a, b in zip(sigmas, sigmas[1:], strict=False)), sigmas
    assert sigmas[-1] > 1.25 * edge  # m = 2048: p·m = 4 non-zeros per column
    for r in rows:
        assert r["p"] == pytest.approx(2**14 / (2 * r["m"] ** 2))  # Ω = γ·p·m² (App. D.1)
        assert r["connections"] == pytest.approx(2**14, rel=0.05)
        assert r["sigma_max"] == pytest.approx(r["eq17"], rel=0.1)  # eq. (17) up to its O(1/q⁴)
    assert Path("spectrum.png").stat().st_size > 10_000


def test_mixer_sigma_max_stays_at_the_marchenko_pastur_edge(capsys: pytest.CaptureFixture) -> None:
    """The Mixer of the same Ω and width: its γn×n N(0, 1/n) weights have σ_max ≈ 1 + √γ whatever m;
    the default grid includes SW-MLPs wider than any Mixer (2·m_max, 4·m_max), above the edge."""
    result = spectrum(capsys, "--omega", "2**17", "--gamma", "2", "--seeds", "0,1")
    edge = result["mixer"]["mp_edge"]
    points = result["mixer"]["points"]
    assert [(p["S"], p["C"]) for p in points] == [(83, 16), (50, 32), (41, 40)]  # C = 16, 32 and C* ≈ 40
    for p in points:  # n = 16 … 83: within 10% (a finite n's σ_max sits a little below the n → ∞ edge)
        assert p["sigma_max_token"] == pytest.approx(edge, rel=0.1)
        assert p["sigma_max_channel"] == pytest.approx(edge, rel=0.1)
    widest = max(result["sw_mlp"], key=lambda r: r["m"])
    assert widest["m"] == round(4 * result["mixer"]["m_max"]) and widest["sigma_max"] > 1.1 * edge
    assert all(r["sigma_max"] > edge - 0.05 for r in result["sw_mlp"])


def test_full_spectra_and_text_output(capsys: pytest.CaptureFixture) -> None:
    result = spectrum(capsys, "--omega", "2**12", "--gamma", "1", "--widths", "128,256", "--seeds", "0", "--all")
    for row in result["sw_mlp"]:
        values = row["singular_values"]
        assert len(values) == row["m"] and values == sorted(values, reverse=True)
        assert values[0] == pytest.approx(row["sigma_max"])
    main(
        [
            "spectrum",
            "--omega",
            "2**12",
            "--gamma",
            "1",
            "--widths",
            "128,256",
            "--seeds",
            "0",
            "--all",
            "--plot",
            "s1.png",
        ]
    )
    out = capsys.readouterr().out
    assert "Marchenko–Pastur edge 1 + √γ = 2.0000" in out and "Plot written to s1.png" in out
    assert Path("s1.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, field",
    [
        (["--omega", "2**14", "--widths", "64"], "widths"),  # narrower than a dense layer with Ω connections
        (["--omega", "lots"], "omega"),
        (["--omega", "2**100"], "omega"),
        (["--omega", "2**14", "--gamma", "0.5"], "gamma"),
        (["--omega", "2**14", "--widths", "128,x"], "widths"),
        (["--omega", "2**14", "--seeds", "a"], "seeds"),
        (["--omega", "2**14", "--seeds", "0,,1"], "seeds"),
        (["--omega", "10**3", "--a", "-1"], "a"),
        (["--omega", "10**3", "--a", "1", "--trials", "0"], "trials"),
        (["--omega", "10**3", "--a", "1", "--trials", "3", "--seeds", "0"], "trials"),
        (["--omega", "10**3", "--a", "1", "--gamma", "2"], "gamma"),
        (["--omega", "10**3", "--a", "1", "--widths", "64"], "a"),
        (["--omega", "2**14", "--widths", "2048", "--all", "--max_entries", "1000"], "max_entries"),
    ],
)
def test_bad_spectrum_arguments(args: list[str], field: str, capsys: pytest.CaptureFixture) -> None:
    assert field in error_field(capsys, ["spectrum", *args])


def test_figure_s1_lambda_max_grows_with_the_scaling_index(capsys: pytest.CaptureFixture) -> None:
    """App. D.1 (Fig. S.1 right): at Ω = 10^3, m = Ω^((1+a)/2), p = Ω^(-a); the normalised λ_max grows
    with a, from about 2 (a dense Gaussian W, the Mixers' case) at a = 0."""
    result = spectrum(capsys, "--omega", "10**3", "--a", "0,0.5,1,1.5", "--trials", "5")
    rows = result["scaling"]
    assert [(r["m"], round(r["p"], 6)) for r in rows] == [(32, 1.0), (178, 0.031623), (1000, 0.001), (5623, 3.2e-05)]
    sigmas = [r["lambda_max"] for r in rows]
    assert all(b > a + 0.2 for a, b in zip(sigmas, sigmas[1:], strict=False)), sigmas
    assert rows[0]["lambda_max"] == pytest.approx(2.0, abs=0.2) and rows[-1]["lambda_max"] > 6
    assert all(r["connections"] == pytest.approx(1000, rel=0.1) for r in rows)  # m²p = Ω
    assert [r["zero_fraction"] > 0.8 for r in rows] == [False, False, False, True]  # most rows of Z are empty
    for r in rows:  # a probability density over the singular values (zeros included)
        edges, density = r["histogram"]["edges"], r["histogram"]["density"]
        assert sum(d * (b - a) for d, a, b in zip(density, edges, edges[1:], strict=False)) == pytest.approx(1.0)


def test_figure_s1_centre_at_the_papers_setting(capsys: pytest.CaptureFixture) -> None:
    """Fig. S.1 centre: a = 1.5, Ω = 10^3, 50 trials; the normalised spectrum has mean λ² = 1."""
    main(["spectrum", "--omega", "10**3", "--a", "1.5", "--trials", "50", "--plot", "s1.png"])
    out = capsys.readouterr().out
    assert "50 trials" in out and "5,623" in out and "Plot written to s1.png" in out
    assert Path("s1.png").stat().st_size > 20_000
    torch.manual_seed(0)
    draw = normalised_sparse_singular_values(1e3, 1.5)
    assert float((draw["values"] ** 2).sum()) / draw["m"] == pytest.approx(1.0)  # tr(Q/c)/m = 1


def test_normalised_singular_values_by_blocks_equal_the_dense_svd() -> None:
    for omega, a in ((300, 0.8), (100, 1.2), (200, 0.0)):
        torch.manual_seed(3)
        blocks = normalised_sparse_singular_values(omega, a)
        torch.manual_seed(3)  # the same draw, as a dense m×m matrix
        m, p = d1_width_density(omega, a)
        row, col = bernoulli_pattern(m, m, min(1.0, p))
        z = torch.zeros(m, m, dtype=torch.float64)
        z[row, col] = torch.randn(row.numel(), dtype=torch.float64)
        dense = torch.linalg.svdvals(z) / torch.sqrt(torch.diagonal(z @ z.T).mean())
        ours = torch.cat([blocks["values"], torch.zeros(blocks["zeros"], dtype=torch.float64)])
        torch.testing.assert_close(torch.sort(ours, descending=True).values, dense, rtol=0, atol=1e-10)


def test_sparse_lanczos_matches_dense_svd_and_the_model_draw() -> None:
    torch.manual_seed(1)
    weight = sw_mlp_weight(300, 0.05, 2.0)
    torch.manual_seed(1)
    layer = SparseLinear(300, 600, 0.05, bias=False, init="spectral", init_width=300)
    torch.testing.assert_close(weight.to_dense(), layer.effective_weight().detach())  # the model's own draw
    exact = torch.linalg.svdvals(weight.to_dense().double())
    torch.testing.assert_close(sparse_singular_values(weight, k=3), exact[:3], rtol=1e-6, atol=0)


def test_mixing_layer_spectrum_is_w_repeated_without_the_wide_matrix() -> None:
    torch.manual_seed(0)
    s_mixer = SMixer(
        num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=5, num_blocks=2, permute=[False, True]
    )
    for layer in s_mixer.mixing_layers():  # normal and RP: permutations keep the singular values
        dense = torch.linalg.svdvals(effective_linears(layer)[0].weight)
        torch.testing.assert_close(singular_values(layer), dense[: len(singular_values(layer))])
    mixer = MLPMixer(num_classes=3, image_size=8, in_chans=1, patch_size=2, channels=4, gamma=2, num_blocks=1)
    for layer in mixer.mixing_layers():
        spectra = mixing_layer_spectra(layer)
        for name, linear in zip(("fc1", "fc2"), effective_linears(layer), strict=True):
            dense = torch.linalg.svdvals(linear.weight)
            torch.testing.assert_close(spectra[name], dense[: len(spectra[name])])
        with pytest.raises(TypeError, match="mixing_layer_spectra"):
            singular_values(layer)


def test_spectral_norm_exact_and_by_power_iteration() -> None:
    torch.manual_seed(0)
    sparse = SparseLinear(200, 400, 0.05)
    exact = float(torch.linalg.svdvals(sparse.effective_weight().detach().double())[0])
    assert spectral_norm(sparse) == pytest.approx(exact, rel=1e-5)
    state: dict = {}
    estimates = [spectral_norm(sparse, state, exact_max_entries=0, iterations=100) for _ in range(5)]
    assert all(e <= exact * (1 + 1e-5) for e in estimates)  # a lower bound, tightening with warm starts
    assert estimates[-1] == pytest.approx(exact, rel=1e-3)
    linear = torch.nn.Linear(30, 60)
    assert spectral_norm(linear) == pytest.approx(
        float(torch.linalg.svdvals(linear.weight.detach().double())[0]), rel=1e-5
    )


def test_mixer_pair_and_marchenko_pastur_density() -> None:
    s, c = mixer_pair(2**18, 173 * 16, 1.0)
    assert (round(s), round(c)) == (173, 16)
    assert mixer_pair(2**18, 5000, 1.0) is None  # wider than m_max = 4096
    grid = torch.linspace(0, 3, 30001, dtype=torch.float64)
    density = mp_singular_value_density(grid, 2.0)
    assert float(torch.trapezoid(density, grid)) == pytest.approx(1.0, abs=1e-3)
    assert float(grid[density > 0].max()) == pytest.approx(1 + math.sqrt(2), abs=1e-3)
