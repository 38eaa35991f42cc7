"""The statistics behind the findings page's verdicts (docs/reproductions.md; the appendix's "At the paper's schedule")
(`docs/reproductions/paper_schedule.py`), on runs whose curves are known: each claim's statistic says
what it should, and is left undefined (not 0 or nan in the table) where the grid cannot show it yet."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from helpers.fakedata import write_hf


@pytest.fixture(scope="module")
def schedule():
    spec = importlib.util.spec_from_file_location(
        "paper_schedule", ROOT / "docs" / "reproductions" / "paper_schedule.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(family: str, C: int, S: int, errors: dict[int, float], seed: int = 0, final: float | None = None) -> dict:
    return {
        "item": "fig5",
        "omega_exp": 14,
        "family": family,
        "point": f"C{C}_S{S}",
        "C": C,
        "S": S,
        "m": C * S,
        "L": None,
        "seed": seed,
        "epochs": max(errors),
        "error_curve": errors,
        "final": final,
    }


# (C, S) of the Ω = 2^14 grid: the C < S side, S ≈ C, the C > S side
GRID = [(8, 60), (16, 38), (25, 26), (38, 16), (60, 8)]


def test_a_grid_seen_from_one_side_leaves_the_s_equals_c_statistics_undefined(schedule) -> None:
    runs = [run("s_mixer", C, S, {200: e}) for (C, S), e in zip(GRID[:3], (0.40, 0.37, 0.38), strict=True)]
    (row,) = schedule.fig5_claims(runs, [200])
    # S = C minus the better end needs both ends: it read 0.0 when the grid's last point was the centre
    assert row["centre_minus_best_extreme_pts"] is None
    assert row["spearman_C_ge_S"] is None  # one point on that side: read nan
    assert row["spearman_C_le_S"] == -0.5 and row["best_C"] == 16 and row["rp_points"] == 0
    # reached past S = C but not to the grid's C > S end (C = 60 queued): still undefined
    runs += [run("s_mixer", 38, 16, {200: 0.39}), {**run("s_mixer", 60, 8, {1: 0.9}), "error_curve": {}, "epochs": 0}]
    (row,) = schedule.fig5_claims(runs, [200])
    assert row["centre_minus_best_extreme_pts"] is None and row["best_C"] == 16


def test_the_claims_on_a_whole_grid_at_two_seeds(schedule) -> None:
    normal = {(8, 60): 0.41, (16, 38): 0.38, (25, 26): 0.36, (38, 16): 0.37, (60, 8): 0.39}
    runs = [
        run("s_mixer", C, S, {100: e + 0.02, 200: e + 0.01 * seed}, seed=seed)
        for (C, S), e in normal.items()
        for seed in (0, 1)
    ]
    runs += [run("rp_s_mixer", C, S, {100: e + 0.03, 200: e + 0.04}) for (C, S), e in normal.items()]
    # the SW-MLP arm (no C, S): better with m at 200 epochs, worse with m at 100
    for m, e100, e200 in ((135, 0.40, 0.43), (181, 0.41, 0.42), (405, 0.42, 0.41)):
        runs.append(run("sw_mlp", 0, 0, {100: e100, 200: e200}) | {"C": None, "S": None, "m": m, "point": f"m{m}"})
    at_100, at_200 = schedule.fig5_claims(runs, [100, 200])
    assert schedule.fig5_claims(runs[::-1], [200])[0]["spearman_m_error"] == at_200["spearman_m_error"]
    assert (at_200["points"], at_200["seeds"], at_200["best_C"]) == (5, 2, 25)
    # S = C (0.365 mean of two seeds) minus the better end (C = 60: 0.395): -3 points, S = C wins
    assert at_200["centre_minus_best_extreme_pts"] == pytest.approx(-3.0)
    # Mirror pairs share m (8·60 = 60·8): tied ranks are averaged, so ρ(m, error) = -9/√90, whatever order
    # the pair comes in (ranked one after the other, it was -1.0 or -0.84 by the order of the runs)
    assert at_200["spearman_m_error"] == pytest.approx(-9 / math.sqrt(90), abs=1e-3)
    assert at_200["spearman_C_le_S"] == -1.0
    assert at_200["spearman_C_ge_S"] is None  # two points on the C > S side (S = 26 > C = 25): too few
    assert at_200["rp_minus_normal_mean_pts"] == pytest.approx(3.5) and at_200["rp_points"] == 5
    assert at_100["rp_minus_normal_mean_pts"] == pytest.approx(1.0) and at_100["seeds"] == 2
    # the RP S-Mixer's own width trend (one seed each, in the normal one's order) and the SW-MLP's
    assert at_200["rp_spearman_m_error"] == pytest.approx(-9 / math.sqrt(90), abs=1e-3)
    assert (at_200["rp_spearman_C_le_S"], at_200["rp_spearman_C_ge_S"]) == (-1.0, None)
    assert (at_200["sw_spearman_m_error"], at_100["sw_spearman_m_error"]) == (-1.0, 1.0)
    # Fig. 6's margin beside its noise: twice the largest seed sd of S = C and the two ends (each √2 · 0.5 points)
    assert at_200["centre_noise_pts"] == pytest.approx(2 * math.sqrt(2) * 0.5, abs=0.01)
    points = schedule.by_point([r for r in runs if r["family"] == "s_mixer"], 200)
    mean, sd, n = points[(25, 26, 650)]
    assert (mean, n) == (pytest.approx(0.365), 2) and sd == pytest.approx(math.sqrt(2) * 0.005)


def test_the_claims_after_every_epoch_are_over_the_finished_runs(schedule, tmp_path: Path) -> None:
    """Item 5 (at which epoch a claim appears): the statistics after every epoch that every finished run
    logged; a seed still running stays out (its curve would change the mean's make-up part way)."""
    normal = {(8, 60): 0.41, (16, 38): 0.38, (25, 26): 0.36, (38, 16): 0.37, (60, 8): 0.39}
    runs = [
        run("s_mixer", C, S, {1: 0.6, 2: 0.5 + e / 10, 3: e}, final=e) | {"seed": 0} for (C, S), e in normal.items()
    ]
    runs += [run("rp_s_mixer", C, S, {1: 0.6, 2: 0.6, 3: e + 0.05}, final=e + 0.05) for (C, S), e in normal.items()]
    runs.append(run("s_mixer", 25, 26, {1: 0.9, 2: 0.9}, seed=1))  # running: not counted
    rows = schedule.claims_by_epoch(runs)
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    assert [row["seeds"] for row in rows] == [1, 1, 1]
    assert [row["best_C"] for row in rows] == [8, 25, 25]  # epoch 1: all tied, the first C
    assert [row["rp_minus_normal_mean_pts"] for row in rows] == [0.0, 6.18, 5.0]  # 0.6 − (0.5 + 0.0382)
    assert rows[2]["centre_minus_best_extreme_pts"] == pytest.approx(-3.0)
    schedule.plot_claims(rows, 14, tmp_path)
    assert (tmp_path / "fig5_claims_2p14.png").stat().st_size > 0


def test_the_points_table_marks_what_has_not_been_reached(schedule) -> None:
    runs = [run("s_mixer", 8, 60, {10: 0.5, 20: 0.45}), run("s_mixer", 8, 60, {10: 0.52}, seed=1)]
    (row,) = schedule.points_table(runs, [10, 20, 50, None])
    assert (row["ep10"], row["ep20"], row["ep50"], row["final"]) == ("51.00 ± 1.41 (2)", "45.00 (1)", "–", "–")
    assert row["epochs_logged"] == "20/10"


def test_pairs_closer_than_twice_their_spread_ask_for_a_third_seed(schedule) -> None:
    """Issue 24: "2 seeds, a third where two points differ by less than twice their spread"."""
    finals = {(8, 60): (0.40, 0.41), (16, 38): (0.370, 0.374), (25, 26): (0.366, 0.372), (38, 16): (0.38,)}
    runs = [
        run("s_mixer", C, S, {200: e}, seed=seed, final=e) for (C, S), es in finals.items() for seed, e in enumerate(es)
    ]
    runs += [run("rp_s_mixer", 8, 60, {200: e}, seed=seed, final=e) for seed, e in enumerate((0.405, 0.415))]
    runs.append(run("rp_s_mixer", 16, 38, {100: 0.5}, seed=0))  # unfinished: not compared
    rows = schedule.third_seed_points(runs)
    pairs = {(row["a"], row["b"]) for row in rows}
    # C = 16 vs 25: 0.372 vs 0.369, spread 0.0042; C = 8 normal vs RP: 0.5 points, spread 0.71; C = 8 vs 16:
    # 3.3 points apart (spread 0.71) is decided; C = 38 has one seed
    assert pairs == {("S-Mixer C16_S38", "S-Mixer C25_S26"), ("S-Mixer C8_S60", "RP S-Mixer C8_S60")}
    (row,) = [r for r in rows if r["b"] == "S-Mixer C25_S26"]
    assert (row["difference_pts"], row["spread_pts"]) == (0.3, 0.42)
    assert (row["seeds"], row["third_seed"]) == ("2, 2", "due")
    listed = {(r["family"], r["point"]) for r in schedule.third_seed_runs(runs)}
    assert listed == {("s_mixer", "C16_S38"), ("s_mixer", "C25_S26"), ("s_mixer", "C8_S60"), ("rp_s_mixer", "C8_S60")}


def test_a_point_with_its_third_seed_is_not_listed_for_a_fourth(schedule) -> None:
    """Issue 24 asks for "a third" seed where two points are close, never a fourth: a point with three finished
    seeds leaves third_seed_runs.csv (run_cpu.sh paper_third_seed would list it again at seed 2), and a pair
    still close with three seeds each stays in third_seed.csv as "in" (the order between them is noise)."""
    finals = {
        (8, 60): (0.400, 0.410, 0.405),  # three seeds, close to C = 16
        (16, 38): (0.402, 0.408, 0.406),  # three seeds
        (25, 26): (0.404, 0.409),  # two seeds, close to C = 16: still due
        (38, 16): (0.50, 0.51),  # decided
    }
    runs = [
        run("s_mixer", C, S, {200: e}, seed=seed, final=e) for (C, S), es in finals.items() for seed, e in enumerate(es)
    ]
    rows = {(r["a"], r["b"]): (r["seeds"], r["third_seed"]) for r in schedule.third_seed_points(runs)}
    assert rows == {
        ("S-Mixer C8_S60", "S-Mixer C16_S38"): ("3, 3", "in"),
        ("S-Mixer C16_S38", "S-Mixer C25_S26"): ("3, 2", "due"),
    }
    assert [(r["point"], r["C"]) for r in schedule.third_seed_runs(runs)] == [("C25_S26", 25)]


# a grid with three points on each side of S = C (the rules read ρ along C ≤ S and along C ≥ S)
GRID7 = [(8, 60), (12, 47), (16, 38), (25, 26), (38, 16), (47, 12), (60, 8)]


def two_seeds(family: str, finals: dict, **fields) -> list[dict]:
    """Each point finished at seeds 0 and 1, 0.1 points either side of its mean (sd 0.14 points)."""
    return [
        run(family, C, S, {200: e + d}, seed=seed, final=e + d) | fields
        for (C, S), e in finals.items()
        for seed, d in ((0, -0.001), (1, 0.001))
    ]


def verdict_of(schedule, runs: list[dict]) -> dict[str, tuple[str, str, int]]:
    return {row["claim"]: (row["verdict"], row["status"], row["runs_to_go"]) for row in schedule.verdicts(runs)}


def test_each_claim_is_read_by_the_rules_section_0_fixed_before_the_runs(schedule) -> None:
    """docs/reproductions/appendix.md, "How the verdicts are read": Fig. 5 per family (ρ(m, error) ≤ −0.8 across and
    along both branches: reproduced; one branch: partly), Fig. 6 (lowest at S = C or a neighbour, S = C ahead
    of both ends by more than twice the largest sd: reproduced; within it: partly; lowest at an end: not),
    Fig. 7 (RP − normal shrinks with L, within the margin at the deepest: reproduced; beyond: partly; not
    shrinking: not), App. D.5 (block 1 costliest beyond the margin: reproduced; within: partly; else not)."""
    centre = {
        (8, 60): 0.42,
        (12, 47): 0.40,
        (16, 38): 0.38,
        (25, 26): 0.35,
        (38, 16): 0.37,
        (47, 12): 0.39,
        (60, 8): 0.41,
    }
    sw = [
        run("sw_mlp", 0, 0, {200: e}, seed=seed, final=e) | {"C": None, "S": None, "m": m, "point": f"m{m}"}
        for m, e in ((135, 0.45), (181, 0.43), (405, 0.41))
        for seed in (0, 1)
    ]
    runs = two_seeds("s_mixer", centre) + sw
    assert verdict_of(schedule, runs) == {
        "Fig. 5, S-Mixer": ("reproduced", "final", 0),
        "Fig. 5, SW-MLP": ("reproduced", "final", 0),
        "Fig. 6, S-Mixer": ("reproduced", "final", 0),
    }
    # the C = 60 end lowest: Fig. 6 not; the C ≥ S side no longer falls with m (ρ +0.5): Fig. 5 partly
    verdicts = verdict_of(schedule, two_seeds("s_mixer", centre | {(60, 8): 0.345}))
    assert verdicts["Fig. 6, S-Mixer"][0] == "not" and verdicts["Fig. 5, S-Mixer"][0] == "partly"
    # S = C lowest but only 0.2 points ahead of the C = 60 end, within the margin (2 × 0.14 points): partly
    (row,) = [
        r for r in schedule.verdicts(two_seeds("s_mixer", centre | {(60, 8): 0.352})) if r["claim"].startswith("Fig. 6")
    ]
    assert row["verdict"] == "partly" and "S = C minus the better end −0.20 points, margin 0.28" in row["reading"]
    # a three-point grid (Ω = 2^16's C = 16, 40, 83): its ends are S = C's neighbours, and an end lowest is "not"
    three = {(16, 38): 0.36, (25, 26): 0.35, (38, 16): 0.345}
    assert verdict_of(schedule, two_seeds("s_mixer", three))["Fig. 6, S-Mixer"][0] == "not"
    # ... and Fig. 5's rule has two points a branch there, its ρ undefined: n/a, not "not" (issue 58)
    assert verdict_of(schedule, two_seeds("s_mixer", three))["Fig. 5, S-Mixer"][0] == "n/a"
    # the case the rule left open, the lowest point neither S = C, a neighbour nor an end: partly, displaced
    displaced = verdict_of(schedule, two_seeds("s_mixer", centre | {(47, 12): 0.34}))
    assert displaced["Fig. 6, S-Mixer"][0] == "partly, displaced"
    assert verdict_of(schedule, two_seeds("s_mixer", three | {(38, 16): 0.37}))["Fig. 6, S-Mixer"][0] == "reproduced"
    # the RP S-Mixer flat in m: not; and a run still going or a third seed due keeps a verdict provisional
    flat = two_seeds("rp_s_mixer", {k: 0.43 + 0.001 * (i % 2) for i, k in enumerate(GRID7)})
    unfinished = run("s_mixer", 25, 26, {50: 0.5}, seed=2)
    verdicts = verdict_of(schedule, runs + flat + [unfinished])
    assert verdicts["Fig. 5, RP S-Mixer"][0] == "not"
    assert verdicts["Fig. 5, S-Mixer"] == verdicts["Fig. 6, S-Mixer"] == ("reproduced", "provisional", 1)
    close = two_seeds("s_mixer", centre | {(12, 47): 0.4195})  # 0.05 points from C = 8: a third seed each
    assert verdict_of(schedule, close)["Fig. 5, S-Mixer"] == ("reproduced", "provisional", 2)

    def fig7(rp_by_depth: dict[int, float]) -> list[dict]:
        runs = []
        for depth, (normal, rp) in zip(
            (4, 8, 16), zip((0.40, 0.38, 0.37), rp_by_depth.values(), strict=True), strict=True
        ):
            for family, e in (("s_mixer", normal), ("rp_s_mixer", rp)):
                runs += two_seeds(family, {(25, 26): e}, item="fig7", L=depth)
        return runs

    claim = "Fig. 7, RP catches up with depth"
    assert verdict_of(schedule, fig7({4: 0.46, 8: 0.42, 16: 0.372}))[claim] == ("reproduced", "final", 0)
    (row,) = [r for r in schedule.verdicts(fig7({4: 0.46, 8: 0.42, 16: 0.39})) if r["claim"] == claim]
    assert (
        row["verdict"] == "partly"
        and row["reading"] == "RP − normal +6.00, +4.00, +2.00 points at L = 4, 8, 16; margin at L = 16: 0.28"
    )
    assert verdict_of(schedule, fig7({4: 0.46, 8: 0.47, 16: 0.372}))[claim][0] == "not"
    # L = 20 (run_cpu.sh paper_fig7_l20, added after the rule) is shown beside it, not graded: RP 10 points
    # behind there, and a run of it still going, leave the verdict reproduced and final
    deeper = two_seeds("s_mixer", {(25, 26): 0.36}, item="fig7", L=20)
    deeper += two_seeds("rp_s_mixer", {(25, 26): 0.46}, item="fig7", L=20)
    deeper.append(run("rp_s_mixer", 25, 26, {50: 0.5}, seed=2) | {"item": "fig7", "L": 20})
    (row,) = [r for r in schedule.verdicts(fig7({4: 0.46, 8: 0.42, 16: 0.372}) + deeper) if r["claim"] == claim]
    assert (row["verdict"], row["status"], row["runs_to_go"]) == ("reproduced", "final", 0)
    assert row["reading"].endswith("at L = 4, 8, 16; margin at L = 16: 0.28; L = 20 (beside the rule): +10.00")

    def d5(first: float) -> list[dict]:
        blocks = {0: first, 1: 0.42, 2: 0.41, 3: 0.41}
        return [
            r
            for block, e in blocks.items()
            for r in two_seeds("s_mixer", {(25, 26): e}, item="d5", L=4, permute=[i == block for i in range(4)])
        ]

    claim = "App. D.5, the first block matters most"
    assert verdict_of(schedule, d5(0.45))[claim] == ("reproduced", "final", 0)
    assert verdict_of(schedule, d5(0.4215))[claim][0] == "partly"  # 0.15 points over block 2: within 0.28
    assert verdict_of(schedule, d5(0.40))[claim][0] == "not"
    # seed 0 alone (as while the second seeds train): the margin is undefined, said so, never "nan"
    (row,) = [row for row in schedule.verdicts([r for r in d5(0.45) if r["seed"] == 0]) if row["claim"] == claim]
    assert row["reading"].endswith("+3.00 points, margin – (one seed: no spread yet)") and row["verdict"] == "partly"


def fake_sweep(root: Path, name: str, points: dict[tuple[int, int], list[float]], seeds: list[int]) -> None:
    """A finished paper-schedule sweep as run_cpu.sh leaves it: sweep.json and each run's test_metrics.json."""
    entries = []
    for (C, S), finals in points.items():
        for seed, final in zip(seeds, finals, strict=True):
            run_dir = root / name / "runs" / f"C{C}_S{S}" / f"seed{seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "test_metrics.json").write_text(json.dumps({"test/acc1": 1.0 - final}))
            entry = {"point": f"C{C}_S{S}", "C": C, "S": S, "m": C * S, "p": 1 / C, "axes": {}}
            entries.append(entry | {"name": f"C{C}_S{S}_seed{seed}", "seed": seed, "run_dir": str(run_dir)})
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "sweep.json").write_text(json.dumps({"runs": entries}))


def test_the_points_that_need_a_third_seed_are_trained_at_seed_2_and_read_back_as_their_point(
    schedule, tmp_path: Path
) -> None:
    """paper_schedule.py lists the close points in third_seed_runs.csv; `run_cpu.sh paper_third_seed`
    emits one sweep per point at seed 2 through `mixer sweep --emit`, with the config of the point's first
    two seeds; read_runs counts that sweep's runs as the family's point (not a family "s_mixer_C25_…")."""
    runs_root = tmp_path / "runs"
    # C = 25 and 32 are 0.25 points apart with a 1.41-point spread: both need a third seed; C = 8 is decided
    finals = {(8, 60): [0.40, 0.41], (25, 26): [0.36, 0.38], (32, 20): [0.365, 0.37]}
    fake_sweep(runs_root, "paper_2p14_fig5_s_mixer", finals, [0, 1])
    out = tmp_path / "paper"
    script = ROOT / "docs" / "reproductions"
    subprocess.run([sys.executable, script / "paper_schedule.py", "--runs", runs_root, "--out", out], check=True)
    with (out / "third_seed_runs.csv").open() as file:
        listed = list(csv.DictReader(file))
    assert [(row["family"], row["point"], row["C"]) for row in listed] == [
        ("s_mixer", "C25_S26", "25"),
        ("s_mixer", "C32_S20", "32"),
    ]
    bin_dir = Path(sys.executable).parent
    env = os.environ | {
        "EMIT_ONLY": "1",
        "REPRO_DIR": str(runs_root),
        "THIRD_SEED_RUNS": str(out / "third_seed_runs.csv"),
        "MIXER": str(bin_dir / "mixer"),
        "PYTHON": sys.executable,
    }
    emitted = subprocess.run(
        ["bash", script / "run_cpu.sh", "paper_third_seed"], env=env, capture_output=True, text=True, timeout=300
    )
    assert emitted.returncode == 0, emitted.stderr[-2000:]
    (entry,) = json.loads((runs_root / "paper_2p14_fig5_s_mixer_C25_S26_seed2" / "sweep.json").read_text())["runs"]
    assert (entry["point"], entry["seed"], entry["C"], entry["S"]) == ("C25_S26", 2, 25, 26)
    config = Path(entry["config"]).read_text()
    assert "seed_everything: 2" in config and "channels: 25" in config and "omega: 16384" in config
    assert "max_epochs: 200" in config  # the paper's schedule (configs/budget/omega_2p14.yaml keeps it)

    # trained: its finished run is one more seed of the S-Mixer's C = 25 point
    Path(entry["run_dir"]).mkdir(parents=True)
    (Path(entry["run_dir"]) / "test_metrics.json").write_text(json.dumps({"test/acc1": 0.63}))
    runs = schedule.read_runs(runs_root)
    assert {r["family"] for r in runs} == {"s_mixer"}
    mean, _, n = schedule.by_point(runs, None)[(25, 26, 650)]
    assert (n, mean) == (3, pytest.approx((0.36 + 0.38 + 0.37) / 3))

    # an SW-MLP point (a density, no C; csv's own \r\n line ends): its sweep at that density, dense as seeds 0 and 1
    listed = tmp_path / "sw.csv"
    listed.write_bytes(b"omega_exp,family,point,C,p\r\n14,sw_mlp,p0.5_m181,,0.5\r\n")
    sw = subprocess.run(
        ["bash", script / "run_cpu.sh", "paper_third_seed"],
        env=env | {"THIRD_SEED_RUNS": str(listed)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sw.returncode == 0, sw.stderr[-2000:]
    (entry,) = json.loads((runs_root / "paper_2p14_fig5_sw_mlp_p0.5_m181_seed2" / "sweep.json").read_text())["runs"]
    assert (entry["point"], entry["seed"], entry["p"]) == ("p0.5_m181_impldense", 2, 0.5)

    # no list yet: one line that names the file and how to write it, nothing emitted
    missing = subprocess.run(
        ["bash", script / "run_cpu.sh", "paper_third_seed"],
        env=env | {"THIRD_SEED_RUNS": str(tmp_path / "none.csv")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "none.csv, which is missing" in missing.stderr
    assert "paper_schedule.py --out" in missing.stderr

    # a list that is not paper_schedule.py's (another header, a family or Ω with no config): one line that
    # names the file and line, and nothing emitted, not even the rows before the bad one
    rows = (out / "third_seed_runs.csv").read_text().splitlines()
    for bad, where in (
        (["exp,family,point,C,p", *rows[1:]], ":1: the header is 'exp,family,point,C,p'"),
        ([*rows, "14,rp_mixer,C8_S60,8,"], ":4: '14,rp_mixer,C8_S60,8,' is not a point"),
        ([*rows, "13,s_mixer,C8_S60,8,"], ":4: '13,s_mixer,C8_S60,8,' is not a point"),
    ):
        listed = tmp_path / "bad.csv"
        listed.write_text("\n".join(bad) + "\n")
        before = sorted(p.name for p in runs_root.iterdir())
        refused = subprocess.run(
            ["bash", script / "run_cpu.sh", "paper_third_seed"],
            env=env | {"THIRD_SEED_RUNS": str(listed), "REPRO_DIR": str(runs_root)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"bad.csv{where}" in refused.stderr and "paper_schedule.py --out" in refused.stderr
        assert sorted(p.name for p in runs_root.iterdir()) == before


def test_runs_an_earlier_report_recorded_count_beside_the_run_directories(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--recorded: the runs of docs/reproductions/paper (the committed report) are still the sweep's after
    their run directories are gone, and a run that finished since replaces its unfinished record."""
    out = tmp_path / "paper"
    fake_sweep(tmp_path / "before", "paper_2p14_fig5_s_mixer", {(8, 60): [0.40, 0.41]}, [0, 1])
    monkeypatch.setattr(sys, "argv", ["paper_schedule.py", "--runs", str(tmp_path / "before"), "--out", str(out)])
    schedule.main()
    with (out / "fig5_runs.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    # and C = 25's seed 1 was stopped at epoch 3 (its curve recorded, no final figure)
    rows.append(rows[0] | {"point": "C25_S26", "C": "25", "S": "26", "seed": "1", "epochs": "3", "final": ""})
    with (out / "fig5_runs.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with (out / "curves.csv").open("a", newline="") as file:
        file.writelines(f"paper_2p14_fig5_s_mixer,C25_S26,1,{epoch},0.5\n" for epoch in (1, 2, 3))
    # the machine renewed: only C = 25 ran again (both seeds to the end), in a new runs folder
    fake_sweep(tmp_path / "after", "paper_2p14_fig5_s_mixer", {(25, 26): [0.36, 0.37]}, [0, 1])
    again = ["paper_schedule.py", "--runs", str(tmp_path / "after"), "--out", str(out), "--recorded", str(out)]
    monkeypatch.setattr(sys, "argv", again)
    schedule.main()
    with (out / "fig5_runs.csv").open(newline="") as file:
        finals = {(row["point"], row["seed"]): row["final"] for row in csv.DictReader(file)}
    assert finals == {
        ("C8_S60", "0"): "0.4",
        ("C8_S60", "1"): "0.41",
        ("C25_S26", "0"): "0.36",
        ("C25_S26", "1"): "0.37",
    }
    with (out / "points.csv").open(newline="") as file:
        assert [(row["point"], row["runs"]) for row in csv.DictReader(file)] == [("C8_S60", "2"), ("C25_S26", "2")]
    # two points are no grid: no claim is read yet, and verdicts.md says so
    assert (out / "verdicts.md").read_text() == "No claim has the runs its rule reads yet.\n"
    # a hand edit that is not a number: one line naming the file, its line and the column, whichever file
    runs_text, curves_text = (out / "fig5_runs.csv").read_text(), (out / "curves.csv").read_text()
    lines = runs_text.splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    for column, bad in (("minutes", "about an hour"), ("C", "C25"), ("epochs", ""), ("permute", "maybe")):
        cells = lines[2].rstrip("\n").split(",")
        cells[header.index(column)] = bad
        (out / "fig5_runs.csv").write_text("".join([*lines[:2], ",".join(cells) + "\n", *lines[3:]]))
        with pytest.raises(SystemExit, match=rf"fig5_runs.csv line 3: column {column} is '{bad}', not ") as refused:
            schedule.main()
        assert "\n" not in str(refused.value) and "git checkout" in str(refused.value)
    (out / "fig5_runs.csv").write_text(runs_text)
    (out / "curves.csv").write_text(
        curves_text + "paper_2p14_fig5_s_mixer,C25_S26,1,1,0.5\n" + "paper_2p14_fig5_s_mixer,C25_S26,1,2,half\n"
    )
    with pytest.raises(SystemExit, match=r"curves.csv line 3: column test_error is 'half', not a number"):
        schedule.main()
    (out / "curves.csv").write_text("sweep,point\n")  # not what --out writes: one line naming the columns
    with pytest.raises(SystemExit, match=r"curves.csv: no column epoch, seed, test_error; give a folder"):
        schedule.main()
    monkeypatch.setattr(sys, "argv", [*again[:-1], str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match=r"--recorded .*nothing: no fig5_runs.csv and curves.csv there"):
        schedule.main()


def test_the_tables_read_the_same_from_the_run_directories_and_from_the_record(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory logs float32 accuracies; the record (fig5_runs.csv, curves.csv) keeps four decimals,
    which hold a CIFAR-10 error exactly (k / 10,000). Both give the same tables, ties included: C = 38's
    mean of 41.24 and 41.26 % is C = 60's 41.25 % twice, one rank in Spearman's ρ."""
    finals = {
        (8, 60): [0.45, 0.46],
        (16, 38): [0.43, 0.44],
        (25, 26): [0.42, 0.42],
        (38, 16): [0.4124, 0.4126],
        (60, 8): [0.4125, 0.4125],
    }
    runs_root = tmp_path / "runs"
    fake_sweep(runs_root, "paper_2p14_fig5_s_mixer", finals, [0, 1])
    for entry in json.loads((runs_root / "paper_2p14_fig5_s_mixer" / "sweep.json").read_text())["runs"]:
        error = finals[(entry["C"], entry["S"])][entry["seed"]]
        logged = torch.tensor(1.0 - error, dtype=torch.float32).item()  # as Lightning logs test/acc1, val/acc1
        run_dir = Path(entry["run_dir"])
        (run_dir / "test_metrics.json").write_text(json.dumps({"test/acc1": logged}))
        epochs = "".join(f"{epoch},{100 * epoch},{logged}\n" for epoch in range(10))
        (run_dir / "metrics.csv").write_text("epoch,step,val/acc1\n" + epochs)
    fresh, record, empty = tmp_path / "fresh", tmp_path / "record", tmp_path / "empty"
    empty.mkdir()
    for argv in (
        ["--runs", str(runs_root), "--out", str(fresh)],
        ["--runs", str(empty), "--out", str(record), "--recorded", str(fresh)],
    ):
        monkeypatch.setattr(sys, "argv", ["paper_schedule.py", *argv])
        schedule.main()
    tables = sorted(path.name for path in fresh.iterdir() if path.suffix in (".csv", ".md"))
    assert "claims.csv" in tables
    for name in tables:
        assert (record / name).read_text() == (fresh / name).read_text(), name
    with (fresh / "claims.csv").open(newline="") as file:
        rhos = {row["epoch"]: row["spearman_m_error"] for row in csv.DictReader(file)}
    # m = 480, 608, 650, 608, 480 against 45.5, 43.5, 42.0, 41.25, 41.25 %, the last two one rank (as scipy
    # .stats.spearmanr ranks them; told apart by float32 noise, -0.211)
    assert rhos == {"5": "-0.108", "10": "-0.108", "final": "-0.108"}


def test_doc_gets_the_report_tables_between_its_markers(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--doc: each `<!-- paper_schedule.py NAME.md -->` block of the page becomes --out's table of that name
    (its prose, markers and everything outside the blocks kept); a misplaced marker is one line naming the
    page's line and the fix, and then neither the page nor --out is written."""
    fake_sweep(tmp_path / "runs", "paper_2p14_fig5_s_mixer", {(8, 60): [0.40, 0.41], (25, 26): [0.36, 0.38]}, [0, 1])
    doc, out = tmp_path / "page.md", tmp_path / "paper"
    page = (
        "# Results\n\nBefore.\n\n<!-- paper_schedule.py points.md -->\n| stale | table |\n|---|---|\n"
        "<!-- /paper_schedule.py -->\n\nBetween.\n<!-- paper_schedule.py verdicts.md -->\n<!-- /paper_schedule.py -->\nAfter.\n"
    )
    doc.write_text(page)
    monkeypatch.setattr(
        sys, "argv", ["paper_schedule.py", "--runs", str(tmp_path / "runs"), "--out", str(out), "--doc", str(doc)]
    )
    schedule.main()
    table = (out / "points.md").read_text()
    assert table.startswith("| item | omega | family | point |") and "| C25_S26 | 25 | 26 |" in table
    assert doc.read_text() == page.replace("| stale | table |\n|---|---|\n", table).replace(
        "verdicts.md -->\n", "verdicts.md -->\nNo claim has the runs its rule reads yet.\n"
    )
    filled = doc.read_text()
    verdicts_line = filled.splitlines().index("<!-- paper_schedule.py verdicts.md -->") + 1
    schedule.main()  # again: the same page (a block is replaced, never appended to)
    assert doc.read_text() == filled
    for broken, refusal in (
        (
            filled.replace("<!-- /paper_schedule.py -->\n\nBetween", "\nBetween", 1),
            rf"page.md line {verdicts_line - 1}: '<!-- paper_schedule.py verdicts.md -->' opens a block inside the block "
            r"of line 5; each ",
        ),
        (filled + "<!-- /paper_schedule.py -->\n", r"closes no block: no opening marker before it"),
        (
            filled.rsplit("<!-- /paper_schedule.py -->", 1)[0],
            rf"line {verdicts_line}: the block of verdicts.md is not closed; add '<!-- /paper_schedule.py -->' after its table",
        ),
        (
            filled.replace("paper_schedule.py verdicts.md", "paper_schedule.py verdicts"),
            r"'<!-- paper_schedule.py verdicts -->' is not a marker; write",
        ),
    ):
        doc.write_text(broken)
        (out / "points.md").unlink(missing_ok=True)
        with pytest.raises(SystemExit, match=refusal) as refused:
            schedule.main()
        assert "\n" not in str(refused.value) and doc.read_text() == broken
        assert not (out / "points.md").exists()  # stopped before --out was written
    doc.write_text(filled.replace("verdicts.md", "fig8.md"))
    with pytest.raises(
        SystemExit, match=rf"line {verdicts_line}: the block names fig8.md, which --out .* does not hold; name one of"
    ):
        schedule.main()
    assert doc.read_text() == filled.replace("verdicts.md", "fig8.md")  # no block filled when one cannot be
    monkeypatch.setattr(sys, "argv", [*sys.argv[:-1], str(tmp_path / "no_page.md")])
    with pytest.raises(SystemExit, match=r"--doc .*no_page.md: no such file; give the page to fill"):
        schedule.main()


def test_the_pages_tables_are_the_committed_reports(schedule, tmp_path: Path) -> None:
    """docs/reproductions/appendix.md's generated blocks hold docs/reproductions/paper's tables as committed: a
    report regenerated without --doc docs/reproductions/appendix.md (or a table edited by hand) fails here."""
    page = tmp_path / "appendix.md"
    text = (ROOT / "docs" / "reproductions" / "appendix.md").read_text()
    page.write_text(text)
    assert schedule.fill_doc(page, ROOT / "docs" / "reproductions" / "paper") >= 3
    assert page.read_text() == text, (
        "docs/reproductions/appendix.md's tables differ from docs/reproductions/paper's: run docs/reproductions/"
        "paper_schedule.py --recorded docs/reproductions/paper --doc docs/reproductions/appendix.md"
    )


def finish(entry: dict, final: float, curve: dict[int, float] | None = None) -> None:
    """One emitted run as if trained to the end: its test_metrics.json (the final figure the report reads)
    and, given a curve (epoch -> test error, from 1), its metrics.csv as Lightning's CSVLogger writes it."""
    run_dir = Path(entry["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "test_metrics.json").write_text(json.dumps({"test/acc1": 1.0 - final}))
    if curve:
        lines = [f"{epoch - 1},{100 * epoch},{1.0 - error}" for epoch, error in sorted(curve.items())]
        (run_dir / "metrics.csv").write_text("epoch,step,val/acc1\n" + "\n".join(lines) + "\n")


@pytest.mark.slow  # ~15 s: `mixer sweep --emit` of the real sweeps through run_cpu.sh
def test_fig7_and_d5_as_run_cpu_emits_them_are_read_by_depth_and_by_the_rp_block(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_cpu.sh paper_fig7 paper_d5` emits grid sweeps (depth, S = C, the RP block) whose sweep.json
    names each axis by its short name (`num_blocks`, `permute`): the report read `model.init_args.…`,
    found no depth, and put every depth into one Fig. 7 row. Now: one row per L with its RP − normal, and
    D.5's blocks 1–4 beside none and all (Fig. 7's L = 4 runs), also when read back with --recorded."""
    runs_root = tmp_path / "runs"
    env = os.environ | {
        "EMIT_ONLY": "1",
        "REPRO_DIR": str(runs_root),
        "MIXER": str(Path(sys.executable).parent / "mixer"),
        "PYTHON": sys.executable,
    }
    script = ROOT / "docs" / "reproductions"
    emitted = subprocess.run(
        ["bash", script / "run_cpu.sh", "paper_fig7", "paper_d5", "paper_fig7_l20"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert emitted.returncode == 0, emitted.stderr[-2000:]
    normal_by_depth, gap_by_depth = {4: 0.40, 8: 0.37, 16: 0.36, 20: 0.355}, {4: 0.08, 8: 0.04, 16: 0.01, 20: 0.02}
    for family, sweep in [
        (f, f"paper_2p14_fig7_{f}{suffix}") for f in ("s_mixer", "rp_s_mixer") for suffix in ("", "_L20")
    ]:
        for entry in json.loads((runs_root / sweep / "sweep.json").read_text())["runs"]:
            depth = entry["axes"]["num_blocks"]
            gap = gap_by_depth[depth] if family == "rp_s_mixer" else 0.0
            final = normal_by_depth[depth] + gap + 0.01 * entry["seed"]
            # the gap opens over the first two epochs: 0 after one, half after two, whole after three
            finish(entry, final, {1: 0.9, 2: 0.6 + gap / 2, 3: final})
    d5 = json.loads((runs_root / "paper_2p14_d5_s_mixer" / "sweep.json").read_text())["runs"]
    assert len(d5) == 8  # four positions, seeds 0 and 1
    for entry in d5:
        finish(entry, 0.40 + (0.015 if entry["axes"]["permute"][0] else 0.0) + 0.01 * entry["seed"])
    out = tmp_path / "paper"
    monkeypatch.setattr(sys, "argv", ["paper_schedule.py", "--runs", str(runs_root), "--out", str(out)])
    schedule.main()
    for recorded in (False, True):
        with (out / "fig7.csv").open(newline="") as file:
            finals = [row for row in csv.DictReader(file) if row["epoch"] == "final"]
        assert [(row["L"], row["normal"], row["rp_minus_normal_pts"]) for row in finals] == [
            ("4", "40.50 ± 0.71 (2)", "8.0"),
            ("8", "37.50 ± 0.71 (2)", "4.0"),
            ("16", "36.50 ± 0.71 (2)", "1.0"),
            ("20", "36.00 ± 0.71 (2)", "2.0"),  # paper_fig7_l20's own sweeps, read as one more depth
        ]
        assert "| 16 | final | 36.50 ± 0.71 (2) | 37.50 ± 0.71 (2) | 1.0 |" in (out / "fig7.md").read_text()
        with (out / "fig7_by_epoch.csv").open(newline="") as file:
            every_epoch = [(row["L"], row["epoch"], row["rp_minus_normal_pts"]) for row in csv.DictReader(file)]
        # RP − normal after every epoch, per depth (the same read back: --recorded keeps the curves)
        assert every_epoch == [
            (depth, str(epoch), gap)
            for depth, gaps in (
                ("4", ("0.0", "4.0", "8.0")),
                ("8", ("0.0", "2.0", "4.0")),
                ("16", ("0.0", "0.5", "1.0")),
                ("20", ("0.0", "1.0", "2.0")),
            )
            for epoch, gap in zip((1, 2, 3), gaps, strict=True)
        ]
        with (out / "d5.csv").open(newline="") as file:
            rows = list(csv.DictReader(file))
        assert [
            (row["rp_blocks"], row["runs_from"], row["C"], row["final"], row["final_minus_none_pts"]) for row in rows
        ] == [
            ("none", "fig7 L = 4", "25", "40.50 ± 0.71 (2)", ""),
            ("block 1", "d5", "25", "42.00 ± 0.71 (2)", "1.5"),
            ("block 2", "d5", "25", "40.50 ± 0.71 (2)", "0.0"),
            ("block 3", "d5", "25", "40.50 ± 0.71 (2)", "0.0"),
            ("block 4", "d5", "25", "40.50 ± 0.71 (2)", "0.0"),
            ("all", "fig7 L = 4", "25", "48.50 ± 0.71 (2)", "8.0"),
        ]
        assert "| block 1 | d5 | 25 | 25 |" in (out / "d5.md").read_text()
        if not recorded:  # the run folders gone (a renewed machine): the committed report alone gives the same
            empty = tmp_path / "empty"
            empty.mkdir()
            argv = ["paper_schedule.py", "--runs", str(empty), "--out", str(out), "--recorded", str(out)]
            monkeypatch.setattr(sys, "argv", argv)
            schedule.main()


def recording_queue(tmp_path: Path, recorded: str) -> tuple[dict[str, str], Path]:
    """run_cpu.sh's environment (one lane, runs under tmp_path, RECORDED=`recorded`) with a stand-in for the
    `mixer` command that records each `mixer sweep point DIR RUN` (one line "DIR RUN" in the returned file)
    instead of training, and runs every other subcommand (`mixer sweep --emit`) for real."""
    stub, calls = tmp_path / "mixer", tmp_path / "calls.txt"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1 $2" = "sweep point" ]; then echo "$3 $4" >> {calls}; exit 0; fi\n'
        f'exec {Path(sys.executable).parent / "mixer"} "$@"\n'
    )
    stub.chmod(0o755)
    env = {"REPRO_DIR": str(tmp_path / "runs"), "MIXER": str(stub), "PYTHON": sys.executable, "LANES": "1"}
    return os.environ | env | {"SEEDS": "0,1", "RECORDED": recorded}, calls


@pytest.mark.slow  # ~15 s: `mixer sweep --emit` of the real sweeps through run_cpu.sh
def test_the_queue_skips_the_runs_the_committed_report_holds_as_finished(tmp_path: Path) -> None:
    """On a new (or renewed) machine the run folders are gone but docs/reproductions/paper/fig5_runs.csv is
    not: `run_cpu.sh paper_fig5` trains only the runs it does not hold as finished (a run recorded unfinished
    trains again); RECORDED= trains them all. The fits are recorded by a stand-in for `mixer sweep point`."""
    recorded = tmp_path / "fig5_runs.csv"
    recorded.write_text(
        "sweep,item,family,omega_exp,point,seed,epochs,final\n"
        "paper_2p14_fig5_s_mixer,fig5,s_mixer,14,C8_S60,0,200,0.405\n"
        "paper_2p14_fig5_s_mixer,fig5,s_mixer,14,C8_S60,1,200,0.3984\n"
        "paper_2p14_fig5_rp_s_mixer,fig5,rp_s_mixer,14,C60_S8,0,200,0.4216\n"
        "paper_2p14_fig5_s_mixer,fig5,s_mixer,14,C25_S26,1,163,\n"  # stopped at epoch 163: trains again
    )
    env, calls = recording_queue(tmp_path, str(recorded))
    script = ROOT / "docs" / "reproductions" / "run_cpu.sh"
    queued = subprocess.run(["bash", script, "paper_fig5"], env=env, capture_output=True, text=True, timeout=300)
    assert queued.returncode == 0, queued.stderr[-2000:]
    assert f"3 runs finished in {recorded} are not trained again" in queued.stderr
    trained = calls.read_text().splitlines()
    assert len(trained) == 46 - 3  # 9 points × 2 families × 2 seeds + 5 SW-MLP densities × 2 seeds
    names = {(Path(line.split()[0]).name, line.split()[1]) for line in trained}
    assert ("paper_2p14_fig5_s_mixer", "C8_S60_seed0") not in names
    assert ("paper_2p14_fig5_rp_s_mixer", "C60_S8_seed0") not in names
    assert ("paper_2p14_fig5_rp_s_mixer", "C60_S8_seed1") in names and (
        "paper_2p14_fig5_s_mixer",
        "C25_S26_seed1",
    ) in names
    calls.unlink()
    # LIST_ONLY: the same runs in the same order on stdout, none trained (one queue across invocations)
    listed = subprocess.run(
        ["bash", script, "paper_fig5"], env=env | {"LIST_ONLY": "1"}, capture_output=True, text=True, timeout=300
    )
    assert listed.returncode == 0 and not calls.exists()
    assert listed.stdout.splitlines() == trained
    again = subprocess.run(
        ["bash", script, "paper_fig5"], env=env | {"RECORDED": ""}, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and "not trained again" not in again.stderr
    assert len(calls.read_text().splitlines()) == 46
    recorded.write_text("sweep,point\n")  # not paper_schedule.py's file: one line, nothing trained
    calls.unlink()
    refused = subprocess.run(["bash", script, "paper_fig5"], env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and not calls.exists()
    assert f"RECORDED={recorded}: no column final, seed; give paper_schedule.py's fig5_runs.csv" in refused.stderr


@pytest.mark.slow  # ~15 s: `mixer sweep --emit` of the real sweeps through run_cpu.sh
def test_d5_trains_the_fig7_runs_its_table_compares_with_and_no_other_depth(tmp_path: Path) -> None:
    """D.5's "none" and "all" rows are Fig. 7's L = 4 runs: `run_cpu.sh paper_d5` trains those four with its
    own eight (seed 0 of all before seed 1), so that D.5 is whole without Fig. 7's L = 8 and 16 (before, its
    table had no "none" or "all" unless paper_fig7 had run); `paper_fig7` still asks for every depth (the real
    `mixer sweep point` skips a finished run, whichever item trained it)."""
    env, calls = recording_queue(tmp_path, "")
    script = ROOT / "docs" / "reproductions" / "run_cpu.sh"
    queued = subprocess.run(["bash", script, "paper_d5"], env=env, capture_output=True, text=True, timeout=300)
    assert queued.returncode == 0, queued.stderr[-2000:]
    trained = [(Path(line.split()[0]).name, line.split()[1]) for line in calls.read_text().splitlines()]
    fig7 = [(sweep, name) for sweep, name in trained if "_fig7_" in sweep]
    assert sorted(fig7) == [
        (f"paper_2p14_fig7_{family}", f"num_blocks4_channels25_tokens25_seed{seed}")
        for family in ("rp_s_mixer", "s_mixer")
        for seed in (0, 1)
    ]
    assert len(trained) == 4 + 8  # and each once
    assert len(set(trained)) == len(trained)
    assert [name.endswith("seed0") for _, name in trained] == [True] * 6 + [False] * 6
    calls.unlink()
    depths = subprocess.run(["bash", script, "paper_fig7"], env=env, capture_output=True, text=True, timeout=300)
    assert depths.returncode == 0, depths.stderr[-2000:]
    assert len(calls.read_text().splitlines()) == 12  # 3 depths × 2 families × 2 seeds


@pytest.mark.slow  # ~50 s: the real sweeps' emit, then one real fit (one batch) of each sweep's first run
def test_the_fig7_and_d5_runs_run_cpu_emits_train(tmp_path: Path) -> None:
    """`run_cpu.sh paper_fig7` and `paper_d5` set S = C = 25 on top of the Ω = 2^14 overlay, which also sets
    omega: every one of their runs stopped at once ("model.tokens: tokens=25 contradicts omega=16384"), and the
    tests above only emitted them. Now the first run of each of the five sweeps (paper_fig7_l20's two at L = 20
    included) trains through the real `mixer sweep point` (one batch of a tiny dataset in the hub's layout) at
    S = C = 25 and its depth."""
    write_hf(tmp_path / "data" / "cifar10", train=8, test=4)
    env, calls = recording_queue(tmp_path, "")
    env |= {"MIXER_DATA_ROOT": str(tmp_path / "data")}
    script = ROOT / "docs" / "reproductions" / "run_cpu.sh"
    queued = subprocess.run(
        ["bash", script, "paper_fig7", "paper_d5", "paper_fig7_l20"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert queued.returncode == 0, queued.stderr[-2000:]
    first: dict[str, str] = {}
    for line in calls.read_text().splitlines():
        folder, name = line.split()
        first.setdefault(folder, name)
    assert sorted(Path(folder).name for folder in first) == [
        "paper_2p14_d5_s_mixer",
        "paper_2p14_fig7_rp_s_mixer",
        "paper_2p14_fig7_rp_s_mixer_L20",
        "paper_2p14_fig7_s_mixer",
        "paper_2p14_fig7_s_mixer_L20",
    ]
    short = "--trainer.max_epochs 1 --trainer.limit_train_batches 1 --trainer.limit_val_batches 1 --trainer.limit_test_batches 1"
    fit_env = env | {
        "MIXER_ARGS": f"--data.root {tmp_path / 'data' / 'cifar10'} --trainer.enable_progress_bar false {short}"
    }
    mixer = Path(sys.executable).parent / "mixer"
    for folder, name in first.items():
        fitted = subprocess.run(
            [mixer, "sweep", "point", folder, name], env=fit_env, capture_output=True, text=True, timeout=300
        )
        assert fitted.returncode == 0, fitted.stderr[-2000:]
        entry = next(
            run for run in json.loads((Path(folder) / "sweep.json").read_text())["runs"] if run["name"] == name
        )
        assert json.loads((Path(entry["run_dir"]) / "fit_summary.json").read_text())["steps"] == 1
        assert "S=25, C=25" in fitted.stdout + fitted.stderr
        checkpoint = torch.load(Path(entry["run_dir"], "checkpoints", "last.ckpt"), weights_only=True)
        assert checkpoint["hyper_parameters"]["net"]["init_args"]["num_blocks"] == (20 if "_L20" in folder else 4)


def test_each_runs_machine_time_is_its_epochs_without_the_stops_and_outlives_its_folder(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue asks for the machine time per run: each run's minutes from its epochs' TensorBoard wall
    times, a stop (the session ended, resumed hours later) counted as one median epoch, in fig5_runs.csv
    and machine_time.md per family; read back by --recorded when the run folders are gone."""
    from torch.utils.tensorboard import SummaryWriter

    runs_root = tmp_path / "runs"
    fake_sweep(runs_root, "paper_2p14_fig5_s_mixer", {(8, 60): [0.40], (25, 26): [0.36], (60, 8): [0.38]}, [0])
    start = 1795700000.0
    # C = 25: intervals of 20, 20, 20 s, a 3-hour stop (one median, 20 s), 30 s, and the first epoch (its start
    # is not logged: one median, 20 s): 130 s; C = 8: three intervals of 60 s and the first, 240 s
    for C, S, ends in ((25, 26, [0, 20, 40, 60, 10860, 10890]), (8, 60, [0, 60, 120, 180])):
        writer = SummaryWriter(str(runs_root / "paper_2p14_fig5_s_mixer" / "runs" / f"C{C}_S{S}" / "seed0"))
        for epoch, after in enumerate(ends):
            writer.add_scalar("val/acc1", 0.5, global_step=10 * epoch + 9, walltime=start + after)
            writer.add_scalar("epoch", epoch, global_step=10 * epoch + 9, walltime=start + after)
        writer.close()
    out = tmp_path / "paper"
    monkeypatch.setattr(sys, "argv", ["paper_schedule.py", "--runs", str(runs_root), "--out", str(out)])
    schedule.main()
    for recorded in (False, True):
        with (out / "fig5_runs.csv").open(newline="") as file:
            rows = list(csv.DictReader(file))
        minutes = {row["point"]: row["minutes"] for row in rows}
        assert minutes == {"C8_S60": "4.0", "C25_S26": "2.2", "C60_S8": ""}  # C = 60 logged no epochs
        # on a machine doing nothing else: 6 epochs of C = 25's fastest interval (20 s), 4 of C = 8's (60 s)
        assert {row["point"]: row["quiet_minutes"] for row in rows} == {"C8_S60": "4.0", "C25_S26": "2.0", "C60_S8": ""}
        with (out / "machine_time.csv").open(newline="") as file:
            (row,) = list(csv.DictReader(file))
        assert (row["family"], row["finished"], row["timed"], row["median_min"], row["lane_hours"]) == (
            "S-Mixer",
            "3",
            "2",
            "3",  # the median of 2.17 and 4.0 minutes, rounded
            "0.1",
        )
        assert row["quiet_min"] == "3"  # the median of 2.0 and 4.0
        if not recorded:  # the run folders gone: the committed report gives the same
            empty = tmp_path / "empty"
            empty.mkdir()
            argv = ["paper_schedule.py", "--runs", str(empty), "--out", str(out), "--recorded", str(out)]
            monkeypatch.setattr(sys, "argv", argv)
            schedule.main()


def test_fig7_fit_puts_each_depths_training_loss_beside_its_test_loss(
    schedule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fig7_fit.md`: per L and family, the last epoch's `train/loss_epoch` (from the run's logs) and the
    test loss of `mixer test` (test_metrics.json), mean ± sd over the finished runs, and test − train: the
    overfitting that the paper's explanation of RP catching up with depth (Sec. 5.4) needs. Read again from
    the committed report (--recorded) when the run folders are gone."""
    runs_root = tmp_path / "runs"
    entries = []
    losses = {("s_mixer", 4): (1.0, 1.02), ("rp_s_mixer", 4): (1.2, 1.21), ("s_mixer", 8): (0.9, 0.95)}
    for (family, depth), (train, test) in losses.items():
        for seed in (0, 1):
            run_dir = runs_root / f"paper_2p14_fig7_{family}" / "runs" / f"L{depth}" / f"seed{seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "metrics.csv").write_text(
                "epoch,step,val/acc1,train/loss_epoch\n"
                f"0,99,0.5,{train + 0.3}\n"
                f"1,199,0.6,{train + 0.01 * seed}\n"  # the last epoch's counts
            )
            (run_dir / "test_metrics.json").write_text(json.dumps({"test/acc1": 0.6, "test/loss": test}))
            entry = {"point": f"L{depth}", "axes": {"num_blocks": depth}, "seed": seed, "run_dir": str(run_dir)}
            entries.append((family, entry | {"name": f"L{depth}_seed{seed}"}))
    unfinished = runs_root / "paper_2p14_fig7_rp_s_mixer" / "runs" / "L8" / "seed0"  # logs, no test: not read
    unfinished.mkdir(parents=True)
    (unfinished / "metrics.csv").write_text("epoch,step,val/acc1,train/loss_epoch\n0,99,0.5,1.5\n")
    entries.append(("rp_s_mixer", {"point": "L8", "axes": {"num_blocks": 8}, "seed": 0, "run_dir": str(unfinished)}))
    for family in ("s_mixer", "rp_s_mixer"):
        runs = [entry | {"name": f"{entry['point']}_seed{entry['seed']}"} for f, entry in entries if f == family]
        (runs_root / f"paper_2p14_fig7_{family}" / "sweep.json").write_text(json.dumps({"runs": runs}))
    out = tmp_path / "paper"
    expected = [
        "| 4 | S-Mixer | 1.00 ± 0.01 (2) | 1.02 ± 0.00 (2) | 0.015 | 40.00 ± 0.00 (2) |",
        "| 4 | RP S-Mixer | 1.21 ± 0.01 (2) | 1.21 ± 0.00 (2) | 0.005 | 40.00 ± 0.00 (2) |",
        "| 8 | S-Mixer | 0.91 ± 0.01 (2) | 0.95 ± 0.00 (2) | 0.045 | 40.00 ± 0.00 (2) |",
    ]
    monkeypatch.setattr(sys, "argv", ["paper_schedule.py", "--runs", str(runs_root), "--out", str(out)])
    schedule.main()
    assert (out / "fig7_fit.md").read_text().splitlines()[2:] == expected
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["paper_schedule.py", "--runs", str(empty), "--out", str(tmp_path / "again"), "--recorded", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    schedule.main()
    assert (tmp_path / "again" / "fig7_fit.md").read_text().splitlines()[2:] == expected


def test_the_rp_gap_at_s_equals_c_against_omega_and_its_trend(schedule, tmp_path) -> None:
    """Issue 45: RP − normal at each Ω's S ≈ C point, paired by seed, and the slope per doubling of Ω that
    section 0b's rule reads (closing / widening / no trend, and the extrapolated Ω where the line meets 0)."""
    grids = {12: [(8, 28), (16, 16), (28, 8)], 14: [(16, 38), (25, 26), (38, 16)], 16: [(40, 41), (83, 16)]}
    gaps = {12: (0.06, 0.08), 14: (0.04, 0.06), 16: (0.02, 0.04)}  # closing by 2 points per doubling
    runs = []
    for exponent, grid in grids.items():
        for C, S in grid:
            for seed in (0, 1):
                normal = 0.40 + 0.01 * seed + (0.05 if (C, S) not in ((16, 16), (25, 26), (40, 41)) else 0.0)
                rp = normal + gaps[exponent][seed]
                runs += [
                    run("s_mixer", C, S, {10: normal + 0.1, 50: normal}, seed=seed, final=normal)
                    | {"omega_exp": exponent},
                    run("rp_s_mixer", C, S, {10: rp + 0.1, 50: rp}, seed=seed, final=rp) | {"omega_exp": exponent},
                ]
    runs.append(run("rp_s_mixer", 16, 16, {10: 0.9}, seed=2) | {"omega_exp": 12})  # no S-Mixer seed 2: unpaired
    rows = schedule.omega_rows(runs)
    final = {r["omega"]: r for r in rows if r["epoch"] == "final"}
    assert [(r["C"], r["S"]) for r in final.values()] == [(16, 16), (25, 26), (40, 41)]  # S ≈ C, not the best C
    assert final["2^12"]["seeds"] == "0, 1" and final["2^12"]["rp_minus_normal_pts"] == 7.0
    assert final["2^16"]["gaps_pts"] == [2.0, 4.0]
    assert final["2^16"]["errors_pts"] == {"s_mixer": [40.0, 41.0], "rp_s_mixer": [42.0, 45.0]}  # the right panel
    # seeds 2 points apart around a 3-point gap: no third seed; around a 1-point gap (below): due
    assert final["2^16"]["third_seed"] == "no" and {r["third_seed"] for r in rows if r["epoch"] != "final"} == {"–"}
    fits = {f["epoch"]: f for f in schedule.omega_fit(rows)}
    assert set(fits) == {"10", "50", "final"}
    assert fits["final"]["slope_pts_per_doubling"] == -1.0 and fits["final"]["trend"] == "closing"
    assert fits["final"]["zero_at_omega"].startswith("2^19.0") and fits["final"]["status"] == "read"
    # the same gaps growing with Ω: widening, and no zero to extrapolate to
    for r in runs:
        if r["family"] == "rp_s_mixer" and r["seed"] in (0, 1):
            r["final"] += 0.04 * (r["omega_exp"] - 12) / 2
    apart = [r | {"final": r["final"] - 0.1} if r["family"] == "rp_s_mixer" and r["seed"] == 0 else r for r in runs]
    # the seeds' gaps 12 points apart around a mean of 2 to 6 points: a third seed is due at every Ω
    assert {r["third_seed"] for r in schedule.omega_rows(apart) if r["epoch"] == "final"} == {"due"}
    (widening,) = [f for f in schedule.omega_fit(schedule.omega_rows(runs)) if f["epoch"] == "final"]
    assert widening["trend"] == "widening" and widening["zero_at_omega"] == "–"
    schedule.plot_omega(rows, tmp_path)
    assert (tmp_path / "omega_gap.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------------------------
# docs/reproductions/findings.py: the findings page's statistics (issue 58)


@pytest.fixture(scope="module")
def findings():
    spec = importlib.util.spec_from_file_location("findings", ROOT / "docs" / "reproductions" / "findings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["findings"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_t_intervals_are_students(findings) -> None:
    # the 97.5 % quantiles of Student's t that every 95 % interval reads (two seeds: 1 degree of freedom)
    for df, quantile in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (100, 1.984)):
        assert findings.t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-3)
    interval = findings.mean_ci([0.01, 0.02, 0.03])
    assert (interval.mean, interval.n) == (pytest.approx(0.02), 3)
    assert interval.hi - interval.mean == pytest.approx(4.303 * 0.01 / math.sqrt(3), rel=1e-3)
    one = findings.mean_ci([0.4])
    assert one.n == 1 and not one.defined and findings.ci(one) == "40.00"  # one seed: no interval, no "± nan"
    assert findings.ci(findings.mean_ci([])) == "n/a"


def test_differences_are_paired_by_seed(findings) -> None:
    rp = {0: 0.45, 1: 0.46, 2: 0.50}  # seed 2 of the normal arm is missing: only seeds 0 and 1 pair
    normal = {0: 0.40, 1: 0.40}
    gap = findings.paired(rp, normal)
    assert gap.n == 2 and gap.mean == pytest.approx(0.055)
    # two seeds that agree closely give a narrow interval even where each arm's own spread is wide
    wide = findings.paired({0: 0.30, 1: 0.40}, {0: 0.20, 1: 0.301})
    assert wide.excludes_zero() and wide.hi - wide.lo < 0.1


def test_spearman_comes_with_its_exact_p_value(findings) -> None:
    rho, p = findings.spearman_test([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
    assert rho == pytest.approx(-1) and p == pytest.approx(2 / 120)  # the two perfect orders of 5! orderings
    rho, p = findings.spearman_test([1, 2, 3, 4], [4, 3, 1, 2])
    assert rho == pytest.approx(-0.8) and p == pytest.approx(8 / 24)  # ρ = −0.8 at four points: p 1/3
    assert all(math.isnan(v) for v in findings.spearman_test([1, 2], [2, 1]))  # fewer than three: undefined
    # mirror pairs share one m: tied ranks, still exact
    rho, p = findings.spearman_test([480, 564, 564, 480, 650], [0.40, 0.37, 0.35, 0.355, 0.36])
    assert -1 <= rho <= 1 and 0 < p <= 1


def test_a_trend_is_fitted_to_the_means_with_its_interval_and_increments(findings) -> None:
    # the RP gap at S ≈ C, 2^12 … 2^18 (docs/reproductions/paper/omega.csv's final means)
    fit = findings.slope_fit([12, 14, 16, 18], [4.16, 6.86, 8.64, 10.34])
    assert fit["slope"] == pytest.approx(1.016, abs=1e-3) and fit["df"] == 2
    assert (round(fit["lo"], 2), round(fit["hi"], 2)) == (0.65, 1.38)
    assert [round(v, 2) for v in fit["increments"]] == [1.35, 0.89, 0.85]
    exact = findings.slope_fit([0, 1, 2], [1.0, 3.0, 5.0])
    assert exact["slope"] == pytest.approx(2) and exact["hi"] - exact["lo"] == pytest.approx(0, abs=1e-9)
    two = findings.slope_fit([0, 1], [1.0, 3.0])
    assert two["df"] == 0 and math.isnan(two["lo"])  # two means: a slope, no interval


def test_the_page_reads_the_committed_record_as_the_issue_asks(findings, tmp_path: Path) -> None:
    """Issue 58's "Why" list, read from docs/reproductions/paper: each statement as the data support it."""
    texts = findings.write_all(ROOT / "docs" / "reproductions" / "paper", tmp_path, plot=False)
    claims = texts["claims.md"]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in claims.splitlines()[2:]}
    assert "**partly, displaced**" in rows["5"] and "lowest at C/S 2.4" in rows["5"] and "next C/S 1.6" in rows["5"]
    assert "−0.82 [−4.57, 2.92] (2 seeds)" in rows["6"]  # the RP's C < S end at 2^16: two seeds, zero inside
    assert "+1.02 [0.65, 1.38]" in rows["4"] and "+1.35, +0.89, +0.85" in rows["4"]  # the means' slope
    assert "**queued**" in rows["11"] and "(a) +3.61 ± 5.46 pts, holds; (b) training" in rows["11"]  # rp_regimes.py
    ranks = [line for line in texts["ranks.md"].splitlines() if line.startswith("| 2^16")]
    assert ranks and all(line.endswith("| n/a | n/a |") for line in ranks)  # three points, ends at one m
    verdicts = texts["verdicts.md"]
    assert "| 2^16 | Fig. 5, S-Mixer |" in verdicts and "| n/a | final |" in verdicts
    slope = texts["omega_slope.md"]
    assert "| 10 | 2^12 … 2^18 (4 means) |" in slope  # ten gaps at epoch 10, fitted as four means
    assert "not bending" not in "".join(texts.values())


def test_the_queued_claims_are_graded_by_the_rules_fixed_before_their_runs(findings) -> None:
    """QUEUED's rules as code: Sec. 3.4 (patch + pixel invariant, global degraded, paired with section 0's
    S-Mixer at (25, 26)) and D.1 (the sparsest SW-MLP's training loss above the lowest by the margin)."""
    assert findings.sec34_verdict([]) is None and findings.s1_verdict([]) is None  # queued until the runs are in

    def base(seed: int, final: float, **fields) -> dict:
        row = {"item": "fig5", "omega_exp": 14, "family": "s_mixer", "C": 25, "S": 26, "seed": seed, "final": final}
        return row | fields

    runs = [base(s, e) for s, e in ((0, 0.360), (1, 0.355), (2, 0.365))]
    shuffled = [
        base(s, e, item="sec34", point=f"C25_S26_input_permutation{mode}")
        for mode, errors in (("patch-pixel", (0.362, 0.352, 0.366)), ("global", (0.45, 0.46, 0.44)))
        for s, e in enumerate(errors)
    ]
    verdict, headline = findings.sec34_verdict(runs + shuffled)
    assert verdict == "reproduced" and headline.startswith("patch + pixel − none ")
    # a patch + pixel arm 3 points worse at every seed is not invariant: only global's half holds
    worse = [r | {"final": r["final"] + 0.03} if "patch" in r["point"] else r for r in shuffled]
    assert findings.sec34_verdict(runs + worse)[0] == "partly"

    def sw(p: float, seed: int, loss: float) -> dict:
        return {"item": "s1", "p": p, "seed": seed, "final": 0.5, "train_loss": loss}

    def losses(sparsest: float) -> list[dict]:
        table = {1: 1.20, 0.25: 1.00, 0.0625: 0.90, 0.015625: sparsest}
        return [sw(p, s, loss + 0.005 * s) for p, loss in table.items() for s in (0, 1)]

    assert findings.s1_verdict(losses(1.10))[0] == "reproduced"  # up by 0.2, margin 0.014
    assert findings.s1_verdict(losses(0.905))[0] == "partly"  # up by 0.005, within the margin
    assert findings.s1_verdict(losses(0.80))[0] == "not"  # the sparsest trains best
    assert findings.s1_verdict(losses(1.10)[:-1]) is None  # a density with one seed: still queued


def test_fig2d_is_graded_from_its_report_by_the_rule_fixed_before_its_runs(findings, tmp_path: Path) -> None:
    report = tmp_path / "report.csv"
    assert findings.fig2d_verdict(report) is None  # no report yet: queued

    def write(kron: list[float], monarch: list[float]) -> None:
        rows = ["series,point,seed,test_error"]
        rows += [f"paper_fig2d_kron,base,{s},{e}" for s, e in enumerate(kron)]
        rows += [f"paper_fig2d_monarch,base,{s},{e}" for s, e in enumerate(monarch)]
        report.write_text("\n".join(rows) + "\n")

    write([0.030, 0.033, 0.028, 0.031, 0.030], [0.031, 0.032, 0.030, 0.030, 0.029])
    verdict, headline = findings.fig2d_verdict(report)
    assert verdict == "reproduced" and "(5 seeds, 8×8 digits)" in headline
    write([0.080, 0.082, 0.079, 0.081, 0.080], [0.031, 0.032, 0.030, 0.030, 0.029])  # 5 points worse, every seed
    assert findings.fig2d_verdict(report)[0] == "not"
    write([0.030, 0.080], [0.031, 0.032])  # two noisy seeds: neither comparable nor different
    assert findings.fig2d_verdict(report)[0] == "unresolved"
