"""The width/connection toolkit and `mixer width`: every list the paper gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixer_lightning.cli import main
from mixer_lightning.errors import ConfigError
from mixer_lightning.models import create_model
from mixer_lightning.width import model_connections, omega, parse_int_expression, solve_tokens


def width_json(capsys: pytest.CaptureFixture, *args: str) -> dict:
    main(["width", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def pairs(result: dict) -> list[tuple[int, int]]:
    return [(p["C"], p["S"]) for p in result["pairs"]]


def test_figure_5_pairs(capsys: pytest.CaptureFixture) -> None:
    assert pairs(width_json(capsys, "--omega", "2**18", "--gamma", "1")) == [
        (16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)
    ]  # fmt: skip
    assert pairs(width_json(capsys, "--omega", "2^21")) == [
        (16, 504), (32, 346), (64, 226), (226, 64), (346, 32), (504, 16)
    ]  # fmt: skip
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
    main(["width", "--omega", "2**18", "--plot", "fig3.png"])
    out = capsys.readouterr().out
    assert "optimum: S* = C* = 64, m_max = 4,096" in out
    assert "1-p = 0.9: m = 1,619" in out
    assert Path("fig3.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--omega", "-5"], "mixer: error: omega: must be positive, got -5"),
        (["--omega", "two"], "mixer: error: omega: cannot read 'two' as an integer"),
        (["--omega", "2**18", "--channels", "16,x"], "mixer: error: channels: cannot read '16,x'"),
        (["--omega", "2**18", "--sparsity", "1.5"], "mixer: error: sparsity: 1-p must be in [0, 1), got 1.5"),
        (["--omega", "100", "--channels", "64"], "mixer: error: omega: 100 is unreachable with channels=64"),
    ],
)
def test_bad_values(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["width", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and len(err.splitlines()) == 1


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
