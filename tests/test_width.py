"""The width/connection toolkit and `mixer width`: every list the paper gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import error_field
from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import create_model
from mixer_lightning.width import (
    gamma_at_width,
    model_connections,
    omega,
    parse_int_expression,
    parse_real_expression,
    solve_tokens,
)


def width_json(capsys: pytest.CaptureFixture, *args: str) -> dict:
    main(["width", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def pairs(result: dict) -> list[tuple[int, int]]:
    return [(p["C"], p["S"]) for p in result["pairs"]]


def test_figure_5_pairs(capsys: pytest.CaptureFixture) -> None:
    assert pairs(width_json(capsys, "--omega", "2**18", "--gamma", "1")) == [
        (16, 173),
        (32, 113),
        (48, 83),
        (83, 48),
        (113, 32),
        (173, 16),
    ]
    assert pairs(width_json(capsys, "--omega", "2^21")) == [
        (16, 504),
        (32, 346),
        (64, 226),
        (226, 64),
        (346, 32),
        (504, 16),
    ]
    assert pairs(width_json(capsys, "--omega", "134217728")) == [(128, 1386), (256, 904), (904, 256), (1386, 128)]


def test_figure_4_pairs_and_the_optimum(capsys: pytest.CaptureFixture) -> None:
    result = width_json(capsys, "--omega", "2**19", "--gamma", "2")
    assert [p["S"] for p in result["pairs"]] == [360, 252, 203, 173, 152, 136, 124, 113, 104, 96, 89, 83, 64]
    assert [p["C"] for p in result["pairs"]] == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 64]
    assert result["optimum"]["S"] == result["optimum"]["C"] == pytest.approx(64)  # (Ω/γ)^{1/3} = 2^6
    assert result["optimum"]["m"] == pytest.approx(4096)
    # m = S·C peaks at the optimum, where p = Ω/(γm²) is smallest
    best = max(result["pairs"], key=lambda p: p["m"])
    assert (best["C"], best["S"]) == (64, 64) and best["p"] == min(p["p"] for p in result["pairs"])
    for p in result["pairs"]:
        assert p["m"] == p["C"] * p["S"]
        assert p["p"] == pytest.approx(p["connections"] / (2 * p["m"] ** 2))


def test_sw_mlp_widths(capsys: pytest.CaptureFixture) -> None:
    result = width_json(capsys, "--omega", "2**18", "--channels", "16,32,48")
    assert [row["m"] for row in result["sw_mlp"]] == [540, 612, 724, 935, 1619]  # App. C.4 (ii)
    assert [row["sparsity"] for row in result["sw_mlp"]] == [0.1, 0.3, 0.5, 0.7, 0.9]
    result = width_json(capsys, "--omega", "2**18", "--sparsity", "0.5")
    assert result["sw_mlp"] == [{"sparsity": 0.5, "p": 0.5, "m": 724}]


def test_imagenet_sweep() -> None:
    assert omega(196, 768, 4) == 290_217_984  # Mixer-B/16
    solved = {p: solve_tokens(290_217_984, 3 * p * p, 4) for p in (7, 8, 14, 16, 28, 32)}
    assert solved[16] == 196  # the baseline point of the sweep is Mixer-B/16 itself
    # "approximately satisfies" (App. C.5): rounding S to an integer moves Ω by at most 2% (P = 32, S = 15)
    assert all(abs(omega(s, 3 * p * p, 4) - 290_217_984) / 290_217_984 < 0.02 for p, s in solved.items())


def test_table_and_plot(capsys: pytest.CaptureFixture) -> None:
    main(["width", "--omega", "2**18"])
    out = capsys.readouterr().out
    assert "optimum: S* = C* = 64, m_max = 4,096" in out
    assert "1-p = 0.9: m = 1,619" in out


def test_figure_3_m_and_p_against_c(capsys: pytest.CaptureFixture) -> None:
    """Fig. 3: m and p against C at Ω = 10^8, γ = 1: m peaks at C* = S* = Ω^{1/3} ≈ 464, where p is least."""
    result = width_json(capsys, "--omega", "10**8", "--gamma", "1", "--plot", "fig3.png")
    best = result["optimum"]
    assert best["C"] == pytest.approx(1e8 ** (1 / 3)) and best["m"] == pytest.approx(1e8 ** (2 / 3), rel=1e-6)
    assert best["p"] == pytest.approx(1e8 / best["m"] ** 2)
    assert max(p["m"] for p in result["pairs"]) < best["m"] and min(p["p"] for p in result["pairs"]) > best["p"]
    assert Path("fig3.png").stat().st_size > 10_000
    # a plot of the user's is not replaced unless told (it was, silently)
    assert error_field(capsys, ["width", "--omega", "10**8", "--gamma", "1", "--plot", "fig3.png"]) == "plot"
    Path("fig3.png").write_bytes(b"mine")
    width_json(capsys, "--omega", "10**8", "--gamma", "1", "--plot", "fig3.png", "--overwrite")
    assert Path("fig3.png").stat().st_size > 10_000


def test_gamma_at_fixed_width_eq_s46(capsys: pytest.CaptureFixture) -> None:
    """App. D.3: at fixed (Ω, m), γ = 2Ω/(m(C + m/C)) is a single peak at C* = S* = √m, γ_max = Ω/(m√m)."""
    result = width_json(capsys, "--omega", "2**20", "--width", "4096", "--plot", "s46.png")
    grid = result["gamma_grid"]
    assert [(r["C"], r["S"]) for r in grid] == [(2**k, 4096 // 2**k) for k in range(2, 11)]
    assert result["optimum"] == {"S": 64.0, "C": 64.0, "gamma": 4.0}  # 2^20 / (4096 · 64)
    peak = max(grid, key=lambda r: r["gamma"])
    assert (peak["C"], peak["S"], peak["gamma"]) == (64, 64, 4.0)
    for row in grid:
        assert omega(row["S"], row["C"], row["gamma"]) == pytest.approx(2**20)  # Ω is kept at every C
        assert row["connections"] == pytest.approx(2**20, rel=0.02)  # with D = γS, γC rounded as built
        mirror = next(r for r in grid if r["C"] == row["S"])
        assert mirror["gamma"] == pytest.approx(row["gamma"])  # (C, S) and (S, C) have the same γ
    assert gamma_at_width(2**20, 4096, 16) == pytest.approx(2 * 2**20 / (4096 * (16 + 256)))
    assert Path("s46.png").stat().st_size > 10_000
    main(["width", "--omega", "2**20", "--width", "4096", "--channels", "32,64"])
    out = capsys.readouterr().out
    assert "optimum: C* = S* = √m = 64, γ_max = Ω/(m√m) = 4" in out and "3.2000" in out


def test_expressions() -> None:
    assert parse_real_expression("2**-6", "densities") == parse_real_expression("1/64", "densities") == 2**-6
    assert parse_real_expression("2^-6", "d") == 2**-6 and parse_real_expression("1e-3", "d") == 0.001
    for bad in ("1/0", "nan", "10**5000", "__import__('os')", "2**"):
        with pytest.raises(ConfigError) as error:
            parse_real_expression(bad, "d")
        assert error.value.field == "d"
    with pytest.raises(ConfigError) as error:
        parse_int_expression("(2**512)**512", "omega")  # refused before it is computed
    assert error.value.field == "omega"


@pytest.mark.parametrize(
    "args, field",
    [
        (["--omega", "-5"], "omega"),
        (["--omega", "two"], "omega"),
        (["--omega", "2**18", "--channels", "16,x"], "channels"),
        (["--omega", "2**18", "--sparsity", "1.5"], "sparsity"),
        (["--omega", "100", "--channels", "64"], "omega"),
        (["--omega", "2**100"], "omega"),
        (["--omega", "2**2000"], "omega"),
        (["--omega", "2**18", "--channels", "16,,32"], "channels"),
        (["--omega", "2**18", "--channels", "16,16"], "channels"),
        (
            ["--omega", "2**20", "--width", "64", "--channels", "3"],
            "channels",
        ),
        (["--omega", "2**20", "--width", "64", "--sparsity", "0.5"], "sparsity"),
    ],
)
def test_bad_values(args: list[str], field: str, capsys: pytest.CaptureFixture) -> None:
    assert error_field(capsys, ["width", *args]) == field


def test_parse_int_expression() -> None:
    assert parse_int_expression("2**18") == parse_int_expression("2^18") == 262144
    assert parse_int_expression("3*2**20") == 3 * 2**20
    with pytest.raises(ConfigError):
        parse_int_expression("__import__('os')")
    with pytest.raises(ConfigError):
        parse_int_expression("2**100000")


def test_connections_of_a_built_model() -> None:
    model = create_model("s_mixer", image_size=32, patch_size=4, tokens=64, channels=64, num_blocks=3)
    counts = model_connections(model)
    assert counts["layers"] == [64**3] * 6  # S²C and C²S per layer
    assert counts["omega"] == omega(64, 64) == 2**18
    mixer = create_model("mlp_mixer", image_size=32, patch_size=4, channels=64, omega=2**19, gamma=2, num_blocks=3)
    assert model_connections(mixer)["omega"] == 2**19  # γ(C²S + CS²)/2 with D = γS, γC
    sw = create_model("sw_mlp", image_size=32, patch_size=4, channels=48, num_blocks=3, omega=2**19, gamma=2)
    counts = model_connections(sw)
    assert len(counts["layers"]) == 6  # two sparse layers per MLP block
    assert abs(counts["omega"] - 2**19) / 2**19 < 0.01  # Bernoulli(p) masks: Ω connections on average
