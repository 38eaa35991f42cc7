"""docs/reproductions/rp_regimes.py, the generator of section 0c ("RP in the paper's regimes"): its pairing, interval,
verdicts by the rule fixed before the runs, and the page's table equal to its output."""

from __future__ import annotations

import importlib.util
import math

import pytest

from helpers import ROOT


@pytest.fixture(scope="module")
def regimes():
    spec = importlib.util.spec_from_file_location("rp_regimes", ROOT / "docs" / "reproductions" / "rp_regimes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(arm: str, family: str, seed: int, final: float | None, epochs: int = 200) -> dict:
    return dict(arm=arm, family=family, seed=seed, epochs=epochs, max_epochs=200, final=final, checkpoint_sha256=None)


def curve(arm: str, family: str, seed: int, errors: dict[int, float], gap: float = 0.1) -> list[dict]:
    return [
        dict(arm=arm, family=family, seed=seed, epoch=e, test_error=v, test_loss=1.0 + gap, train_loss=1.0)
        for e, v in errors.items()
    ]


def test_the_interval_is_students_t_on_the_paired_differences(regimes) -> None:
    mean, half, n = regimes.mean_ci([0.04, 0.06])
    # sd = 0.01414, t(1) = 12.706: 12.706 × 0.01414 / √2 = 0.12706
    assert (mean, n) == (pytest.approx(0.05), 2) and half == pytest.approx(0.12706, abs=1e-5)
    assert regimes.t_quantile(2) == 4.303 and regimes.t_quantile(30) == pytest.approx(2.042, abs=2e-3)
    assert math.isnan(regimes.mean_ci([0.05])[1])


@pytest.mark.parametrize(
    "rp, normal, word",
    [
        ((0.43, 0.44), (0.36, 0.37), "holds"),  # +7 points
        ((0.375, 0.385), (0.36, 0.37), "closes"),  # +1.5 < 2 points
        ((0.30, 0.301), (0.36, 0.37), "reverses"),  # −6.5, the interval below 0
    ],
)
def test_each_regime_is_read_by_the_rule(regimes, rp, normal, word) -> None:
    runs = [run("lr0p1", "rp_s_mixer", s, e) for s, e in enumerate(rp)]
    runs += [run("lr0p1", "s_mixer", s, e) for s, e in enumerate(normal)]
    diff = regimes.difference(runs, [], "lr0p1", "rp_s_mixer")
    assert diff["final"] and diff["n"] == 2
    assert regimes.verdict(diff) == word


def test_a_spread_pair_whose_interval_crosses_zero_is_not_a_reversal(regimes) -> None:
    runs = [run("lr0p1", "rp_s_mixer", 0, 0.30), run("lr0p1", "rp_s_mixer", 1, 0.38)]
    runs += [run("lr0p1", "s_mixer", 0, 0.36), run("lr0p1", "s_mixer", 1, 0.36)]  # −6 and +2 points
    assert regimes.verdict(regimes.difference(runs, [], "lr0p1", "rp_s_mixer")) == "closes"


def test_the_output_only_arm_pairs_with_the_c4_s_mixer_by_seed(regimes) -> None:
    runs = [run("c4", "s_mixer", 0, 0.36), run("c4", "s_mixer", 1, 0.37), run("c4", "s_mixer", 2, 0.35)]
    runs += [run("output", "rp_s_mixer", 0, 0.40), run("output", "rp_s_mixer", 1, 0.42)]
    pairs = regimes.pairs(runs, "output", "rp_s_mixer")
    assert [(a["seed"], b["seed"], b["arm"]) for a, b in pairs] == [(0, 0, "c4"), (1, 1, "c4")]
    assert regimes.difference(runs, [], "output", "rp_s_mixer")["mean"] == pytest.approx(0.045)


def test_unfinished_runs_read_provisionally_at_the_last_shared_epoch(regimes) -> None:
    runs = [run("lr0p1", "rp_s_mixer", 0, None, 40), run("lr0p1", "s_mixer", 0, None, 30)]
    curves = curve("lr0p1", "rp_s_mixer", 0, {e: 0.5 for e in range(1, 41)})
    curves += curve("lr0p1", "s_mixer", 0, {e: 0.45 for e in range(1, 31)})
    diff = regimes.difference(runs, curves, "lr0p1", "rp_s_mixer")
    assert (diff["epoch"], diff["final"]) == (30, False) and diff["mean"] == pytest.approx(0.05)
    assert regimes.verdict(diff) == "holds (provisional, epoch 30)"
    rows = regimes.table(runs, curves)
    assert [r["loss gap at 10 / 50 / last"] for r in rows] == ["+0.100 / – / –", "+0.100 / – / –"]
    assert regimes.overall(rows).startswith("pending")


def test_across_regimes_one_closing_regime_names_itself(regimes) -> None:
    rows = [
        {"regime": "App. C.4", "verdict": "holds"},
        {"regime": "(a) output-only RP", "verdict": "holds"},
        {"regime": "(b) Fig. S.6", "verdict": "closes"},
        {"regime": "(c) Fig. S.8", "verdict": "holds (provisional, epoch 9)"},
    ]
    assert regimes.overall(rows) == "not under C.4's recipe; (b) Fig. S.6 closes it"
    for row in rows:
        row["verdict"] = "holds"
    assert regimes.overall(rows) == "not, robust across the paper's recipes"


def test_the_page_shows_the_generators_table() -> None:
    marker = "<!-- rp_regimes.py regimes.md -->\n"
    pages = [p for p in (ROOT / "docs").rglob("*.md") if marker in p.read_text()]
    generated = (ROOT / "docs" / "reproductions" / "rp_regimes" / "regimes.md").read_text()
    assert pages, "no page holds the regimes table"
    for page in pages:
        text = page.read_text()
        start = text.index(marker) + len(marker)
        assert text[start : text.index("<!-- /rp_regimes.py -->", start)] == generated, page
