"""The tables, curves and plots of docs/reproductions/appendix.md's "At the paper's schedule" sections (0 and 0b), and
the record docs/reproductions/findings.py reads for the findings page (docs/reproductions.md), from the runs
of `docs/reproductions/run_cpu.sh paper_fig5 | paper_fig7 | paper_fig7_l20 | paper_d5` (200 epochs at Ω = 2^12, 2^14, 2^16).

    .venv/bin/python docs/reproductions/paper_schedule.py [--runs runs/repro] [--out docs/reproductions/paper]

--recorded docs/reproductions/paper counts the runs an earlier report wrote there (fig5_runs.csv, curves.csv)
beside those under --runs: a sweep goes on on another (or a renewed) machine with only its remaining runs. Per
run (sweep, point, seed) a finished run wins over an unfinished one, then the longer curve; a run finished in
both, the run directory's figure.

Every run validates on the CIFAR-10 test split once per epoch (`val_split: 0`), so its `val/acc1` curve is
the test error at every epoch; the final figure is `mixer test` of `last.ckpt` (test_metrics.json), the model
after the last epoch (our choice: the paper does not say which checkpoint it reports). Unfinished runs contribute their curves up to where they are (marked), never a
final figure. Writes into --out:

- ``fig5_runs.csv``: one row per run (sweep, family, Ω, C, S, m, p, seed, epochs logged, final test error,
  minutes, a finished run's last training loss and its test loss);
- ``curves.csv``: every run's test error after every epoch (the data behind the curves and claims);
- ``points.csv`` / ``points.md``: each point's test error at epochs 10–150 and final, mean ± sd (seeds);
- ``fig5_error.png``: test error against m and against C, one line per (family, Ω), mean ± sd over seeds;
- ``fig5_curves_2p<E>.png``: test error against the epoch, one line per C (S-Mixer solid, RP dashed);
- ``claims.csv`` and ``claims.md``: at chosen epochs, each claim's statistic (below), so the budget question
  of the 10-epoch sections is answered from the same runs;
- ``claims_by_epoch.csv`` and ``fig5_claims_2p<E>.png``: the same statistics after every epoch, over the
  finished runs only (a seed still running would change the mean's make-up part way), so that the epoch at
  which a claim appears (or stops holding) can be read off (issue 24, item 5);
- ``third_seed.csv`` / ``third_seed.md``: the pairs of points closer than twice their seeds' spread, which
  need a third seed (issue 24's rule; `third_seed_points`), or have it and are still that close, and
  ``third_seed_runs.csv``, those of their points with fewer than three seeds, once each, which
  `run_cpu.sh paper_third_seed` trains at seed 2;
- ``machine_time.csv`` / ``machine_time.md``: the minutes each family's finished runs took (median,
  range, lane-hours), from each run's epoch times (``minutes`` in ``fig5_runs.csv``);
- ``fig7_gap.png`` / ``fig7.csv`` / ``fig7.md`` / ``fig7_by_epoch.csv``: RP − normal against depth L (final, and
  at chosen epochs), and per L after every epoch (finished runs only);
- ``fig7_fit.csv`` / ``fig7_fit.md``: per L and family, the last epoch's training loss beside the test loss
  (`fig7_fit`: does anything overfit, which the paper's explanation of RP catching up needs);
- ``d5.csv`` / ``d5.md``: App. D.5's one-RP-block runs by the block's position, beside none and all (Fig. 7's
  L = 4 runs), and each one's final error minus none's.
- ``omega.csv`` / ``omega.md``, ``omega_fit.csv`` / ``omega_fit.md`` and ``omega_gap.png``: RP − normal at each
  Ω's S ≈ C point at epochs 10, 50 and final, paired by seed, and its fitted slope per doubling of Ω (section 0b,
  issue 45: does the gap close as the model grows, towards the paper's figures at Ω ≥ 2^18?).
- ``verdicts.csv`` / ``verdicts.md``: each claim below read by the rules section 0 fixed before the runs
  (`verdicts`): reproduced, partly or not, "final" once the runs it reads are all in, else "provisional".

--doc docs/reproductions/appendix.md then copies these tables into the page (`fill_doc`): each block between
``<!-- paper_schedule.py NAME.md -->`` and ``<!-- /paper_schedule.py -->`` becomes the table of --out's NAME.md,
so the page's tables are written by the run that writes the report, not by hand (a machine-local script did
this until the machine was renewed and took it along).

Claims and their statistics (H&K 2024):
- Fig. 5 "error falls as the effective width m grows": Spearman ρ(m, error) over the S-Mixer's points
  (negative: the claim's direction), and the same on each branch (C ≤ S and C ≥ S);
- Fig. 6 "the lowest error near S = C": the C of the lowest mean error, and error(S ≈ C) minus the lower
  of the two extremes of the grid (negative: S = C wins), beside twice the largest seed sd of those three
  points (``centre_noise_pts``: a margin below it is within the seeds' noise);
- Fig. 5 / Sec. 5.3 "RP tracks the normal Mixer": mean over C of RP − normal, and the RP S-Mixer's own
  ρ(m, error) across its grid and on each branch ("similar tendencies" with m);
- Fig. 5's SW-MLP arm: ρ(m, error) over its densities;
- Fig. 7 "RP catches up with depth": RP − normal at each L.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def grid_ticks(*args, **kwargs):
    """The sweep plots' ticks at the grid's values (imported when a plot is drawn: reading the committed
    record and filling the pages need nothing from the package)."""
    from mixer_lightning.commands.sweep.plots import grid_ticks as ticks

    return ticks(*args, **kwargs)


EPOCHS = (5, 10, 20, 50, 100, 150, 200)
CURVE_KEYS_ORDER = ("sweep", "point", "seed", "epoch", "test_error")  # curves.csv's columns
CURVE_KEYS = set(CURVE_KEYS_ORDER)
# The decimals the record (fig5_runs.csv, curves.csv) keeps of a run. read_runs keeps the same, so a table reads
# the same from the run directories as from the record: float32 noise would otherwise decide ties (Spearman ρ)
# and .xx5 roundings. An error loses nothing: CIFAR-10's 10,000 test images make it k / 10,000.
RECORD_DIGITS = {"final": 4, "minutes": 1, "quiet_minutes": 1, "train_loss": 4, "test_loss": 4}
ERROR_DIGITS = 4  # curves.csv's test_error
FAMILIES = {"s_mixer": "S-Mixer", "rp_s_mixer": "RP S-Mixer", "sw_mlp": "SW-MLP"}
# paper_2p<E>_<item>_<family>[_<suffix>]: run_cpu.sh paper_third_seed adds one sweep per point needing a third
# seed (paper_2p14_fig5_s_mixer_C25_seed2), whose runs count as more seeds of the family's points
SWEEP_NAME = re.compile(r"paper_2p(?P<exponent>\d+)_(?P<item>[a-z0-9]+)_(?P<family>rp_s_mixer|s_mixer|sw_mlp)(_.+)?")


INTERRUPTED = 5  # an epoch interval over 5× the run's median is a stop (the session ended), not training


def run_minutes(times: list[float]) -> float | None:
    """The machine time a run took, in minutes, from the wall times its epochs were logged at: the sum of
    the intervals between them (training and the epoch's validation), where an interval over INTERRUPTED×
    the median (the run stopped and resumed later) counts as a median epoch, plus one median for the first
    epoch (its start is not logged). None with fewer than two epochs logged."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    if not gaps:
        return None
    typical = statistics.median(gaps)
    return (typical + sum(g if g <= INTERRUPTED * typical else typical for g in gaps)) / 60


def quiet_minutes(times: list[float]) -> float | None:
    """What the run would take on a machine doing nothing but the two lanes: its epochs × its 10th-percentile
    epoch interval (the epochs nothing else slowed; other work on the 2 cores, a test suite, doubles the rest).
    None with fewer than two epochs logged."""
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    return gaps[len(gaps) // 10] * (len(gaps) + 1) / 60 if gaps else None


MACHINE_TIME_NOTE = """
Minutes a finished run took on the machine that trained it (`run_minutes`: the sum of its epoch
intervals from the TensorBoard wall times, a stop counted as a median epoch), over the finished runs whose
times are known (`timed`; runs recorded before the report kept times have none). Two runs train side by
side (two lanes, one thread each), so the machine's wall time is about half the lane-hours.
`quiet_min`: the median over runs of epochs × the run's 10th-percentile epoch (`quiet_minutes`), what a run
takes when the two lanes are all the machine does; other work on the 2 cores (a test suite) stretches the rest.
"""


def machine_time(runs: list[dict]) -> list[dict]:
    """Per item, Ω, family (and depth): the minutes the finished runs took (`run_minutes`)."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    quiet: dict[tuple, list[float]] = defaultdict(list)
    counts: dict[tuple, int] = defaultdict(int)
    for r in runs:
        if r["final"] is None:
            continue
        key = (r["item"], r["omega_exp"], r["family"], r["L"] or 0)
        counts[key] += 1
        if r.get("minutes") is not None:
            groups[key].append(r["minutes"])
        if r.get("quiet_minutes") is not None:
            quiet[key].append(r["quiet_minutes"])
    return [
        {
            "item": item,
            "omega": f"2^{exponent}",
            "family": FAMILIES.get(family, family),
            "L": depth or None,
            "finished": counts[(item, exponent, family, depth)],
            "timed": len(minutes),
            "median_min": round(statistics.median(minutes)),
            "min_min": round(min(minutes)),
            "max_min": round(max(minutes)),
            "lane_hours": round(sum(minutes) / 60, 1),
            "quiet_min": round(statistics.median(fast)) if (fast := quiet[(item, exponent, family, depth)]) else None,
        }
        for (item, exponent, family, depth), minutes in sorted(groups.items())
    ]


def read_runs(runs_root: Path) -> list[dict]:
    """Every run of the paper-schedule sweeps: its grid facts, its test-error curve and final figure."""
    from mixer_lightning.analysis.curves import epoch_curves, epoch_log, has_logs

    rows = []
    for manifest in sorted(runs_root.glob("paper_2p*_*/sweep.json")):
        sweep = manifest.parent.name  # paper_2p14_fig5_rp_s_mixer, or a third seed's paper_2p14_fig5_s_mixer_C25_seed2
        named = SWEEP_NAME.fullmatch(sweep)
        if named is None:
            continue
        exponent, item, family = int(named["exponent"]), named["item"], named["family"]
        for entry in json.loads(manifest.read_text())["runs"]:
            run_dir = Path(entry["run_dir"])  # relative to the checkout the sweep ran in (run from there)
            logs = epoch_curves(run_dir, ["val/acc1", "train/loss_epoch"]) if has_logs(run_dir) else {}
            curve, train_loss = logs.get("val/acc1", {}), logs.get("train/loss_epoch", {})
            logged = epoch_log(run_dir, "val/acc1") if curve else {}
            times = [when for _, (when, _) in sorted(logged.items()) if when is not None]
            minutes = run_minutes(times)
            final = test_loss = None
            if (run_dir / "test_metrics.json").is_file():
                metrics = json.loads((run_dir / "test_metrics.json").read_text())
                final, test_loss = 1.0 - metrics["test/acc1"], metrics.get("test/loss")
            axes = entry.get("axes") or {}
            rows.append(
                {
                    "sweep": sweep,
                    "item": item,
                    "family": family,
                    "omega_exp": exponent,
                    "point": entry.get("point"),
                    "C": entry.get("C") or axis(axes, "channels"),
                    "S": entry.get("S") or axis(axes, "tokens"),
                    "m": entry.get("m"),
                    "p": entry.get("p"),
                    "L": axis(axes, "num_blocks"),
                    "permute": axis(axes, "permute"),
                    "seed": entry["seed"],
                    "epochs": len(curve),
                    # epoch 1 = after one epoch
                    "error_curve": {epoch + 1: round(1.0 - acc, ERROR_DIGITS) for epoch, acc in curve.items()},
                    "final": final,
                    "minutes": minutes,
                    "quiet_minutes": quiet_minutes(times),
                    # the last epoch's mean training loss (augmented images, train mode) and the test loss of
                    # `mixer test`: a finished run's fit of the training data beside its test figure
                    "train_loss": train_loss[max(train_loss)] if final is not None and train_loss else None,
                    "test_loss": test_loss,
                }
            )
            rows[-1] |= {
                k: round(rows[-1][k], digits) for k, digits in RECORD_DIGITS.items() if rows[-1][k] is not None
            }
    return rows


def axis(axes: dict, name: str):
    """A grid axis's value in a sweep.json entry, whose `axes` are keyed by the axis's short name (its
    key's last part: `num_blocks` for `--grid model.net.init_args.num_blocks=4,8,16`; longer where two keys
    share it, e.g. `init_args.permute`); None where the sweep has no such axis."""
    for key, value in axes.items():
        if key == name or key.endswith("." + name):
            return value
    return None


def _number(text: str, kind: type) -> int | float | None:
    return kind(text) if text != "" else None


def _recorded_value(path: Path, line: int, row: dict, column: str, kind: type, optional: bool = True):
    """One cell of a recorded report, or a one-line error naming the file, line and column (a hand edit)."""
    text = row.get(column) or ""
    try:
        if column == "permute":
            return ast.literal_eval(text) if text else None  # as written: True, False or a list of blocks
        if text == "" and not optional:
            raise ValueError
        return _number(text, kind)
    except (ValueError, SyntaxError):
        raise SystemExit(
            f"paper_schedule.py: --recorded {path} line {line}: column {column} is {text!r}, not "
            f"{'a number' if kind is not bool else 'True, False or a list'}; "
            "restore it (git checkout) or give a folder paper_schedule.py --out wrote"
        ) from None


def read_recorded(folder: Path) -> list[dict]:
    """The runs an earlier report wrote into `folder` (fig5_runs.csv and curves.csv, committed with the
    docs), as `read_runs` gives them: the figures of runs whose directories are gone (another machine, a
    renewed one) still count, and a sweep can go on elsewhere with only its remaining runs."""
    runs_csv, curves_csv = folder / "fig5_runs.csv", folder / "curves.csv"
    if not runs_csv.is_file() or not curves_csv.is_file():
        raise SystemExit(
            f"paper_schedule.py: --recorded {folder}: no fig5_runs.csv and curves.csv there (what --out writes)"
        )
    for path, needed in (
        (runs_csv, {"sweep", "point", "seed", "omega_exp", "epochs", "final"}),
        (curves_csv, CURVE_KEYS),
    ):
        with path.open(newline="") as file:
            missing = needed - set(next(csv.reader(file), []))
        if missing:
            raise SystemExit(
                f"paper_schedule.py: --recorded {path}: no column {', '.join(sorted(missing))}; "
                "give a folder paper_schedule.py --out wrote"
            )
    curves: dict[tuple, dict[int, float]] = defaultdict(dict)
    with curves_csv.open(newline="") as file:
        for line, row in enumerate(csv.DictReader(file), start=2):
            cell = partial(_recorded_value, curves_csv, line, row, optional=False)
            key = (row["sweep"], row["point"], cell("seed", int))
            curves[key][cell("epoch", int)] = cell("test_error", float)
    rows = []
    with runs_csv.open(newline="") as file:
        for line, row in enumerate(csv.DictReader(file), start=2):
            cell = partial(_recorded_value, runs_csv, line, row)
            key = (row["sweep"], row["point"], cell("seed", int, optional=False))
            rows.append(
                row
                | {column: cell(column, int, optional=False) for column in ("omega_exp", "epochs")}
                | {column: cell(column, int) for column in ("C", "S", "m", "L")}
                # reports before had no minutes, and no losses
                | {
                    column: cell(column, float)
                    for column in ("p", "final", "minutes", "quiet_minutes", "train_loss", "test_loss")
                }
                | {"permute": cell("permute", bool), "seed": key[2], "error_curve": curves[key]}
            )
    return rows


def merge_runs(fresh: list[dict], recorded: list[dict]) -> list[dict]:
    """One row per run (sweep, point, seed): a finished run over an unfinished one, then the longer curve;
    where both are finished, the run directory's own figure (`fresh`)."""

    def rank(run: dict, fresh: bool) -> tuple:
        return run["final"] is not None, run["epochs"], fresh

    best: dict[tuple, dict] = {}
    for run, is_fresh in [(r, False) for r in recorded] + [(r, True) for r in fresh]:
        key = (run["sweep"], run["point"], run["seed"])
        if key not in best or rank(run, is_fresh) > rank(*best[key]):
            best[key] = (run, is_fresh)
    return [run for run, _ in best.values()]


def mean_sd(values: list[float]) -> tuple[float, float, int]:
    values = [v for v in values if v is not None]
    if not values:
        return math.nan, math.nan, 0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan, len(values)


def fmt(mean: float, sd: float, n: int, scale: float = 100.0) -> str:
    if n == 0 or math.isnan(mean):
        return "–"
    spread = f" ± {scale * sd:.2f}" if n > 1 else ""
    return f"{scale * mean:.2f}{spread} ({n})"


def error_at(run: dict, epoch: int | None) -> float | None:
    """The run's test error after `epoch` epochs (None: the final figure, only for finished runs)."""
    if epoch is None:
        return run["final"]
    return run["error_curve"].get(epoch)


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values):  # tied values share their mean rank: a mirror pair (C, S) / (S, C) has one m
        order = sorted(range(len(values)), key=lambda i: values[i])
        r = [0.0] * len(values)
        start = 0
        while start < len(order):
            end = start
            # a mean over seeds of k / 10,000 errors: equal means may differ in the last bit
            while end + 1 < len(order) and math.isclose(values[order[end + 1]], values[order[start]], rel_tol=1e-9):
                end += 1
            for i in order[start : end + 1]:
                r[i] = (start + end) / 2
            start = end + 1
        return r

    if len(xs) < 3:
        return math.nan
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else math.nan


def seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def points_table(runs: list[dict], epochs: list[int | None]) -> list[dict]:
    """One row per (Ω, family, point): the test error's mean ± sd (seeds) at chosen epochs and at the end."""
    rows = []
    keyed = defaultdict(list)
    for r in runs:
        keyed[(r["item"], r["omega_exp"], r["family"], r["point"])].append(r)
    for (item, exponent, family, point), group in sorted(
        keyed.items(), key=lambda kv: (kv[0][:3], kv[1][0]["C"] or 0, kv[1][0]["m"] or 0, kv[1][0]["L"] or 0)
    ):
        if not any(r["epochs"] or r["final"] is not None for r in group):
            continue  # queued, not started: the run list (fig5_runs.csv) names it
        first = group[0]
        row = {
            "item": item,
            "omega": f"2^{exponent}",
            "family": FAMILIES.get(family, family),
            "point": point,
            "C": first["C"],
            "S": first["S"],
            "m": first["m"],
            "L": first["L"],
            "runs": len(group),
            "epochs_logged": "/".join(str(r["epochs"]) for r in sorted(group, key=lambda r: r["seed"])),
        }
        for epoch in epochs:
            values = [error_at(r, epoch) for r in group]
            done = [v for v in values if v is not None]
            row["final" if epoch is None else f"ep{epoch}"] = fmt(*mean_sd(done)) if done else "–"
        rows.append(row)
    return rows


def by_point(runs: list[dict], epoch: int | None) -> dict[tuple, tuple[float, float, int]]:
    """(C, S, m) -> mean, sd, seeds of the error at `epoch` over the runs that reached it (a point whose
    second seed is still queued counts with one; the seeds column says how many)."""
    grouped = defaultdict(list)
    for run in runs:
        grouped[(run["C"], run["S"], run["m"])].append(error_at(run, epoch))
    return {k: mean_sd(v) for k, v in grouped.items() if any(e is not None for e in v)}


def rounded(value: float, digits: int) -> float | None:
    """`value` rounded, or None where it is undefined (a rank correlation of fewer than two points)."""
    return None if value is None or math.isnan(value) else round(value, digits)


def width_ranks(points: dict[tuple, tuple[float, float, int]]) -> tuple[float, float, float]:
    """Spearman ρ(m, error) over a Mixer family's points (C, S, m) -> (mean, sd, n): across the grid, along
    C ≤ S and along C ≥ S (nan where a side has fewer than three points)."""
    keys = sorted(points, key=lambda k: k[0])
    left = [k for k in keys if k[0] <= k[1]]
    right = [k for k in keys if k[0] >= k[1]]
    return tuple(spearman([k[2] for k in side], [points[k][0] for k in side]) for side in (keys, left, right))


def fig5_claims(runs: list[dict], epochs: list[int | None]) -> list[dict]:
    rows = []
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"}):
        family = {
            name: [r for r in runs if r["item"] == "fig5" and r["omega_exp"] == exponent and r["family"] == name]
            for name in FAMILIES
        }
        normal, rp = family["s_mixer"], family["rp_s_mixer"]
        for epoch in epochs:
            points = by_point(normal, epoch)
            if len(points) < 3:
                continue
            keys = sorted(points, key=lambda k: k[0])
            rho, rho_left, rho_right = width_ranks(points)
            best = min(keys, key=lambda k: points[k][0])
            centre = min(keys, key=lambda k: abs(math.log(k[0] / k[1])))
            extremes = min(points[keys[0]][0], points[keys[-1]][0])
            # S = C against the grid's ends needs both ends of the grid as the sweep plans it (its
            # unstarted runs included): a grid reached up to C = 32 of 60 has no C > S end yet
            planned = sorted({(r["C"], r["S"], r["m"]) for r in normal}, key=lambda k: k[0])
            two_sided = planned[0] in points and planned[-1] in points and centre not in (planned[0], planned[-1])
            # Fig. 6's margin: S = C against the ends beyond the seeds' noise (twice the largest sd of the three)
            noise = [points[k][1] for k in (centre, keys[0], keys[-1]) if not math.isnan(points[k][1])]
            rp_points = by_point(rp, epoch)
            gaps = [rp_points[k][0] - points[k][0] for k in keys if k in rp_points]
            # Sec. 5.3: "the normal and RP S-Mixers show similar tendencies" with m; the SW-MLP's along its m
            rp_rho, rp_left, rp_right = width_ranks(rp_points) if len(rp_points) >= 3 else (math.nan,) * 3
            sw_points = by_point(family["sw_mlp"], epoch)
            sw_m = sorted(sw_points, key=lambda k: k[2])
            sw_rho = spearman([k[2] for k in sw_m], [sw_points[k][0] for k in sw_m])
            rows.append(
                {
                    "omega": f"2^{exponent}",
                    "epoch": "final" if epoch is None else epoch,
                    "points": len(keys),
                    "seeds": min(points[k][2] for k in keys),
                    "spearman_m_error": rounded(rho, 3),
                    "spearman_C_le_S": rounded(rho_left, 3),
                    "spearman_C_ge_S": rounded(rho_right, 3),
                    "best_C": best[0],
                    "centre_minus_best_extreme_pts": round(100 * (points[centre][0] - extremes), 2)
                    if two_sided
                    else None,
                    "centre_noise_pts": round(200 * max(noise), 2) if two_sided and noise else None,
                    "rp_minus_normal_mean_pts": round(100 * statistics.fmean(gaps), 2) if gaps else None,
                    "rp_points": len(gaps),
                    "rp_spearman_m_error": rounded(rp_rho, 3),
                    "rp_spearman_C_le_S": rounded(rp_left, 3),
                    "rp_spearman_C_ge_S": rounded(rp_right, 3),
                    "sw_spearman_m_error": rounded(sw_rho, 3),
                }
            )
    return rows


def claims_by_epoch(runs: list[dict]) -> list[dict]:
    """`fig5_claims` after every epoch that every finished Fig. 5 run of its Ω has logged (item 5: at which
    epoch each claim appears). Finished runs only, so each epoch's means are over the same seeds."""
    rows = []
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"}):
        finished = [r for r in runs if r["item"] == "fig5" and r["omega_exp"] == exponent and r["final"] is not None]
        curves = [set(r["error_curve"]) for r in finished if r["family"] != "sw_mlp"]
        if curves:
            rows += fig5_claims(finished, sorted(set.intersection(*curves)))
    return rows


def close_pairs(runs: list[dict]) -> list[tuple]:
    """Issue 24's rule, "2 seeds, a third where two points differ by less than twice their spread": each
    pair of neighbouring points of a family's grid (along C for the Mixers, along m for the SW-MLP) and
    each normal/RP pair at one C, both finished at two or more seeds, whose final means differ by less
    than twice the larger of their two seed sds. One tuple (Ω exponent, (family, the point's finished
    runs), (family, runs), difference, spread) per pair; a pair stays listed once both have their third
    seed (the order between the two is then not settled by the seeds the issue asks for)."""
    finished = [r for r in runs if r["final"] is not None and r["item"] == "fig5"]
    groups: dict[tuple, dict[tuple, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in finished:
        groups[(r["omega_exp"], r["family"])][(r["C"] or 0, r["m"] or 0, r["point"])].append(r)

    def close(a: list[dict], b: list[dict]) -> tuple[float, float] | None:
        if len(a) < 2 or len(b) < 2:
            return None
        a, b = [r["final"] for r in a], [r["final"] for r in b]
        diff, spread = abs(statistics.fmean(a) - statistics.fmean(b)), max(statistics.stdev(a), statistics.stdev(b))
        return (diff, spread) if diff < 2 * spread else None

    pairs = []
    for (exponent, family), points in sorted(groups.items()):
        ordered = sorted(points)  # by C, then m (the SW-MLP has no C)
        candidates = [(a, b, family, family) for a, b in zip(ordered, ordered[1:], strict=False)]
        if family == "s_mixer":
            rp = groups.get((exponent, "rp_s_mixer"), {})
            candidates += [(k, k, "s_mixer", "rp_s_mixer") for k in ordered if k in rp]
        for a, b, family_a, family_b in candidates:
            runs_a, runs_b = groups[(exponent, family_a)][a], groups[(exponent, family_b)][b]
            found = close(runs_a, runs_b)
            if found is not None:
                pairs.append((exponent, (family_a, runs_a), (family_b, runs_b), *found))
    return pairs


# Issue 24: "2 seeds, a third where two points differ by less than twice their spread": never a fourth
MOST_SEEDS = 3
THIRD_SEED_NOTE = """
Each pair of neighbouring points (along C, or m for the SW-MLP; and normal against RP at one C) whose final
means differ by less than twice the larger of their seed sds (`difference_pts` < 2 × `spread_pts`), over the
seeds finished so far (`seeds`). `third_seed`: "due", a point has two seeds and gets a third
(`third_seed_runs.csv`, `run_cpu.sh paper_third_seed`); "in", both have three and are still this close: the
order between the two is within the seeds' noise, and no fourth seed follows.
"""


def third_seed_points(runs: list[dict]) -> list[dict]:
    """The pairs `close_pairs` finds, one row each: the two points, their finished seeds, and whether a
    third seed is still due ("in": both have three and are still this close, so the order between the two
    is within the noise of the seeds the issue asks for)."""
    return [
        {
            "omega": f"2^{exponent}",
            "a": f"{FAMILIES[family_a]} {a[0]['point']}",
            "b": f"{FAMILIES[family_b]} {b[0]['point']}",
            "difference_pts": round(100 * diff, 2),
            "spread_pts": round(100 * spread, 2),
            "seeds": f"{len(a)}, {len(b)}",
            "third_seed": "due" if min(len(a), len(b)) < MOST_SEEDS else "in",
        }
        for exponent, (family_a, a), (family_b, b), diff, spread in close_pairs(runs)
    ]


def third_seed_runs(runs: list[dict]) -> list[dict]:
    """Each point `close_pairs` names that has fewer than three finished seeds, once: what `run_cpu.sh
    paper_third_seed` trains at seed 2 (its sweep: the family's grid at Ω, --channels C for a Mixer,
    --densities p for an SW-MLP). A point whose third seed is in is not listed again (no fourth)."""
    named = {}
    for exponent, *sides, _, _ in close_pairs(runs):
        for family, point_runs in sides:
            if len(point_runs) >= MOST_SEEDS:
                continue
            run = point_runs[0]
            named[(exponent, family, run["point"])] = {
                "omega_exp": exponent,
                "family": family,
                "point": run["point"],
                "C": run["C"],
                "p": None if run["C"] else round(run.get("p"), 6),  # the density the sweep's point was named by
            }
    return list(named.values())


# Section 0's rules for the verdicts (docs/reproductions/appendix.md, "How the verdicts are read", fixed on 2026-11-27
# before any third seed, Fig. 7 or D.5 run finished): a rank correlation counts from -0.8, a margin is twice
# the larger (largest) seed sd of the points compared.
RANK_HOLDS = -0.8
MARGIN_SDS = 2
# Fig. 7's rule reads L = 4, 8, 16 (its steps and the margin at L = 16); a deeper run (`run_cpu.sh
# paper_fig7_l20`, the paper's L = 20, added after the rule) is shown beside the verdict, not graded
FIG7_RULE_DEPTHS = (4, 8, 16)
VERDICTS_NOTE = """
Each claim read by section 0's rules ("How the verdicts are read", fixed before the third seeds, Fig. 7 and
D.5 finished) on the final test error, mean over the finished seeds. `status`: "final" once every run the
claim reads is finished and no third seed is due for it; "provisional" with `runs_to_go` (its unfinished
runs and due third seeds) until then: the verdict as the runs stand, which a third seed can still move.
"""


def _runs_to_go(
    runs: list[dict], exponent: int, item: str, families: set[str], due: list[dict], depths: tuple | None = None
) -> int:
    """The unfinished runs of a claim (of its `depths` L only, where given) and the third seeds due for its
    points that have not started."""
    unfinished = [
        r
        for r in runs
        if r["item"] == item
        and r["omega_exp"] == exponent
        and r["family"] in families
        and r["final"] is None
        and (depths is None or r["L"] in depths)
    ]
    started = {(r["family"], r["point"]) for r in unfinished}
    thirds = [
        d
        for d in due
        if d["omega_exp"] == exponent and d["family"] in families and (d["family"], d["point"]) not in started
    ]
    return len(unfinished) + (len(thirds) if item == "fig5" else 0)


def _verdict_row(exponent: int, claim: str, reading: str, verdict: str, to_go: int) -> dict:
    return {
        "omega": f"2^{exponent}",
        "claim": claim,
        "reading": reading,
        "verdict": verdict,
        "status": "final" if to_go == 0 else "provisional",
        "runs_to_go": to_go,
    }


def _rank_verdict(across: float, branches: tuple[float, ...]) -> str:
    """Fig. 5's rule: reproduced if ρ(m, error) holds across the grid and along both branches, partly if it
    holds along one branch (or both but not across), not otherwise (nan, an undefined ρ, never holds)."""
    if len(branches) > 1 and all(math.isnan(rho) for rho in branches):
        return "n/a"  # two points a branch (Ω = 2^16's grid, whose ends share one m): the rule is undefined
    held = [round(rho, 3) <= RANK_HOLDS for rho in branches]  # at claims.csv's rounding: -0.8 on 4 points holds
    if all(held) and round(across, 3) <= RANK_HOLDS:
        return "reproduced"
    return "partly" if any(held) and len(branches) > 1 else "not"


def _rho(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.2f}".replace("-", "−")


def verdicts(runs: list[dict]) -> list[dict]:
    """One row per claim and Ω: the statistic section 0's rule reads, the verdict it gives, and whether the
    runs it reads are all in (`VERDICTS_NOTE`). Fig. 5 per family, Fig. 6, Fig. 7 and App. D.5."""
    rows, due = [], third_seed_runs(runs)
    finished = [r for r in runs if r["final"] is not None]
    for exponent in sorted({r["omega_exp"] for r in runs}):
        at = [r for r in finished if r["omega_exp"] == exponent]
        fig5 = {name: [r for r in at if r["item"] == "fig5" and r["family"] == name] for name in FAMILIES}
        for family in ("s_mixer", "rp_s_mixer"):
            points = by_point(fig5[family], None)
            if len(points) >= 3:
                across, left, right = width_ranks(points)
                reading = f"ρ(m, error) {_rho(across)} across, {_rho(left)} along C ≤ S, {_rho(right)} along C ≥ S"
                if _rank_verdict(across, (left, right)) == "n/a":
                    reading += " (n/a: two points a branch, the rule's ρ undefined)"
                go = _runs_to_go(runs, exponent, "fig5", {family}, due)
                rows.append(
                    _verdict_row(
                        exponent, f"Fig. 5, {FAMILIES[family]}", reading, _rank_verdict(across, (left, right)), go
                    )
                )
        sw = by_point(fig5["sw_mlp"], None)
        if len(sw) >= 3:
            ms = sorted(sw, key=lambda k: k[2])
            rho = spearman([k[2] for k in ms], [sw[k][0] for k in ms])
            go = _runs_to_go(runs, exponent, "fig5", {"sw_mlp"}, due)
            rows.append(
                _verdict_row(
                    exponent,
                    "Fig. 5, SW-MLP",
                    f"ρ(m, error) {_rho(rho)} over its densities",
                    _rank_verdict(rho, (rho,)),
                    go,
                )
            )
        # Fig. 6 on the S-Mixer's grid as the sweep plans it (its unstarted runs included)
        planned = sorted(
            {
                (r["C"], r["S"], r["m"])
                for r in runs
                if r["item"] == "fig5" and r["family"] == "s_mixer" and r["omega_exp"] == exponent
            }
        )
        points = by_point(fig5["s_mixer"], None)
        if len(planned) >= 3:
            centre = min(planned, key=lambda k: abs(math.log(k[0] / k[1])))
            i = planned.index(centre)
            near, ends = set(planned[max(i - 1, 0) : i + 2]), (planned[0], planned[-1])
            if all(k in points for k in (centre, *ends)):
                best = min(points, key=lambda k: points[k][0])
                behind = 100 * (points[centre][0] - min(points[k][0] for k in ends))
                sds = [points[k][1] for k in (centre, *ends) if not math.isnan(points[k][1])]
                margin = 100 * MARGIN_SDS * max(sds) if sds else math.nan
                # an end lowest is "not" even where it is S = C's neighbour (a three-point grid, Ω = 2^16's)
                if best == centre or (best in near and best not in ends):
                    verdict = "reproduced" if behind < -margin else "partly"
                elif best in ends:  # an end lowest: the optimum is not at S = C
                    verdict = "not"
                else:  # neither an end nor next to S = C, the case the rule left open: an optimum off S = C
                    verdict = "partly, displaced"
                reading = (
                    f"lowest at C = {best[0]} (C/S {best[0] / best[1]:.1f}; S = C is C = {centre[0]}, its neighbours C = "
                    f"{', '.join(str(k[0]) for k in sorted(near - {centre}))}); S = C minus the better end "
                    f"{behind:+.2f} points, margin {_margin(margin)}"
                ).replace("-", "−")
                go = _runs_to_go(runs, exponent, "fig5", {"s_mixer"}, due)
                rows.append(_verdict_row(exponent, "Fig. 6, S-Mixer", reading, verdict, go))
        # Fig. 7: RP − normal shrinks at every step of L and ends within the margin (or negative)
        every_depth = [
            (depth, 100 * (rp[0] - normal[0]), 100 * MARGIN_SDS * max(normal[1], rp[1]))
            for depth, normal, rp in fig7_depths(at, None)
        ]
        gaps = [g for g in every_depth if g[0] in FIG7_RULE_DEPTHS]
        beyond = [g for g in every_depth if g[0] not in FIG7_RULE_DEPTHS]
        if len(gaps) >= 2:
            shrinks = all(b[1] < a[1] for a, b in zip(gaps, gaps[1:], strict=False))
            depth, gap, margin = gaps[-1]
            verdict = ("reproduced" if gap <= margin else "partly") if shrinks else "not"
            reading = (
                f"RP − normal {', '.join(f'{g:+.2f}' for _, g, _ in gaps)} points at L = "
                f"{', '.join(str(d) for d, _, _ in gaps)}; margin at L = {depth}: {_margin(margin)}"
                + "".join(f"; L = {d} (beside the rule): {g:+.2f}" for d, g, _ in beyond)
            ).replace("-", "−")
            go = _runs_to_go(runs, exponent, "fig7", {"s_mixer", "rp_s_mixer"}, due, FIG7_RULE_DEPTHS)
            rows.append(_verdict_row(exponent, "Fig. 7, RP catches up with depth", reading, verdict, go))
        # App. D.5: the RP block in position 1 costs the most, beyond the margin over the runner-up
        blocks = {}
        for r in at:
            if r["item"] == "d5" and rp_blocks(r["permute"]).startswith("block "):
                blocks.setdefault(rp_blocks(r["permute"]), []).append(r["final"])
        errors = {label: mean_sd(values) for label, values in blocks.items()}
        if "block 1" in errors and len(errors) >= 2:
            first = errors["block 1"]
            label, runner = max(((k, v) for k, v in errors.items() if k != "block 1"), key=lambda kv: kv[1][0])
            margin = 100 * MARGIN_SDS * max(first[1], runner[1])
            lead = 100 * (first[0] - runner[0])
            verdict = ("reproduced" if lead > margin else "partly") if lead > 0 else "not"
            reading = f"RP in block 1 minus the costliest other ({label}) {lead:+.2f} points, margin {_margin(margin)}"
            go = _runs_to_go(runs, exponent, "d5", set(FAMILIES), due)
            rows.append(
                _verdict_row(exponent, "App. D.5, the first block matters most", reading.replace("-", "−"), verdict, go)
            )
    return rows


def _margin(margin: float) -> str:
    """A verdict's margin as its reading prints it: undefined (not "nan") while its points have one seed each."""
    return "– (one seed: no spread yet)" if math.isnan(margin) else f"{margin:.2f}"


def write_csv(path: Path, rows: list[dict], keys: list[str] | None = None) -> None:
    """`rows` as CSV; with no rows, only `keys` as the header (nothing without them)."""
    keys = list(dict.fromkeys(k for row in rows for k in row)) or keys
    if not keys:
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)


def markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join("–" if row[k] is None else str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fig5(runs: list[dict], out: Path) -> None:
    if not any(r["item"] == "fig5" and r["final"] is not None for r in runs):
        return  # no finished Fig. 5 run (a report of Fig. 7 or D.5 alone): no empty figure
    plt = pyplot()
    fig, (ax_m, ax_c) = plt.subplots(1, 2, figsize=(11, 4.4))
    colors = {12: "C0", 14: "C1", 16: "C2"}
    styles = {"s_mixer": ("-", "o"), "rp_s_mixer": ("--", "s"), "sw_mlp": (":", "^")}
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "fig5"}):
        for family, (style, marker) in styles.items():
            chosen = [r for r in runs if r["item"] == "fig5" and r["omega_exp"] == exponent and r["family"] == family]
            if family == "sw_mlp":
                grouped = defaultdict(list)
                for r in chosen:
                    grouped[r["m"]].append(r["final"])
                points = sorted((m, *mean_sd(v)) for m, v in grouped.items())
                points = [p for p in points if p[3] > 0]
                if points:
                    ax_m.errorbar(
                        [p[0] for p in points],
                        [100 * p[1] for p in points],
                        yerr=[0 if math.isnan(p[2]) else 100 * p[2] for p in points],
                        fmt=style + marker,
                        color=colors.get(exponent, "C3"),
                        capsize=2,
                        label=f"{FAMILIES[family]}, Ω = 2^{exponent}",
                    )
                continue
            points = by_point(chosen, None)
            points = {k: v for k, v in points.items() if v[2] > 0}
            if not points:
                continue
            keys = sorted(points, key=lambda k: k[0])
            label = f"{FAMILIES[family]}, Ω = 2^{exponent}"
            errors = [100 * points[k][0] for k in keys]
            bars = [0 if math.isnan(points[k][1]) else 100 * points[k][1] for k in keys]
            ax_c.errorbar(
                [k[0] for k in keys],
                errors,
                yerr=bars,
                fmt=style + marker,
                color=colors.get(exponent, "C3"),
                capsize=2,
                label=label,
            )
            # Against m the mirror points (C, S) and (S, C) share m: the C ≤ S and C ≥ S branches apart.
            for branch, keep in (("C ≤ S", lambda k: k[0] <= k[1]), ("C ≥ S", lambda k: k[0] >= k[1])):
                part = sorted((k for k in keys if keep(k)), key=lambda k: k[2])
                ax_m.errorbar(
                    [k[2] for k in part],
                    [100 * points[k][0] for k in part],
                    yerr=[0 if math.isnan(points[k][1]) else 100 * points[k][1] for k in part],
                    fmt=style + marker,
                    color=colors.get(exponent, "C3"),
                    alpha=1.0 if branch == "C ≤ S" else 0.5,
                    capsize=2,
                    label=f"{label} ({branch})",
                )
    ax_m.set(xscale="log", xlabel="effective width m = S·C (log)", ylabel="test error (%)")
    ax_m.set_title("Fig. 5 at 200 epochs: error against m")
    ax_c.set(xscale="log", xlabel="channels C (log); S solved from Ω", ylabel="test error (%)")
    ax_c.set_title("Fig. 6's claim: error against C (S = C at Ω^(1/3))")
    # After the scales are set (set_xscale resets the locators): ticks at the grid's C and m.
    plotted = [r for r in runs if r["item"] == "fig5" and r["final"] is not None]
    grid_ticks(ax_c.xaxis, [r["C"] for r in plotted if r["C"]], log=True)
    grid_ticks(ax_m.xaxis, [r["m"] for r in plotted if r["m"]], log=True)
    for ax in (ax_m, ax_c):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # an SW-MLP arm alone plots nothing against C
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "fig5_error.png", dpi=120)
    plt.close(fig)


def plot_curves(runs: list[dict], exponent: int, out: Path) -> None:
    plt = pyplot()
    chosen = [r for r in runs if r["item"] == "fig5" and r["omega_exp"] == exponent and r["family"] != "sw_mlp"]
    if not chosen:
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    cs = sorted({r["C"] for r in chosen})
    for family, style in (("s_mixer", "-"), ("rp_s_mixer", "--")):
        for i, c in enumerate(cs):
            group = [r for r in chosen if r["family"] == family and r["C"] == c and r["error_curve"]]
            if not group:
                continue
            # the finished seeds where there are any: a seed still running would cut the mean curve short
            group = [r for r in group if r["final"] is not None] or group
            epochs = sorted(set.intersection(*(set(r["error_curve"]) for r in group)))
            mean = [100 * statistics.fmean(r["error_curve"][e] for r in group) for e in epochs]
            label = f"{FAMILIES[family]} C = {c}, S = {group[0]['S']} ({seeds(len(group))})"
            ax.plot(epochs, mean, style, color=f"C{i % 10}", lw=1, label=label)
    # Linear error axis from the first epoch's level down: the last 100 epochs are where the claims live.
    ax.set(xlabel="epoch", ylabel="test error (%), mean over seeds", ylim=(None, 60))
    ax.set_title(f"Test error every epoch, Ω = 2^{exponent} (S-Mixer solid, RP dashed)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / f"fig5_curves_2p{exponent}.png", dpi=120)
    plt.close(fig)


def plot_claims(rows: list[dict], exponent: int, out: Path) -> None:
    """`claims_by_epoch` at one Ω against the epoch: Fig. 5's rank correlations, Fig. 6's S = C against the
    better end of the grid and RP − normal (points), and the C of the lowest error."""
    rows = [r for r in rows if r["omega"] == f"2^{exponent}" and r["epoch"] != "final"]
    if not rows:
        return
    plt = pyplot()
    fig, (ax_rho, ax_pts, ax_best) = plt.subplots(3, 1, figsize=(7.5, 8.4), sharex=True)
    epochs = [r["epoch"] for r in rows]

    def line(ax, key, label, style):
        values = [math.nan if r[key] is None else r[key] for r in rows]
        if not all(math.isnan(v) for v in values):
            ax.plot(epochs, values, style, lw=1.2, label=label)

    line(ax_rho, "spearman_m_error", "the whole grid", "-")
    line(ax_rho, "spearman_C_le_S", "C ≤ S", "--")
    line(ax_rho, "spearman_C_ge_S", "C ≥ S", ":")
    ax_rho.set(ylabel="Spearman ρ(m, error)", ylim=(-1.05, 1.05))
    ax_rho.set_title(f"The claims after every epoch, Ω = 2^{exponent} (finished runs; below 0: Fig. 5's direction)")
    line(ax_pts, "rp_minus_normal_mean_pts", "RP − normal, mean over C", "-")
    line(ax_pts, "centre_minus_best_extreme_pts", "S = C − the better end of the grid (below 0: S = C wins)", "--")
    ax_pts.axhline(0, color="k", lw=0.8)
    ax_pts.set(ylabel="test error difference (points)")
    ax_best.plot(epochs, [r["best_C"] for r in rows], "o", ms=2)
    ax_best.axhline(2 ** (exponent / 3), color="k", lw=0.8, ls="--", label="S = C (C = Ω^(1/3))")
    ax_best.set(yscale="log", xlabel="epoch", ylabel="C of the lowest error")
    grid_ticks(ax_best.yaxis, [*(r["best_C"] for r in rows), round(2 ** (exponent / 3))], log=True, slant=False)
    for ax in (ax_rho, ax_pts, ax_best):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"fig5_claims_2p{exponent}.png", dpi=120)
    plt.close(fig)


def fig7_depths(runs: list[dict], epoch: int | None) -> list[tuple[int, tuple, tuple]]:
    """Fig. 7's runs per depth L, where both families have one: (L, normal, RP), each the (mean, sd, n) of the
    error after `epoch` (None: the final test error). Read by the table (`fig7_rows`) and the verdict."""
    fig7 = [r for r in runs if r["item"] == "fig7"]
    rows = []
    for depth in sorted({r["L"] for r in fig7}):
        normal = mean_sd([error_at(r, epoch) for r in fig7 if r["L"] == depth and r["family"] == "s_mixer"])
        rp = mean_sd([error_at(r, epoch) for r in fig7 if r["L"] == depth and r["family"] == "rp_s_mixer"])
        if normal[2] and rp[2]:
            rows.append((depth, normal, rp))
    return rows


def fig7_rows(runs: list[dict], epochs: list[int | None]) -> list[dict]:
    rows = [
        {
            "L": depth,
            "epoch": "final" if epoch is None else epoch,
            "normal": fmt(*normal),
            "rp": fmt(*rp),
            "rp_minus_normal_pts": round(100 * (rp[0] - normal[0]), 2),
        }
        for epoch in epochs
        for depth, normal, rp in fig7_depths(runs, epoch)
    ]
    return sorted(rows, key=lambda row: row["L"])  # per depth, in the order of `epochs` (a stable sort)


def rp_blocks(permute) -> str:
    """App. D.5's name for a `permute` value: which blocks are RP ("none", "block 1", "blocks 1, 3", "all")."""
    flags = [permute] if isinstance(permute, bool) or permute is None else list(permute)
    on = [i + 1 for i, flag in enumerate(flags) if flag]
    if not on:
        return "none"
    if len(on) == len(flags) and (len(flags) > 1 or permute is True):
        return "all"
    return ("block " if len(on) == 1 else "blocks ") + ", ".join(map(str, on))


def d5_rows(runs: list[dict], epochs: list[int | None]) -> list[dict]:
    """App. D.5 at each Ω: the 4-block S-Mixer with one RP block, by its position, beside "none" (the normal
    S-Mixer) and "all" (the RP S-Mixer). `run_cpu.sh paper_d5` trains only the four positions: none and all
    are Fig. 7's L = 4 runs at the same S = C, the same configs, which are not trained twice."""
    rows = []
    order = ["none", "block 1", "block 2", "block 3", "block 4", "all"]
    for exponent in sorted({r["omega_exp"] for r in runs if r["item"] == "d5"}):
        d5 = [r for r in runs if r["item"] == "d5" and r["omega_exp"] == exponent]
        groups: dict[str, tuple[str, list[dict]]] = defaultdict(lambda: ("d5", []))
        for r in d5:
            groups[rp_blocks(r["permute"])][1].append(r)
        widths = {(r["C"], r["S"]) for r in d5}
        for label, family in (("none", "s_mixer"), ("all", "rp_s_mixer")):
            if label not in groups:
                same = [
                    r
                    for r in runs
                    if r["item"] == "fig7"
                    and r["omega_exp"] == exponent
                    and r["family"] == family
                    and r["L"] == 4
                    and (r["C"], r["S"]) in widths
                ]
                if same:
                    groups[label] = ("fig7 L = 4", same)
        none = groups["none"][1] if "none" in groups else []
        for label in sorted(groups, key=lambda k: (order.index(k) if k in order else len(order), k)):
            source, group = groups[label]
            if not any(r["epochs"] or r["final"] is not None for r in group):
                continue
            first = group[0]
            row = {"omega": f"2^{exponent}", "rp_blocks": label, "runs_from": source, "C": first["C"], "S": first["S"]}
            for epoch in epochs:
                row["final" if epoch is None else f"ep{epoch}"] = fmt(*mean_sd([error_at(r, epoch) for r in group]))
            final, base = mean_sd([r["final"] for r in group]), mean_sd([r["final"] for r in none])
            row["final_minus_none_pts"] = (
                round(100 * (final[0] - base[0]), 2) if final[2] and base[2] and label != "none" else None
            )
            rows.append(row)
    return rows


def fig7_fit(runs: list[dict]) -> list[dict]:
    """Per depth L and family, over Fig. 7's finished runs: the last epoch's training loss, the test loss and
    their difference, beside the final test error. The paper explains RP's catching up by "deep RP-Mixer's
    resistance to overfitting or shallow RP-Mixer's small receptive fields" (Sec. 5.4, remark on depth):
    a test loss well above the training loss is the overfitting that explanation needs."""
    rows = []
    finished = [r for r in runs if r["item"] == "fig7" and r["final"] is not None and r.get("train_loss") is not None]
    for depth in sorted({r["L"] for r in finished}):
        for family in ("s_mixer", "rp_s_mixer"):
            part = [r for r in finished if r["L"] == depth and r["family"] == family and r.get("test_loss") is not None]
            if not part:
                continue
            train, test = mean_sd([r["train_loss"] for r in part]), mean_sd([r["test_loss"] for r in part])
            rows.append(
                {
                    "L": depth,
                    "family": FAMILIES[family],
                    "train_loss": fmt(*train, scale=1.0),
                    "test_loss": fmt(*test, scale=1.0),
                    "test_minus_train": round(statistics.fmean(r["test_loss"] - r["train_loss"] for r in part), 3),
                    "final_error": fmt(*mean_sd([r["final"] for r in part])),
                }
            )
    return rows


def fig7_by_epoch(runs: list[dict]) -> list[dict]:
    """`fig7_rows` after every epoch, over the finished runs only (item 5: when RP's gap opens or closes)."""
    finished = [r for r in runs if r["item"] == "fig7" and r["final"] is not None]
    return fig7_rows(finished, sorted({epoch for r in finished for epoch in r["error_curve"]}))


def plot_fig7(rows: list[dict], every_epoch: list[dict], out: Path) -> None:
    """RP − normal against depth at a few epochs (left) and, per depth, after every epoch (right)."""
    if not rows:
        return
    plt = pyplot()
    fig, (ax, ax_epoch) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, epoch in enumerate(["final", 20, 50, 100]):
        part = [r for r in rows if r["epoch"] == epoch]
        if part:
            ax.plot(
                [r["L"] for r in part],
                [r["rp_minus_normal_pts"] for r in part],
                "o-",
                color=f"C{i}",
                label=f"epoch {epoch}",
            )
    for depth in sorted({r["L"] for r in every_epoch}):
        part = [r for r in every_epoch if r["L"] == depth and r["epoch"] != "final"]
        ax_epoch.plot([r["epoch"] for r in part], [r["rp_minus_normal_pts"] for r in part], lw=1, label=f"L = {depth}")
    ax.set(xlabel="depth L (blocks)", ylabel="RP − normal test error (points)")
    ax.set_xticks(sorted({r["L"] for r in rows}))
    ax.set_title("Fig. 7 at S = C: does RP catch up with depth?")
    ax_epoch.set(xlabel="epoch", ylabel="RP − normal test error (points)")
    ax_epoch.set_title("… after every epoch (finished runs)")
    for axis in (ax, ax_epoch):
        axis.axhline(0, color="k", lw=0.8)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fig7_gap.png", dpi=120)
    plt.close(fig)


OMEGA_EPOCHS = (10, 50, None)  # issue 45: the gap early, midway and at the end of the paper's 200 epochs


def omega_rows(runs: list[dict]) -> list[dict]:
    """RP against normal as Ω grows: per Ω and epoch, the S-Mixer's and the RP S-Mixer's test error at the grid's
    S ≈ C point (the C closest to S in log ratio), and RP − normal, paired by seed (a seed fixes the data order
    of both families): mean ± sd over the seeds both families have there."""
    rows = []
    fig5 = [r for r in runs if r["item"] == "fig5" and r["family"] != "sw_mlp"]
    for exponent in sorted({r["omega_exp"] for r in fig5}):
        at_omega = [r for r in fig5 if r["omega_exp"] == exponent]
        planned = {(r["C"], r["S"]) for r in at_omega}
        C, S = min(planned, key=lambda cs: (abs(math.log(cs[0] / cs[1])), cs))
        for epoch in OMEGA_EPOCHS:
            errors = {
                family: {
                    r["seed"]: error_at(r, epoch)
                    for r in at_omega
                    if r["family"] == family and (r["C"], r["S"]) == (C, S) and error_at(r, epoch) is not None
                }
                for family in ("s_mixer", "rp_s_mixer")
            }
            paired = sorted(set(errors["s_mixer"]) & set(errors["rp_s_mixer"]))
            if not paired:
                continue
            gaps = [errors["rp_s_mixer"][s] - errors["s_mixer"][s] for s in paired]
            rows.append(
                {
                    "omega": f"2^{exponent}",
                    "omega_exp": exponent,
                    "C": C,
                    "S": S,
                    "epoch": "final" if epoch is None else epoch,
                    "seeds": ", ".join(map(str, paired)),
                    "s_mixer_error": fmt(*mean_sd([errors["s_mixer"][s] for s in paired])),
                    "rp_s_mixer_error": fmt(*mean_sd([errors["rp_s_mixer"][s] for s in paired])),
                    "rp_minus_normal": fmt(*mean_sd(gaps)),
                    "rp_minus_normal_pts": round(100 * statistics.fmean(gaps), 2),
                    "gaps_pts": [round(100 * g, 2) for g in gaps],
                    "errors_pts": {f: [round(100 * errors[f][s], 2) for s in paired] for f in errors},
                    # item 1's rule: a third seed where two seeds' final gaps differ by more than the gap itself
                    "third_seed": (
                        ("due" if max(gaps) - min(gaps) > abs(statistics.fmean(gaps)) else "no")
                        if epoch is None and len(paired) == 2
                        else "–"
                    ),
                }
            )
    return rows


def omega_fit(rows: list[dict]) -> list[dict]:
    """Per epoch: RP − normal (points) against log2 Ω by least squares over every seed's gap (each seed of each Ω
    one observation), the slope per doubling of Ω with its standard error, and, only where the slope is
    negative, the Ω at which the line reaches zero (an extrapolation of the fitted trend, nothing more). The
    rule of issue 45 (docs/reproductions/appendix.md, "How the claims move with Ω"): **closing** if slope + 2 SE < 0,
    **widening** if slope − 2 SE > 0, else **no trend resolved**; read once three Ω have two seeds each."""
    fits = []
    for epoch in ("10", "50", "final"):
        points = [(r["omega_exp"], g) for r in rows if str(r["epoch"]) == epoch for g in r["gaps_pts"]]
        omegas = sorted({x for x, _ in points})
        if len(omegas) < 2 or len(points) < 3:
            continue
        xs, ys = [x for x, _ in points], [y for _, y in points]
        slope, intercept = statistics.linear_regression(xs, ys)
        residual = sum((y - intercept - slope * x) ** 2 for x, y in points) / (len(points) - 2)
        mean_x = statistics.fmean(xs)
        se = math.sqrt(residual / sum((x - mean_x) ** 2 for x in xs))
        trend = "closing" if slope + 2 * se < 0 else "widening" if slope - 2 * se > 0 else "no trend resolved"
        seeded = sum(sum(1 for x, _ in points if x == omega) >= 2 for omega in omegas)
        zero = -intercept / slope if slope < 0 else None
        fits.append(
            {
                "epoch": epoch,
                "omegas": ", ".join(f"2^{x}" for x in omegas),
                "gaps": len(points),
                "slope_pts_per_doubling": round(slope, 2),
                "se": round(se, 2),
                "trend": trend,
                "zero_at_omega": f"2^{zero:.1f} (extrapolated)" if zero is not None else "–",
                "status": "read" if seeded >= 3 else "provisional (fewer than three Ω with two seeds)",
            }
        )
    return fits


def plot_omega(rows: list[dict], out: Path) -> None:
    """Left: RP − normal at S ≈ C against Ω (every seed a dot, the mean a line) at the epochs `omega_rows` reads.
    Right: each family's final test error there (Fig. 5's S = C point against Ω; the paper's text gives no
    number to set beside it)."""
    if not rows:
        return
    plt = pyplot()
    fig, (gap, error) = plt.subplots(1, 2, figsize=(10.4, 4.2))
    for i, epoch in enumerate(("10", "50", "final")):
        part = sorted((r for r in rows if str(r["epoch"]) == epoch), key=lambda r: r["omega_exp"])
        if not part:
            continue
        xs = [r["omega_exp"] for r in part]
        gap.plot(xs, [r["rp_minus_normal_pts"] for r in part], "-", color=f"C{i}", label=f"epoch {epoch}")
        for r in part:
            gap.plot([r["omega_exp"]] * len(r["gaps_pts"]), r["gaps_pts"], "o", color=f"C{i}", ms=4)
    final = sorted((r for r in rows if str(r["epoch"]) == "final"), key=lambda r: r["omega_exp"])
    for i, (family, label) in enumerate((("s_mixer", "S-Mixer"), ("rp_s_mixer", "RP S-Mixer"))):
        means = [statistics.fmean(r["errors_pts"][family]) for r in final]
        error.plot([r["omega_exp"] for r in final], means, "-", color=f"C{i + 3}", label=label)
        for r in final:
            values = r["errors_pts"][family]
            error.plot([r["omega_exp"]] * len(values), values, "o", color=f"C{i + 3}", ms=4)
    exponents = sorted({r["omega_exp"] for r in rows})
    for ax in (gap, error):
        ax.set_xticks(exponents, [f"2^{x}" for x in exponents])
        ax.set_xlabel("Ω (connections per layer)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    gap.axhline(0, color="k", lw=0.8)
    gap.set(ylabel="RP − normal test error at S ≈ C (points)", title="RP against normal as Ω grows (dots: seeds)")
    error.set(ylabel="test error at S ≈ C, last epoch (%)", title="Each family at S ≈ C (dots: seeds)")
    fig.tight_layout()
    fig.savefig(out / "omega_gap.png", dpi=120)
    plt.close(fig)


DOC_OPEN = re.compile(r"<!-- paper_schedule\.py (?P<name>[A-Za-z0-9_]+\.md) -->")
DOC_CLOSE = "<!-- /paper_schedule.py -->"


def doc_blocks(doc: Path) -> list[tuple[int, int, str]]:
    """The generated blocks of DOC: (line of the opening marker, line of the closing one, file named), 0-based;
    a marker out of place is one line naming the line and the fix (before --out is written)."""
    if not doc.is_file():
        raise SystemExit(
            f"paper_schedule.py: --doc {doc}: no such file; give the page to fill (docs/reproductions/appendix.md)"
        )
    blocks, opened = [], None
    for number, line in enumerate(doc.read_text().splitlines()):
        match = DOC_OPEN.fullmatch(line.strip())
        if match or line.strip() == DOC_CLOSE:
            if (match is None) == (opened is None):
                what = "opens a block inside the block of line" if match else "closes no block: no opening marker"
                where = f" {opened[0] + 1}" if match else " before it"
                raise SystemExit(
                    f"paper_schedule.py: --doc {doc} line {number + 1}: '{line.strip()}' {what}{where}; each "
                    f"'<!-- paper_schedule.py NAME.md -->' is closed by '{DOC_CLOSE}' before the next opens"
                )
            if match:
                opened = (number, match["name"])
            else:
                blocks.append((opened[0], number, opened[1]))
                opened = None
        elif line.lstrip().startswith("<!-- paper_schedule.py"):
            raise SystemExit(
                f"paper_schedule.py: --doc {doc} line {number + 1}: '{line.strip()}' is not a marker; write "
                f"'<!-- paper_schedule.py NAME.md -->' (NAME.md a table --out writes, e.g. points.md) or '{DOC_CLOSE}'"
            )
    if opened is not None:
        raise SystemExit(
            f"paper_schedule.py: --doc {doc} line {opened[0] + 1}: the block of {opened[1]} is not closed; "
            f"add '{DOC_CLOSE}' after its table"
        )
    return blocks


def fill_doc(doc: Path, out: Path) -> int:
    """Each block of DOC (`doc_blocks`) becomes the table of OUT/NAME.md (its lines that start with "|"; the
    whole text where the file has no table yet, e.g. "No claim has the runs its rule reads yet."). The page
    is written once, after every block is known: a block naming a file --out lacks leaves it as it was.
    Returns the number of blocks."""
    blocks = doc_blocks(doc)
    lines = doc.read_text().splitlines(keepends=True)
    for start, end, name in reversed(blocks):
        source = out / name
        if not source.is_file():
            raise SystemExit(
                f"paper_schedule.py: --doc {doc} line {start + 1}: the block names {name}, which --out {out} does "
                f"not hold; name one of {', '.join(sorted(p.name for p in out.glob('*.md')))}"
            )
        text = source.read_text()
        table = [line for line in text.splitlines(keepends=True) if line.startswith("|")] or [text]
        lines[start + 1 : end] = table
    doc.write_text("".join(lines))
    return len(blocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="runs/repro")
    parser.add_argument("--out", default="docs/reproductions/paper")
    parser.add_argument(
        "--recorded",
        help="a folder an earlier report wrote (e.g. docs/reproductions/paper): its runs count beside --runs'",
    )
    parser.add_argument(
        "--doc",
        help="a page (docs/reproductions/appendix.md) whose '<!-- paper_schedule.py NAME.md -->' blocks get --out's tables",
    )
    args = parser.parse_args()
    if args.doc:
        doc_blocks(Path(args.doc))  # a misplaced marker stops the run before --out is written
    runs = read_runs(Path(args.runs))
    if args.recorded:
        runs = merge_runs(runs, read_recorded(Path(args.recorded)))
    if not runs:
        raise SystemExit(f"paper_schedule.py: no paper-schedule sweeps under {args.runs}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(
        out / "fig5_runs.csv",
        [
            {k: v for k, v in r.items() if k != "error_curve"}
            | {k: None if r.get(k) is None else round(r[k], digits) for k, digits in RECORD_DIGITS.items()}
            for r in runs
        ],
    )
    timed = machine_time(runs)
    write_csv(out / "machine_time.csv", timed)
    (out / "machine_time.md").write_text(
        (markdown(timed) + MACHINE_TIME_NOTE) if timed else "No finished run has its epoch times logged yet.\n"
    )
    # Every run's test error after every epoch: the curves outlive the run directories (which stay on the
    # machine that trained them), so the figures above can be checked against the data behind them.
    write_csv(
        out / "curves.csv",
        [
            {
                "sweep": r["sweep"],
                "point": r["point"],
                "seed": r["seed"],
                "epoch": epoch,
                "test_error": round(error, ERROR_DIGITS),
            }
            for r in runs
            for epoch, error in sorted(r["error_curve"].items())
        ],
        list(CURVE_KEYS_ORDER),  # read back by --recorded
    )
    epochs = [*EPOCHS, None]
    claims = fig5_claims(runs, epochs)
    write_csv(out / "claims.csv", claims)
    (out / "claims.md").write_text(markdown(claims) or "No Fig. 5 grid has three points at any epoch yet.\n")
    every_epoch = claims_by_epoch(runs)
    write_csv(out / "claims_by_epoch.csv", every_epoch)
    plot_fig5(runs, out)
    for exponent in sorted({r["omega_exp"] for r in runs}):
        plot_curves(runs, exponent, out)
        plot_claims(every_epoch, exponent, out)
    points = points_table(runs, [10, 20, 50, 100, 150, None])
    write_csv(out / "points.csv", points)
    (out / "points.md").write_text(markdown(points))
    third = third_seed_points(runs)
    write_csv(out / "third_seed.csv", third)
    (out / "third_seed.md").write_text(
        markdown(third) + THIRD_SEED_NOTE
        if third
        else "No pair of finished two-seed points is closer than twice its spread yet.\n"
    )
    # what `run_cpu.sh paper_third_seed` reads (written empty, header only, when no point needs one)
    with (out / "third_seed_runs.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["omega_exp", "family", "point", "C", "p"])
        writer.writeheader()
        writer.writerows(third_seed_runs(runs))
    judged = verdicts(runs)
    write_csv(out / "verdicts.csv", judged)
    (out / "verdicts.md").write_text(
        markdown(judged) + VERDICTS_NOTE if judged else "No claim has the runs its rule reads yet.\n"
    )
    sevens = fig7_rows(runs, epochs)
    write_csv(out / "fig7.csv", sevens)
    (out / "fig7.md").write_text(markdown(sevens) or "No depth has both a normal and an RP run logged yet.\n")
    sevens_every_epoch = fig7_by_epoch(runs)
    write_csv(out / "fig7_by_epoch.csv", sevens_every_epoch)
    plot_fig7(sevens, sevens_every_epoch, out)
    fits = fig7_fit(runs)
    write_csv(out / "fig7_fit.csv", fits)
    (out / "fig7_fit.md").write_text(markdown(fits) or "No Fig. 7 run has finished with its losses logged yet.\n")
    fives = d5_rows(runs, [20, 50, 100, 150, None])
    write_csv(out / "d5.csv", fives)
    (out / "d5.md").write_text(markdown(fives) or "No App. D.5 run has logged an epoch yet.\n")
    omegas = omega_rows(runs)
    write_csv(out / "omega.csv", [{k: v for k, v in r.items() if k not in ("gaps_pts", "errors_pts")} for r in omegas])
    (out / "omega.md").write_text(
        markdown(
            [
                {k: v for k, v in r.items() if k not in ("gaps_pts", "errors_pts", "omega_exp", "rp_minus_normal_pts")}
                for r in omegas
            ]
        )
        or "No Ω has both families at S ≈ C yet.\n"
    )
    trends = omega_fit(omegas)
    write_csv(out / "omega_fit.csv", trends)
    (out / "omega_fit.md").write_text(markdown(trends) or "Fewer than two Ω have both families at S ≈ C yet.\n")
    plot_omega(omegas, out)
    unfinished = [r for r in runs if r["final"] is None and r["epochs"]]
    print(markdown(claims))
    print(markdown(sevens))
    print(markdown(fives))
    partial = ", ".join(f"{r['sweep']}/{r['point']}/seed{r['seed']}: {r['epochs']} epochs" for r in unfinished)
    finished = sum(r["final"] is not None for r in runs)
    print(f"{len(runs)} runs in the sweeps; {finished} finished; {len(unfinished)} running or stopped ({partial})")
    print(f"written: {', '.join(sorted(p.name for p in out.iterdir()))}")
    if args.doc:
        print(f"{args.doc}: {fill_doc(Path(args.doc), out)} tables from {out}")


if __name__ == "__main__":
    main()
