"""The findings page, docs/reproductions.md: its claims table and every table its sections show, computed from
the committed records (docs/reproductions/paper/fig5_runs.csv, curves.csv, machine_time.csv, and the 10-epoch
summaries of docs/reproductions/<item>/), with the statistics stated right (issue 58):

- a point: the mean over its seeds with a 95 % interval, Student's t with n − 1 degrees of freedom (`mean_ci`;
  "n/a" with one seed);
- a difference between two arms: paired by seed (one seed fixes the data order of both), the mean of the
  per-seed differences with its 95 % t interval (`paired`);
- a trend over Ω: least squares on the per-Ω means (the seeds of one Ω are not independent points of a line),
  the slope per doubling with its 95 % t interval (k − 2 degrees of freedom for k values of Ω), and beside it
  the successive increments per doubling (`slope_fit`); nothing is said beyond the last Ω measured;
- Spearman's ρ only with its two-sided p-value, exact over all n! orderings for n ≤ 9 (`spearman_test`);
- "n/a" wherever a rule or a statistic is undefined (one seed; a branch of two points; a grid whose ends share
  one m).

    .venv/bin/python docs/reproductions/findings.py [--recorded docs/reproductions/paper] \\
        [--out docs/reproductions/findings] [--doc docs/reproductions.md]

--doc fills each ``<!-- findings.py NAME.md -->`` … ``<!-- /findings.py -->`` block of the page with --out's
NAME.md (tests/test_docs.py checks the page holds what this writes). The verdicts are the rules' of
paper_schedule.py (`verdicts`), fixed before the runs they read finished; the queued claims' rules are in
`QUEUED` and on the page, fixed before their runs start.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _schedule():
    """paper_schedule.py beside this file (the record's reader and the verdict rules), loaded by path."""
    spec = importlib.util.spec_from_file_location("paper_schedule", HERE / "paper_schedule.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("paper_schedule", module)
    spec.loader.exec_module(module)
    return module


ps = _schedule()

# ---------------------------------------------------------------------------------------------- statistics


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_sf2(t: float, df: int) -> float:
    """Two-sided tail probability P(|T| ≥ |t|) of Student's t with df degrees of freedom."""
    return _betai(df / 2, 0.5, df / (df + t * t))


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom, by bisection on `t_sf2`."""
    target, lo, hi = 2 * (1 - p), 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf2(mid, df) > target else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % t interval over n values (lo = hi = nan with fewer than two)."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def defined(self) -> bool:
        return self.n >= 2 and not math.isnan(self.lo)

    def excludes_zero(self) -> bool:
        return self.defined and (self.lo > 0 or self.hi < 0)


def mean_ci(values: list[float], level: float = 0.95) -> Interval:
    values = [v for v in values if v is not None]
    if not values:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = t_quantile(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def paired(a: dict[int, float], b: dict[int, float]) -> Interval:
    """a − b over the seeds both have, with the 95 % t interval of the per-seed differences."""
    return mean_ci([a[s] - b[s] for s in sorted(set(a) & set(b))])


def spearman_test(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Spearman's ρ (paper_schedule's, tied values sharing their mean rank) and its two-sided p-value: exact over
    every ordering of the ys' ranks for n ≤ 9, Student's t approximation beyond; (nan, nan) below three points."""
    n = len(xs)
    rho = ps.spearman(xs, ys)
    if n < 3 or math.isnan(rho):
        return math.nan, math.nan
    if n > 9:
        t = rho * math.sqrt((n - 2) / max(1e-300, 1 - rho * rho))
        return rho, t_sf2(t, n - 2)

    def ranks(values):
        order = sorted(range(n), key=lambda i: values[i])
        r, start = [0.0] * n, 0
        while start < n:
            end = start
            while end + 1 < n and math.isclose(values[order[end + 1]], values[order[start]], rel_tol=1e-9):
                end += 1
            for i in order[start : end + 1]:
                r[i] = (start + end) / 2
            start = end + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    centre = n * statistics.fmean(rx) * statistics.fmean(ry)  # E[Σ rx·ry] under a random ordering
    observed = abs(sum(a * b for a, b in zip(rx, ry, strict=True)) - centre)
    hits = total = 0
    for order in itertools.permutations(ry):
        total += 1
        hits += abs(sum(a * b for a, b in zip(rx, order, strict=True)) - centre) >= observed - 1e-9
    return rho, hits / total


def slope_fit(xs: list[float], ys: list[float], level: float = 0.95) -> dict:
    """Least-squares slope of ys on xs with its t interval (len − 2 degrees of freedom; nan below three points),
    and the successive increments (y[i+1] − y[i]) / (x[i+1] − x[i]) in x's order."""
    pairs = sorted(zip(xs, ys, strict=True))
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    increments = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(pairs, pairs[1:], strict=False)]
    if len(xs) < 2:
        return {"slope": math.nan, "lo": math.nan, "hi": math.nan, "df": 0, "increments": increments}
    slope, intercept = statistics.linear_regression(xs, ys)
    df = len(xs) - 2
    if df < 1:
        return {"slope": slope, "lo": math.nan, "hi": math.nan, "df": 0, "increments": increments}
    residual = sum((y - intercept - slope * x) ** 2 for x, y in pairs) / df
    mean_x = statistics.fmean(xs)
    se = math.sqrt(residual / sum((x - mean_x) ** 2 for x in xs))
    half = t_quantile(0.5 + level / 2, df) * se
    return {"slope": slope, "lo": slope - half, "hi": slope + half, "df": df, "increments": increments}


# ---------------------------------------------------------------------------------------------- formatting


def num(value: float, digits: int = 2, sign: bool = False) -> str:
    """A number as the page prints it: typographic minus, "n/a" where undefined."""
    if value is None or math.isnan(value):
        return "n/a"
    text = f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return text.replace("-", "−")


def ci(interval: Interval, scale: float = 100.0, sign: bool = False, digits: int = 2) -> str:
    """ "36.06 [35.19, 36.93]" (the 95 % interval), or the mean alone with one seed."""
    mean = num(scale * interval.mean, digits, sign)
    if not interval.defined:
        return mean
    return f"{mean} [{num(scale * interval.lo, digits)}, {num(scale * interval.hi, digits)}]"


def pvalue(p: float) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else "< 0.001"


def markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join("n/a" if row[k] is None else str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- the records


def finals(runs: list[dict], **where) -> dict[int, float]:
    """seed -> final test error of the finished runs matching `where` (item, omega_exp, family, C, L, ...)."""
    chosen = {}
    for r in runs:
        if r["final"] is not None and all(r.get(k) == v for k, v in where.items()):
            chosen[r["seed"]] = r["final"]
    return chosen


def at_epoch(runs: list[dict], epoch: int, **where) -> dict[int, float]:
    """seed -> test error after `epoch` epochs of the runs matching `where` that reached it (finished or not)."""
    return {
        r["seed"]: r["error_curve"][epoch]
        for r in runs
        if epoch in r["error_curve"] and all(r.get(k) == v for k, v in where.items())
    }


def grid(runs: list[dict], exponent: int, family: str) -> list[tuple[int, int, int]]:
    """The (C, S, m) of a family's Fig. 5 points at Ω = 2^exponent with a finished run, by C."""
    return sorted(
        {
            (r["C"], r["S"], r["m"])
            for r in runs
            if r["item"] == "fig5" and r["omega_exp"] == exponent and r["family"] == family and r["final"] is not None
        }
    )


def centre_of(points: list[tuple]) -> tuple:
    return min(points, key=lambda k: (abs(math.log(k[0] / k[1])), k))


def read_summary(path: Path) -> list[dict]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


# ---------------------------------------------------------------------------------------------- the tables


def centre_finals(runs: list[dict]):
    """Per Ω (ascending), its S ≈ C point and the two families' final errors by seed, over the seeds both have."""
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"}):
        points = grid(runs, exponent, "s_mixer")
        if not points:
            continue
        C, S, _ = centre_of(points)
        where = {"item": "fig5", "omega_exp": exponent, "C": C, "S": S}
        normal, rp = finals(runs, family="s_mixer", **where), finals(runs, family="rp_s_mixer", **where)
        seeds = sorted(set(normal) & set(rp))
        if seeds:
            yield exponent, where, {s: normal[s] for s in seeds}, {s: rp[s] for s in seeds}


def omega_table(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """RP − normal at each Ω's S ≈ C point: per Ω the two families' final errors and their paired gap, each with
    its 95 % interval; and per epoch (10, 50, final) the slope of the per-Ω mean gaps against log2 Ω with its
    interval, beside the increments between successive Ω."""
    rows, by_epoch = [], defaultdict(dict)
    for exponent, where, normal, rp in centre_finals(runs):
        C, S, seeds = where["C"], where["S"], list(normal)
        gap = paired(rp, normal)
        by_epoch["final"][exponent] = gap.mean
        for epoch in (10, 50):
            e_normal = at_epoch(runs, epoch, family="s_mixer", **where)
            e_rp = at_epoch(runs, epoch, family="rp_s_mixer", **where)
            if set(e_normal) & set(e_rp):
                by_epoch[str(epoch)][exponent] = paired(e_rp, e_normal).mean
        rows.append(
            {
                "Ω": f"2^{exponent}",
                "(C, S)": f"({C}, {S})",
                "seeds": len(seeds),
                "S-Mixer %": ci(mean_ci(list(normal.values()))),
                "RP S-Mixer %": ci(mean_ci(list(rp.values()))),
                "RP − normal, paired (points)": ci(gap, sign=True),
            }
        )
    fits = []
    for epoch in ("10", "50", "final"):
        means = by_epoch.get(epoch, {})
        if len(means) < 2:
            continue
        fit = slope_fit(list(means), [100 * v for v in means.values()])
        fits.append(
            {
                "epoch": epoch,
                "Ω": f"2^{min(means)} … 2^{max(means)} ({len(means)} means)",
                "slope, points per doubling [95 % CI]": (
                    f"{num(fit['slope'], sign=True)} [{num(fit['lo'])}, {num(fit['hi'])}]"
                    if fit["df"]
                    else num(fit["slope"], sign=True)
                ),
                "increments per doubling": ", ".join(num(v, sign=True) for v in fit["increments"]),
                "trend": "widening"
                if fit["df"] and fit["lo"] > 0
                else "closing"
                if fit["df"] and fit["hi"] < 0
                else "n/a"
                if not fit["df"]
                else "not resolved",
            }
        )
    return rows, fits


def rank_rows(runs: list[dict]) -> list[dict]:
    """Fig. 5's ρ(m, error) per Ω, family and branch, each with its exact p-value; "n/a" where a branch has
    fewer than three points or its points share one m. Only the Ω whose S-Mixer grid has every point finished."""
    rows = []
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"}):
        planned = {(r["C"], r["S"]) for r in runs if r["item"] == "fig5" and r["omega_exp"] == exponent}
        if {(C, S) for C, S, _ in grid(runs, exponent, "s_mixer")} != {k for k in planned if k[0]}:
            continue  # a grid still training (2^12's): its ρ would read the points that happen to be in
        for family in ("s_mixer", "rp_s_mixer", "sw_mlp"):
            chosen = [
                r
                for r in runs
                if r["item"] == "fig5"
                and r["omega_exp"] == exponent
                and r["family"] == family
                and r["final"] is not None
            ]
            points = ps.by_point(chosen, None)
            if len(points) < 2:
                continue
            keys = sorted(points, key=lambda k: (k[0] or 0, k[2]))
            if family == "sw_mlp":
                branches = [("over its densities", keys)]
            else:
                branches = [
                    ("C ≤ S", [k for k in keys if k[0] <= k[1]]),
                    ("C ≥ S", [k for k in keys if k[0] >= k[1]]),
                    ("across", keys),
                ]
            for name, part in branches:
                ms = [k[2] for k in part]
                distinct = len(set(ms)) >= 3
                rho, p = spearman_test(ms, [points[k][0] for k in part]) if distinct else (math.nan, math.nan)
                errors = [100 * points[k][0] for k in sorted(part, key=lambda k: k[2])]
                rows.append(
                    {
                        "Ω": f"2^{exponent}",
                        "family": ps.FAMILIES[family],
                        "branch": name,
                        "points": len(part),
                        "seeds": f"{min(points[k][2] for k in part)}–{max(points[k][2] for k in part)}",
                        "m": f"{min(ms)} … {max(ms)}",
                        "error % at the smallest → largest m": f"{num(errors[0])} → {num(errors[-1])}",
                        "ρ(m, error)": num(rho, sign=True),
                        "p": pvalue(p),
                    }
                )
    return rows


def fig6_rows(runs: list[dict]) -> list[dict]:
    """Fig. 6 per Ω: every point of the grid, each family's final error [95 % CI] and, paired by seed, its
    difference from S ≈ C (negative: lower than S ≈ C); "(lowest)" marks each family's lowest mean."""
    rows = []
    for exponent in (14, 16):
        points = grid(runs, exponent, "s_mixer")
        if len(points) < 3:
            continue
        centre = centre_of(points)
        cells: dict[tuple, dict] = {k: {} for k in points}
        for family, name in (("s_mixer", "S-Mixer"), ("rp_s_mixer", "RP")):
            where = {"item": "fig5", "omega_exp": exponent, "family": family}
            errors = {k: finals(runs, C=k[0], S=k[1], **where) for k in points}
            errors = {k: v for k, v in errors.items() if v}
            if centre not in errors:
                continue
            best = min(errors, key=lambda k: statistics.fmean(errors[k].values()))
            for k, values in errors.items():
                cells[k][f"{name} %"] = ci(mean_ci(list(values.values()))) + (" (lowest)" if k == best else "")
                cells[k][f"{name} − S ≈ C"] = "–" if k == centre else ci(paired(values, errors[centre]), sign=True)
                cells[k][f"{name} seeds"] = len(values)
        for k in points:
            cell = cells[k]
            rows.append(
                {
                    "Ω": f"2^{exponent}",
                    "(C, S)": f"({k[0]}, {k[1]})",
                    "C/S": num(k[0] / k[1], 1),
                    "seeds": f"{cell.get('S-Mixer seeds', 0)}, {cell.get('RP seeds', 0)}",
                    **{key: cell.get(key, "n/a") for key in ("S-Mixer %", "S-Mixer − S ≈ C", "RP %", "RP − S ≈ C")},
                }
            )
    return rows


def fig7_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for depth in sorted({r["L"] for r in runs if r["item"] == "fig7" and r["L"]}):
        where = {"item": "fig7", "L": depth}
        normal, rp = finals(runs, family="s_mixer", **where), finals(runs, family="rp_s_mixer", **where)
        if not (normal and rp):
            continue
        rows.append(
            {
                "L": depth,
                "seeds": len(set(normal) & set(rp)),
                "S-Mixer %": ci(mean_ci(list(normal.values()))),
                "RP S-Mixer %": ci(mean_ci(list(rp.values()))),
                "RP − normal, paired (points)": ci(paired(rp, normal), sign=True),
                "graded": "yes" if depth in ps.FIG7_RULE_DEPTHS else "no (added after the rule)",
            }
        )
    return rows


def d5_rows(runs: list[dict]) -> list[dict]:
    none = finals(runs, item="fig7", family="s_mixer", L=4)
    rows = []
    groups: dict[str, dict[int, float]] = defaultdict(dict)
    for r in runs:
        if r["item"] == "d5" and r["final"] is not None:
            groups[ps.rp_blocks(r["permute"])][r["seed"]] = r["final"]
    groups["all four"] = finals(runs, item="fig7", family="rp_s_mixer", L=4)
    for label in sorted(groups, key=lambda k: (k == "all four", k)):
        errors = groups[label]
        rows.append(
            {
                "RP block": label,
                "seeds": len(errors),
                "error %": ci(mean_ci(list(errors.values()))),
                "minus no RP block, paired (points)": ci(paired(errors, none), sign=True),
            }
        )
    return [{"RP block": "none", "seeds": len(none), "error %": ci(mean_ci(list(none.values()))),
             "minus no RP block, paired (points)": "–"}] + rows  # fmt: skip


def fit_rows(runs: list[dict]) -> list[dict]:
    """Fig. 7's runs: the last epoch's training loss and the test loss, per depth and family."""
    rows = []
    for row in ps.fig7_fit(runs):
        rows.append({k: row[k] for k in ("L", "family", "train_loss", "test_loss", "test_minus_train")})
    return rows


# ---------------------------------------------------------------------------------------------- not run, queued


# Minutes a CIFAR-10 epoch takes on this CPU (one thread, two lanes, nothing else beside them) as a function of
# the mixing layers' multiply-adds per image, fitted to the S-Mixer's measured quiet pace at Ω = 2^16 and 2^18
# (machine_time.csv's quiet_min): a + b·MACs. Costs of the rows not run are this, times epochs and runs: an
# estimate of the order (PIL AutoAugment, bigger images and ImageNet's data path cost more than it says).
def epoch_minutes_model(timed: list[dict]) -> tuple[float, float]:
    pace = {}
    for row in timed:
        if row["item"] == "fig5" and row["family"] == "S-Mixer" and row["quiet_min"] not in ("", None):
            exponent = int(str(row["omega"]).split("^")[1])
            pace[exponent] = float(row["quiet_min"]) / 200
    (x1, y1), (x2, y2) = [(8 * 2 * 2**e / 1e6, pace[e]) for e in (16, 18)]
    b = (y2 - y1) / (x2 - x1)
    return y1 - b * x1, b


@dataclass(frozen=True)
class Cost:
    """A claim not run here: runs × epochs of a model whose mixing layers take `macs_m` million multiply-adds
    per image, on `images` CIFAR-sized training images per epoch (ImageNet: its 1.28 M at 224² ≈ 49× CIFAR's
    pixels each)."""

    runs: int
    epochs: int
    macs_m: float
    images_factor: float = 1.0

    def core_hours(self, model: tuple[float, float]) -> float:
        a, b = model
        return self.runs * self.epochs * (a + b * self.macs_m) * self.images_factor / 60


def human(hours: float) -> str:
    if hours < 48:
        return f"≈ {hours:.0f} core-hours"
    if hours < 24 * 60:
        return f"≈ {hours / 24:.0f} core-days"
    if hours < 24 * 730:
        return f"≈ {hours / 24 / 30.4:.0f} core-months"
    return f"≈ {hours / 24 / 365:.0f} core-years"


def s_mixer_macs(omega: float, blocks: int) -> float:
    return blocks * 2 * omega / 1e6


def mlp_mixer_macs(omega: float, blocks: int) -> float:
    return blocks * 4 * omega / 1e6  # Ω = γ(C²S + CS²)/2 per layer, four layers a block


def sw_mlp_macs(widths: list[float], blocks: int, layers: int = 1, gamma: float = 1) -> float:
    """An SW-MLP as masked dense weights (impl: dense, what a CPU runs fastest): every block's m² (γm² a layer of
    an MLP block), averaged over the grid's widths."""
    return statistics.fmean(blocks * layers * gamma * m * m for m in widths) / 1e6


FIG4_WIDTHS = [1440, 2016, 2436, 2768, 3040, 3264, 3472, 3616, 3744, 3840, 3916, 3984, 4096]  # App. C.2's grid
S1_WIDTHS = [math.sqrt(2**12 / p) for p in (1, 1 / 4, 1 / 16, 1 / 64)]  # m = √(Ω/p) at Ω = 2^12


NOT_RUN = [
    # (row key, claim, passage, cost, command)
    (
        "fig4",
        "“both networks' test error improved as the width increased”",
        "H&K Sec. 4.2, Fig. 4",
        # 13 widths × 2 families × 4 seeds, 600 epochs, Ω = 2^19, γ = 2, 3 blocks; the SW-MLP dense (6 MLP blocks)
        Cost(104, 600, (mlp_mixer_macs(2**19, 3) + sw_mlp_macs(FIG4_WIDTHS, 6, 2, 2)) / 2),
        "`mixer sweep --config configs/cifar10_fig4_mixer.yaml --omega 2**19 --gamma 2 --channels 4,8,…,64 "
        "--seeds 0,1,2,3` and `cifar10_fig4_sw_mlp.yaml`",
    ),
    (
        "d2",
        "“the test accuracy improves as the width increases” (γ = 4, lr 0.1)",
        "H&K D.2, Fig. S.2",
        Cost(3 * 7 * 3, 200, mlp_mixer_macs(2**18, 8)),
        "`mixer sweep --config configs/cifar10_d2_mlp_mixer.yaml --omega 2**18 --gamma 4 "
        "--channels 16,32,48,64,83,113,173 --seeds 0,1,2` (and the rp / sw_mlp configs; 2^20 not counted)",
    ),
    (
        "d3",
        "“Increasing expansion factor γ improved the test error”",
        "H&K D.3, Fig. S.3",
        Cost(2 * 7 * 3, 200, mlp_mixer_macs(2**19, 8)),
        "`mixer fit --config configs/cifar10_d3_mlp_mixer.yaml --model.net.channels C --model.net.tokens 4096/C "
        "--model.net.gamma γ`",
    ),
    (
        "d6",
        "the best patch size depends on the data",
        "H&K D.6, Fig. S.5",
        Cost(6 * 2 * 3, 200, s_mixer_macs(64**3, 4)),
        "`mixer sweep --config configs/cifar10_d6_s_mixer.yaml --grid model.net.init_args.patch_size=1,2,4,8,16,32 "
        "--seeds 0,1,2`",
    ),
    (
        "fig6_s2",
        "Fig. 6 at its own settings",
        "H&K Fig. 6, Table S.2",
        Cost(2 * 7 * 5, 2000, s_mixer_macs(2**21, 12)),
        "`mixer sweep --config configs/cifar10_fig6_s_mixer.yaml --omega 2**21 --seeds 0,1,2,3,4` (and RP)",
    ),
    (
        "c100_stl",
        "every figure on CIFAR-100 and STL-10",
        "H&K Figs. 5–7, D.5–D.6",
        # the CIFAR-10 runs of this page again on CIFAR-100 (same size); STL-10 (5,000 images of 96²) about as much
        Cost(2 * 110, 200, s_mixer_macs(2**14, 8)),
        "the `configs/cifar100_*.yaml` and `configs/stl10_*.yaml` of each figure through `run_cpu.sh`'s items",
    ),
    (
        "untied",
        "untied token mixing: “We did not observe any noticeable improvements”",
        "Tolstikhin Supp. A.1",
        Cost(2 * 2, 200, s_mixer_macs(2**14, 8)),
        "none yet: the package has no untied token-mixing option (a model change)",
    ),
    (
        "hk_imagenet",
        "“Its test error eventually improved more than the original MLP-Mixer (Mixer-B/16)”",
        "H&K Sec. 5.3, Table 1 (lower); Fig. 6(d)",
        Cost(2, 300, 12_600, 1_281_167 / 50_000),
        "`mixer fit --config configs/imagenet_mixer_b_w.yaml` and `imagenet_mixer_b16.yaml` (Fig. 6(d): "
        "`imagenet_fig6_mlp_mixer.yaml` per grid point)",
    ),
    (
        "imagenet",
        "“Mixer-B/16 achieves a reasonable top-1 accuracy of 76.44%”",
        "Tolstikhin Sec. 3.2",
        Cost(1, 300, 12_600, 1_281_167 / 50_000),
        "`mixer fit --config configs/imagenet_mixer_b16_tolstikhin.yaml`",
    ),
]

# The queued claims: their decision rules, fixed here before any of their runs starts (issue 58, item 4).
QUEUED = {
    "sec34": (
        "On the final test error, seeds 0, 1 and 2, each shuffled arm minus the unshuffled S-Mixer of the same seed "
        "(section 0's runs at (25, 26), the same config). Patch + pixel shuffling is invariant if its paired 95 % "
        "interval includes 0 and its mean is within ±1 point; global shuffling degrades if its interval lies above "
        "0. **reproduced** if both hold, **partly** if one, **not** if neither."
    ),
    "s1": (
        "On the last epoch's training loss, mean of seeds 0 and 1 per density p = 1, 1/4, 1/16, 1/64: "
        "**reproduced** if the sparsest SW-MLP's loss is above the lowest loss of the four by more than twice the "
        "larger seed sd of the two (trainability falls at high sparsity); **not** if the sparsest has the lowest "
        "loss; **partly** otherwise. Beside it, not graded: the test error."
    ),
    "fig2d": (
        "On the final test error, five seeds each, Kronecker minus Monarch paired by seed: **reproduced** "
        "(comparable) if its 95 % interval lies inside ±2 points; **not** if the interval excludes 0 and the mean "
        "is beyond ±2 points; **unresolved** otherwise."
    ),
}


def sec34_verdict(runs: list[dict]) -> tuple[str, str] | None:
    """QUEUED["sec34"] on the record: None until both shuffled arms have a finished run."""
    base = finals(runs, item="fig5", omega_exp=14, family="s_mixer", C=25, S=26)
    arms = {}
    for mode, tag in (("patch + pixel", "patch-pixel"), ("global", "global")):
        arms[mode] = {r["seed"]: r["final"] for r in runs if r["item"] == "sec34" and r["final"] is not None
                      and tag in str(r["point"])}  # fmt: skip
    if not all(arms.values()):
        return None
    patch, glob = paired(arms["patch + pixel"], base), paired(arms["global"], base)
    invariant = patch.defined and not patch.excludes_zero() and abs(patch.mean) < 0.01
    degraded = glob.defined and glob.lo > 0
    verdict = "reproduced" if invariant and degraded else "partly" if invariant or degraded else "not"
    return verdict, f"patch + pixel − none {ci(patch, sign=True)}; global − none {ci(glob, sign=True)} pts"


def s1_verdict(runs: list[dict]) -> tuple[str, str] | None:
    """QUEUED["s1"] on the record: None until every density has two finished seeds."""
    losses: dict[float, list[float]] = defaultdict(list)
    for r in runs:
        if r["item"] == "s1" and r["final"] is not None and r.get("train_loss") is not None:
            losses[r["p"]].append(r["train_loss"])
    if len(losses) < 4 or any(len(v) < 2 for v in losses.values()):
        return None
    stats = {p: (statistics.fmean(v), statistics.stdev(v)) for p, v in losses.items()}
    sparsest = min(stats)
    lowest = min(stats, key=lambda p: stats[p][0])
    margin = 2 * max(stats[sparsest][1], stats[lowest][1])
    rise = stats[sparsest][0] - stats[lowest][0]
    verdict = "not" if lowest == sparsest else "reproduced" if rise > margin else "partly"
    return (
        verdict,
        f"training loss at p = {sparsest:g} − the lowest {num(rise, 3, sign=True)} (margin {num(margin, 3)})",
    )


def fig2d_verdict(report: Path) -> tuple[str, str] | None:
    """QUEUED["fig2d"] on `report.sh fig2d`'s report.csv (one row per run): None until both arms have a run."""
    if not report.is_file():
        return None
    arms: dict[str, dict[int, float]] = {"kron": {}, "monarch": {}}
    for row in read_summary(report):
        for arm in arms:
            if row["series"] == f"paper_fig2d_{arm}" and row.get("test_error"):
                arms[arm][int(row["seed"])] = float(row["test_error"])
    if not all(arms.values()):
        return None
    gap = paired(arms["kron"], arms["monarch"])
    if gap.defined and -0.02 < gap.lo and gap.hi < 0.02:
        verdict = "reproduced"
    elif gap.excludes_zero() and abs(gap.mean) > 0.02:
        verdict = "not"
    else:
        verdict = "unresolved"
    return verdict, f"Kronecker − Monarch {ci(gap, sign=True)} pts ({gap.n} seeds, 8×8 digits)"


def claims_table(runs: list[dict], judged: list[dict], timed: list[dict]) -> list[dict]:
    """The page's first screen: a row per claim."""
    verdict = {(row["omega"], row["claim"]): row for row in judged}

    def v(omega: int, claim: str) -> str:
        row = verdict.get((f"2^{omega}", claim))
        if row is None:
            return "n/a"
        return f"**{row['verdict']}**" + (
            "" if row["status"] == "final" else f" (provisional, {row['runs_to_go']} to go)"
        )

    ranks = {(r["Ω"], r["family"], r["branch"]): r for r in rank_rows(runs)}

    def rho(omega: int, family: str, branch: str) -> str:
        row = ranks.get((f"2^{omega}", family, branch))
        return "n/a" if row is None else f"ρ {row['ρ(m, error)']} (p {row['p']}, {row['points']} pts)"

    omegas, fits = omega_table(runs)
    final_fit = next(f for f in fits if f["epoch"] == "final")
    rows = []

    def add(key, claim, passage, verdict_text, number, plot):
        rows.append(
            {
                "#": len(rows) + 1,
                "claim (paper's words)": f"{claim} ([{passage}](#{key}))",
                "verdict": verdict_text,
                "headline (95 % CI; Ω, epochs, seeds)": number,
                "plot": plot,
            }
        )

    # Fig. 5 per family
    add(
        "fig-5",
        "“the test error improves as the effective width … increases”: S-Mixer",
        "H&K Sec. 5.3, Fig. 5",
        v(14, "Fig. 5, S-Mixer"),
        f"C ≤ S: {rho(14, 'S-Mixer', 'C ≤ S')}; C ≥ S: {rho(14, 'S-Mixer', 'C ≥ S')}; 2^14, 200 ep, 2–3 seeds",
        "[fig](reproductions/paper/fig5_error.png)",
    )
    add(
        "fig-5",
        "the same: SW-MLP",
        "H&K Fig. 5",
        v(14, "Fig. 5, SW-MLP"),
        f"{rho(14, 'SW-MLP', 'over its densities')}: "
        f"{ranks[('2^14', 'SW-MLP', 'over its densities')]['error % at the smallest → largest m']} %; "
        "2^14, 200 ep, 2–3 seeds",
        "[fig](reproductions/paper/fig5_error.png)",
    )
    six = fig6_rows(runs)

    def mean_of(row: dict, family: str = "S-Mixer") -> float:
        return float(row[f"{family} %"].split()[0].replace("−", "-"))

    spread = [r for r in six if r["Ω"] == "2^14"]
    behind = sum(mean_of(r, "RP") > mean_of(r) for r in spread)
    add(
        "rp-vs-normal",
        "“The normal and RP S-Mixers show similar tendencies”",
        "H&K Sec. 5.3",
        v(14, "Fig. 5, RP S-Mixer"),
        f"RP across: {rho(14, 'RP S-Mixer', 'across')}; RP behind at {behind} of {len(spread)} C; 2^14, 200 ep",
        "[fig](reproductions/paper/fig5_error.png)",
    )
    add(
        "rp-vs-normal",
        "(ours) RP − normal as Ω grows, at S ≈ C",
        "issue 45",
        f"**{final_fit['trend']}** to 2^18",
        f"{final_fit['slope, points per doubling [95 % CI]']} pts/doubling on {len(omegas)} Ω means; "
        f"steps {final_fit['increments per doubling']}; 200 ep, 2–3 seeds",
        "[fig](reproductions/findings/omega_gap.png)",
    )
    low14 = sorted(spread, key=mean_of)
    wider = [mean_of(r) for r in spread if float(r["C/S"]) > 1]
    wide14 = max(wider) - min(wider)
    add(
        "fig-6",
        "“the test error was minimized around C = S”",
        "H&K Sec. 5.4, Fig. 6",
        v(14, "Fig. 6, S-Mixer"),
        f"2^14: lowest at C/S {low14[0]['C/S']}, {low14[0]['S-Mixer − S ≈ C']} pts vs S ≈ C; next C/S "
        f"{low14[1]['C/S']}; C > S side within {num(wide14)} pts; 200 ep, 2–3 seeds",
        "[fig](reproductions/paper/fig5_error.png)",
    )
    at16 = {r["(C, S)"]: r for r in six if r["Ω"] == "2^16"}
    if at16:
        end_hi = max(at16, key=lambda k: int(k[1:].split(",")[0]))
        end_lo = min(at16, key=lambda k: int(k[1:].split(",")[0]))
        add(
            "fig-6",
            "the same at Ω = 2^16 (three points)",
            "H&K Fig. 6",
            v(16, "Fig. 6, S-Mixer"),
            f"{end_hi} − S ≈ C {at16[end_hi]['S-Mixer − S ≈ C']} pts ({at16[end_hi]['seeds'].split(',')[0]} seeds); "
            f"RP: {end_lo} − S ≈ C {at16[end_lo]['RP − S ≈ C']} ({at16[end_lo]['seeds'].split(', ')[1]} seeds)",
            "[fig](reproductions/paper/fig5_claims_2p16.png)",
        )
    sevens = fig7_rows(runs)
    add(
        "fig-7",
        "“RP Mixers can become comparable to or even beat normal ones if the depth increases”",
        "H&K Fig. 7, Sec. 5.4",
        v(14, "Fig. 7, RP catches up with depth"),
        "RP − normal "
        + ", ".join(f"{r['RP − normal, paired (points)'].split()[0]}" for r in sevens)
        + f" at L = {', '.join(str(r['L']) for r in sevens)}; 25³, 200 ep, 2 seeds",
        "[fig](reproductions/paper/fig7_gap.png)",
    )
    fives = {r["RP block"]: r for r in d5_rows(runs)}
    add(
        "d5",
        "“this deterioration is attributed to the first block”",
        "H&K D.5",
        v(14, "App. D.5, the first block matters most"),
        f"block 1 − none {fives['block 1']['minus no RP block, paired (points)']} pts (blocks 2–4: "
        + ", ".join(fives[f"block {b}"]["minus no RP block, paired (points)"].split()[0] for b in (2, 3, 4))
        + f"); 25³, 200 ep, {fives['block 1']['seeds']} seeds",
        "[table](#d5)",
    )
    cka = {row["p"]: float(row["cka_diagonal_mean"]) for row in read_summary(HERE / "fig2" / "cka.csv")}
    add(
        "fig-2b-c",
        "“the averaged CKA achieved the maximum as an appropriate sparsity”",
        "H&K Sec. 3.4, Fig. 2",
        "**partly** (10 ep)",
        "diag. CKA "
        + " / ".join(f"{cka[p]:.3f}" for p in sorted(cka, key=float, reverse=True))
        + " at p = 2^-2 / 2^-5 (match) / 2^-8; 1 seed",
        "[fig](reproductions/fig2/cka_vs_density.png)",
    )
    table1 = {row["series"]: float(row["test_error_mean"]) for row in read_summary(HERE / "table1" / "summary.csv")}
    add(
        "table-1",
        "“a wider Mixer (Mixer-SS-W) has better performance”",
        "H&K Sec. 5.3, Table 1",
        "**not testable** here",
        f"1 epoch: SS/8 {100 * table1['table1_ss8']:.1f}, SS-W {100 * table1['table1_ss_w']:.1f} % (chance 90); "
        f"4,000 ep: {human(Cost(6, 4000, 256).core_hours(epoch_minutes_model(timed)))}",
        "–",
    )
    across = (HERE / "rp_regimes" / "verdict.md").read_text()  # rp_regimes.py's reading across the regimes
    across = re.search(r"\*\*(?P<verdict>.+)\*\*", across)["verdict"]
    add(
        "rp-regimes",
        "RP in the paper's regimes: “RP can prevent the overfitting”",
        "H&K D.7, S.6, S.8",
        "**queued**" if across.startswith("pending") else f"**{across}**",
        regime_headline(HERE / "rp_regimes" / "regimes.csv"),
        "[rules](reproductions/rp_regimes.md)",
    )
    graded = sec34_verdict(runs)
    add(
        "queued",
        "“Mixer is invariant to the order of patches and pixels within the patches”",
        "Tolstikhin Sec. 3.4",
        f"**{graded[0]}**" if graded else "**queued**",
        graded[1]
        if graded
        else f"6 runs, {human(Cost(6, 200, s_mixer_macs(2**14, 8)).core_hours(epoch_minutes_model(timed)))}",
        "–",
    )
    graded = s1_verdict(runs)
    add(
        "queued",
        "“Trainability decreases as the sparsity 1 − p becomes too high”",
        "H&K D.1, Fig. S.1",
        f"**{graded[0]}**" if graded else "**queued**",
        graded[1]
        if graded
        else f"2^12, 8 runs, {human(Cost(8, 200, sw_mlp_macs(S1_WIDTHS, 8)).core_hours(epoch_minutes_model(timed)))}",
        "–",
    )
    graded = fig2d_verdict(HERE / "fig2d" / "report.csv")
    add(
        "queued",
        "Monarch and Kronecker weights “showed comparable performance”",
        "H&K Fig. 2(d)",
        f"**{graded[0]}**" if graded else "**queued**",
        graded[1] if graded else "8×8 digits for MNIST, 10 runs, ≈ 1 core-hour",
        "–",
    )
    model = epoch_minutes_model(timed)
    for _key, claim, passage, cost, _command in NOT_RUN:
        add("not-run", claim, passage, "not run", human(cost.core_hours(model)), "–")
    return rows


def regime_headline(path: Path) -> str:
    """Row 11's headline: each regime's RP − normal (rp_regimes.py's table), or where its runs stand."""
    with open(path, newline="") as file:
        rows = [r for r in csv.DictReader(file) if r["regime"] != "App. C.4" and r["verdict"]]
    parts = []
    for row in rows:
        arm = row["regime"].split(")")[0] + ")"
        if "provisional" in row["verdict"]:
            parts.append(f"{arm} training")
        else:
            parts.append(f"{arm} {row['RP − normal, points (95 % CI)']} pts, {row['verdict']}")
    return "; ".join(parts) + "; 2^14, 2 seeds"


def readme_lines(runs: list[dict], judged: list[dict], claims: list[dict]) -> str:
    """The README's three lines of findings and its figure (filled between its findings.py markers)."""
    ranks = {(r["Ω"], r["family"], r["branch"]): r for r in rank_rows(runs)}
    left = ranks[("2^14", "S-Mixer", "C ≤ S")]
    fits = {f["epoch"]: f for f in omega_table(runs)[1]}
    six = [r for r in fig6_rows(runs) if r["Ω"] == "2^14"]
    lowest = sorted(six, key=lambda r: float(r["S-Mixer %"].split()[0]))[:2]
    verdict = {row["claim"]: row["verdict"] for row in judged if row["omega"] == "2^14"}
    waiting = sum(row["verdict"] == "**queued**" for row in claims)
    costed = sum(row["verdict"] == "not run" for row in claims)
    omegas = sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"})
    return (
        f"**Findings** ([a row per claim](docs/reproductions.md); CIFAR-10, 200 epochs, "
        f"Ω = 2^{omegas[0]} … 2^{omegas[-1]}, a 2-core CPU):\n"
        f"- Width helps along C ≤ S (H&K Fig. 5: ρ {left['ρ(m, error)']}, p {left['p']}) and for the SW-MLP; "
        f"along C > S the error is flat, the optimum at C/S ≈ "
        f"{min(r['C/S'] for r in lowest)}–{max(r['C/S'] for r in lowest)}, not S = C "
        f"(Fig. 6: {verdict['Fig. 6, S-Mixer']}).\n"
        f"- The randomly permuted (RP) S-Mixer trails the normal one, by a gap that grows with Ω, "
        f"{fits['final']['slope, points per doubling [95 % CI]']} points per doubling up to 2^{omegas[-1]}, and "
        f"with depth (Fig. 5 RP: {verdict['Fig. 5, RP S-Mixer']}; Fig. 7: {verdict['Fig. 7, RP catches up with depth']}).\n"
        f"- App. D.5 is {verdict['App. D.5, the first block matters most']}: an RP first block costs the most. "
        f"{waiting} more are queued with their rules, {costed} costed, not run.\n"
        "\n![RP − normal at S ≈ C against Ω](docs/reproductions/findings/omega_gap.png)\n"
    )


def not_run_rows(timed: list[dict]) -> list[dict]:
    model = epoch_minutes_model(timed)
    return [
        {
            "claim": f"{claim} ({passage})",
            "runs × epochs": f"{cost.runs} × {cost.epochs}",
            "cost on this CPU": human(cost.core_hours(model)),
            "command": command,
        }
        for _key, claim, passage, cost, command in NOT_RUN
    ]


def plot_omega(runs: list[dict], out: Path) -> None:
    """RP − normal at S ≈ C against Ω: each seed a dot, the per-Ω mean with its 95 % interval, the fitted line
    over the measured Ω only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs, means = [], []
    for exponent, _, normal, rp in centre_finals(runs):
        gaps = [100 * (rp[s] - normal[s]) for s in normal]
        interval = mean_ci(gaps)
        xs.append(exponent)
        means.append(interval.mean)
        ax.plot(
            [exponent - 0.12] * len(gaps),
            gaps,
            "o",
            color="C0",
            ms=4,
            alpha=0.7,
            label="seeds" if len(xs) == 1 else None,
        )
        if interval.defined:
            ax.errorbar(
                [exponent],
                [interval.mean],
                yerr=[[interval.mean - interval.lo], [interval.hi - interval.mean]],
                fmt="s",
                color="C1",
                capsize=3,
                label="mean, 95 % interval" if len(xs) == 1 else None,
            )
    fit = slope_fit(xs, means)
    line = statistics.linear_regression(xs, means)
    ax.plot(xs, [line.intercept + line.slope * x for x in xs], "-", color="C1", lw=1, label="line fitted to the means")
    ax.set_xticks(xs, [f"2^{x}" for x in xs])
    ax.set(
        xlabel="Ω (connections per layer), S ≈ C, 200 epochs",
        ylabel="RP − normal test error (points)",
        title=f"RP gap vs Ω: {num(fit['slope'], sign=True)} [{num(fit['lo'])}, {num(fit['hi'])}] per doubling",
    )
    ax.axhline(0, color="k", lw=0.8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "omega_gap.png", dpi=110)
    plt.close(fig)


def write_all(recorded: Path, out: Path, plot: bool = True) -> dict[str, str]:
    """Every table of the page into `out` (NAME.md, and NAME.csv beside it); returns NAME.md -> text."""
    runs = ps.read_recorded(recorded)
    judged = ps.verdicts(runs)
    timed = read_summary(recorded / "machine_time.csv")
    omegas, fits = omega_table(runs)
    tables = {
        "claims.md": claims_table(runs, judged, timed),
        "omega.md": omegas,
        "omega_slope.md": fits,
        "ranks.md": rank_rows(runs),
        "fig6.md": fig6_rows(runs),
        "fig7.md": fig7_rows(runs),
        "fig7_fit.md": fit_rows(runs),
        "d5.md": d5_rows(runs),
        "not_run.md": not_run_rows(timed),
        "verdicts.md": [{k: row[k] for k in ("omega", "claim", "reading", "verdict", "status")} for row in judged],
    }
    out.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name, rows in tables.items():
        texts[name] = markdown(rows)
        (out / name).write_text(texts[name])
        ps.write_csv(out / name.replace(".md", ".csv"), rows)
    texts["rules.md"] = "".join(f"- `{key}`: {rule}\n" for key, rule in QUEUED.items())
    texts["readme.md"] = readme_lines(runs, judged, tables["claims.md"])
    (out / "readme.md").write_text(texts["readme.md"])
    (out / "rules.md").write_text(texts["rules.md"])
    if plot:
        plot_omega(runs, out)
    return texts


def fill_doc(doc: Path, texts: dict[str, str]) -> int:
    """Each ``<!-- findings.py NAME.md -->`` … ``<!-- /findings.py -->`` block of `doc` becomes texts[NAME.md]."""
    lines = doc.read_text().splitlines(keepends=True)
    out, filled, i = [], 0, 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        stripped = line.strip()
        if stripped.startswith("<!-- findings.py ") and stripped.endswith(" -->"):
            name = stripped[len("<!-- findings.py ") : -len(" -->")]
            if name not in texts:
                raise SystemExit(f"findings.py: {doc} line {i + 1}: no table {name}; one of {', '.join(sorted(texts))}")
            end = i + 1
            while end < len(lines) and lines[end].strip() != "<!-- /findings.py -->":
                end += 1
            if end == len(lines):
                raise SystemExit(f"findings.py: {doc} line {i + 1}: the block of {name} is not closed")
            out.append(texts[name])
            i, filled = end, filled + 1
            continue
        i += 1
    doc.write_text("".join(out))
    return filled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recorded", default=str(HERE / "paper"))
    parser.add_argument("--out", default=str(HERE / "findings"))
    parser.add_argument("--doc", action="append", default=[], help="a page whose findings.py blocks to fill")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    texts = write_all(Path(args.recorded), Path(args.out), plot=not args.no_plot)
    for doc in args.doc:
        print(f"{doc}: {fill_doc(Path(doc), texts)} tables")
    print(texts["claims.md"])


if __name__ == "__main__":
    main()
