"""The tables and plot of docs/reproductions.md's section 0c, "RP in the paper's regimes" (issue 61), from the runs
of `OMEGA_EXP=14 docs/reproductions/run_cpu.sh paper_rp_regimes` and section 0's App. C.4 runs at the same point.

    .venv/bin/python docs/reproductions/rp_regimes.py [--runs runs/repro] [--out docs/reproductions/rp_regimes]
        [--doc docs/reproductions.md]

Every run has 8 blocks at Ω = 2^14, (C, S) = (25, 26), but arm (c)'s MLP-Mixers (γ = 4, S = C = 32, Ω = 2^17). A regime (an arm) is a recipe; its RP model is paired by seed
(same seed, same data order) with the normal model of the same recipe, or, for the output-only RP arm, which
changes the model and not the recipe, with App. C.4's S-Mixer. Runs validate on the test split every epoch
(`val_split: 0`), so `val/loss` and `val/acc1` are the test loss and error after every epoch; `train/loss_epoch` is
the epoch's mean training loss (augmented images, train mode). The final error is `mixer test` of `last.ckpt`.

Writes into --out (merged with what --out already holds, so the record outlives the run folders):
- ``runs.csv``: one row per run (arm, family, seed, epochs logged, the schedule's epochs, final test error,
  sha256[:16] of last.ckpt);
- ``curves.csv``: each run's test error, test loss and training loss after every epoch;
- ``regimes.csv`` / ``regimes.md``: per arm and family, the error (mean and 95 % t interval over seeds), RP − normal
  paired by seed with its interval, the test − training loss gap at epochs 10, 50 and the last, and the arm's
  verdict by the rule below; ``verdict.md``: the verdict across arms;
- ``regimes.png``: test error and the loss gap against the epoch, per arm and family (mean over seeds).

The rule (docs/reproductions.md 0c, fixed 2026-12-07 before any of these runs finished): a regime **closes** the
gap if its mean RP − normal is below 2 points, **reverses** it if below 0 beyond its interval, else the gap
**holds**; across regimes, holds in all → "not, robust across the paper's recipes", closes or reverses in any →
"not under C.4's recipe; <the regime> closes it". A verdict is final once both families have finished runs at
two seeds or more; before, the arm reads "provisional" at the last epoch its pairs share.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from mixer_lightning.analysis.curves import epoch_curves, has_logs  # noqa: E402

POINT = "C25_S26"  # Ω = 2^14's S ≈ C; arm (c)'s MLP-Mixer at S = C = 32 (ARM_POINT)
ARM_POINT = {"adamw_aa": "C32_S32"}
ARMS = {  # arm -> (label, recipe); the order of the table
    "c4": ("App. C.4", "Nesterov SGD lr 0.02, 200 epochs, crop + flip"),
    "output": ("(a) output-only RP", "App. C.4's recipe; J1 structured, J2 random (App. A.2.3)"),
    "lr0p1": ("(b) Fig. S.6", "Nesterov SGD lr 0.1, 600 epochs"),
    "adamw_aa": ("(c) Fig. S.8", "AdamW lr 0.01 + AutoAugment, batch 256, 200 epochs (MLP-Mixer, γ = 4, S = C = 32)"),
}
NORMAL = {"rp_s_mixer": "s_mixer", "rp_mlp_mixer": "mlp_mixer"}  # RP family -> its normal family
FAMILIES = {"s_mixer": "S-Mixer", "rp_s_mixer": "RP S-Mixer", "mlp_mixer": "MLP-Mixer", "rp_mlp_mixer": "RP MLP-Mixer"}
SWEEP = re.compile(
    r"rp_regime_(?P<arm>output|lr0p1|adamw_aa)_(?P<family>rp_s_mixer|s_mixer|rp_mlp_mixer|mlp_mixer)"
    r"|paper_2p14_fig5_(?P<c4>rp_s_mixer|s_mixer)(_C25_S26_seed\d+)?"
)
GAP_EPOCHS = (10, 50)  # and the last
CLOSES = 0.02  # the rule's 2 points
RUN_KEYS = ["arm", "family", "seed", "epochs", "max_epochs", "final", "checkpoint_sha256"]
CURVE_KEYS = ["arm", "family", "seed", "epoch", "test_error", "test_loss", "train_loss"]
DOC_OPEN = re.compile(r"<!-- rp_regimes\.py (?P<name>[a-z_]+\.md) -->")
DOC_CLOSE = "<!-- /rp_regimes.py -->"


def t_quantile(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom (exact to 3 decimals to df = 10,
    the Cornish-Fisher expansion beyond)."""
    table = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
    if df <= len(table):
        return table[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: list[float]) -> tuple[float, float, int]:
    """Mean and the half-width of its 95 % t interval (nan with one value)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return values[0], math.nan, 1
    return statistics.fmean(values), t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n), n


def read_runs(runs_root: Path) -> tuple[list[dict], list[dict]]:
    """(runs, curves) of every run of the regime sweeps and of section 0's C.4 runs at (25, 26) under RUNS."""
    runs, curves = [], []
    for manifest in sorted(runs_root.glob("*/sweep.json")):
        named = SWEEP.fullmatch(manifest.parent.name)
        if named is None:
            continue
        arm, family = ("c4", named["c4"]) if named["c4"] else (named["arm"], named["family"])
        for entry in json.loads(manifest.read_text())["runs"]:
            run_dir = Path(entry["run_dir"])  # relative to the checkout the sweep ran in (run from there)
            if not str(entry.get("point")).startswith(ARM_POINT.get(arm, POINT)) or not has_logs(run_dir):
                continue
            config = Path(entry["config"]).read_text() if Path(entry["config"]).is_file() else ""
            max_epochs = re.search(r"max_epochs: (\d+)", config)
            logs = epoch_curves(run_dir, ["val/acc1", "val/loss", "train/loss"])
            final = sha = None
            if (run_dir / "test_metrics.json").is_file():
                final = round(1.0 - json.loads((run_dir / "test_metrics.json").read_text())["test/acc1"], 4)
                sha = hashlib.sha256((run_dir / "checkpoints" / "last.ckpt").read_bytes()).hexdigest()[:16]
            key = {"arm": arm, "family": family, "seed": int(entry["seed"])}
            acc = logs["val/acc1"]
            runs.append(key | {"epochs": len(acc), "max_epochs": int(max_epochs[1]) if max_epochs else None}
                        | {"final": final, "checkpoint_sha256": sha})  # fmt: skip
            for epoch, value in acc.items():
                test_loss, train_loss = logs["val/loss"].get(epoch), logs["train/loss"].get(epoch)
                curves.append(
                    key
                    | {
                        "epoch": epoch + 1,  # epoch 1 = after one epoch
                        "test_error": round(1.0 - value, 4),
                        "test_loss": None if test_loss is None else round(test_loss, 4),
                        "train_loss": None if train_loss is None else round(train_loss, 4),
                    }
                )
    return runs, curves


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    numbers = {"seed": int, "epochs": int, "max_epochs": int, "epoch": int, "omega_exp": int}
    for row in rows:
        for key, value in row.items():
            if value == "":
                row[key] = None
            elif key in numbers:
                row[key] = numbers[key](value)
            elif key in ("final", "test_error", "test_loss", "train_loss"):
                row[key] = float(value)
    return rows


def recorded_c4(paper: Path) -> tuple[list[dict], list[dict]]:
    """Section 0's C.4 runs at (25, 26) from paper_schedule.py's record (PAPER/fig5_runs.csv, curves.csv; their folders
    may be gone): the finished runs, and their test error after every epoch (no losses: the record keeps none)."""
    runs, curves = [], []
    for row in read_csv(paper / "fig5_runs.csv"):
        if row["omega_exp"] == 14 and row["point"] == POINT and row["final"] is not None:
            runs.append({"arm": "c4", "family": row["family"], "seed": row["seed"], "epochs": row["epochs"],
                         "max_epochs": 200, "final": row["final"], "checkpoint_sha256": None})  # fmt: skip
    for row in read_csv(paper / "curves.csv"):
        named = SWEEP.fullmatch(row["sweep"])
        if named and named["c4"] and row["point"] == POINT:
            curves.append({"arm": "c4", "family": named["c4"], "seed": row["seed"], "epoch": row["epoch"],
                           "test_error": row["test_error"], "test_loss": None, "train_loss": None})  # fmt: skip
    return runs, curves


def order(row: dict) -> tuple:
    return list(ARMS).index(row["arm"]), list(FAMILIES).index(row["family"]), row["seed"], row.get("epoch", 0)


def merge(rows: list[dict]) -> list[dict]:
    """One row per run (or per run and epoch): a finished run over an unfinished one, then the longer curve, then the
    later in `rows` (the run folders after the record)."""
    best: dict[tuple, dict] = {}
    for row in rows:
        key = order(row)
        rank = (row.get("final") is not None, row.get("epochs") or 0)
        known = best.get(key)
        if known is None or rank >= (known.get("final") is not None, known.get("epochs") or 0):
            best[key] = row
    return [best[key] for key in sorted(best)]


def curve_of(curves: list[dict], arm: str, family: str, seed: int) -> dict[int, dict]:
    return {c["epoch"]: c for c in curves if (c["arm"], c["family"], c["seed"]) == (arm, family, seed)}


def pairs(runs: list[dict], arm: str, rp: str) -> list[tuple[dict, dict]]:
    """(RP run, normal run) by seed: the arm's own normal family, else App. C.4's (the output-only RP arm)."""
    normal_arm = arm if any(r["arm"] == arm and r["family"] == NORMAL[rp] for r in runs) else "c4"
    normal = {r["seed"]: r for r in runs if r["arm"] == normal_arm and r["family"] == NORMAL[rp]}
    return [(r, normal[r["seed"]]) for r in runs if r["arm"] == arm and r["family"] == rp and r["seed"] in normal]


def loss_gap(curve: dict[int, dict], epoch: int) -> float | None:
    row = curve.get(epoch)
    if row is None or row["test_loss"] is None or row["train_loss"] is None:
        return None
    return row["test_loss"] - row["train_loss"]


def difference(runs: list[dict], curves: list[dict], arm: str, rp: str) -> dict:
    """RP − normal paired by seed: final when every pair is finished (two or more), else at the last epoch every
    pair's curves share (provisional)."""
    found = pairs(runs, arm, rp)
    if not found:
        return {"n": 0}
    if len(found) >= 2 and all(a["final"] is not None and b["final"] is not None for a, b in found):
        values = [a["final"] - b["final"] for a, b in found]
        return dict(zip(("mean", "ci", "n"), mean_ci(values), strict=True)) | {"epoch": None, "final": True}
    by_seed = [(curve_of(curves, a["arm"], a["family"], a["seed"]), curve_of(curves, b["arm"], b["family"], b["seed"]))
               for a, b in found]  # fmt: skip
    common = set.intersection(*(set(x) & set(y) for x, y in by_seed))
    if not common:
        return {"n": 0}
    epoch = max(common)
    values = [x[epoch]["test_error"] - y[epoch]["test_error"] for x, y in by_seed]
    return dict(zip(("mean", "ci", "n"), mean_ci(values), strict=True)) | {"epoch": epoch, "final": False}


def verdict(diff: dict) -> str:
    if diff["n"] == 0:
        return "queued"
    upper = diff["mean"] + diff["ci"] if not math.isnan(diff["ci"]) else math.nan
    word = "reverses" if upper < 0 else "closes" if diff["mean"] < CLOSES else "holds"
    return word if diff["final"] else f"{word} (provisional, epoch {diff['epoch']})"


def pct(mean: float, ci: float, signed: bool = False) -> str:
    if math.isnan(mean):
        return "–"
    text = f"{100 * mean:+.2f}" if signed else f"{100 * mean:.2f}"
    return text + ("" if math.isnan(ci) else f" ± {100 * ci:.2f}")


def table(runs: list[dict], curves: list[dict]) -> list[dict]:
    """One row per (arm, family) with runs: error, RP − normal, loss gaps, verdict (RP rows)."""
    rows = []
    for arm, (label, recipe) in ARMS.items():
        for family in FAMILIES:
            mine = [r for r in runs if r["arm"] == arm and r["family"] == family]
            if not mine:
                continue
            finals = [r["final"] for r in mine if r["final"] is not None]
            error = pct(*mean_ci(finals)[:2]) + f" ({len(finals)})" if finals else "training"
            gaps = []
            for epoch in (*GAP_EPOCHS, None):
                values = []
                for r in mine:
                    curve = curve_of(curves, arm, family, r["seed"])
                    last = r["max_epochs"] if r["final"] is not None else None
                    value = loss_gap(curve, epoch or last) if (epoch or last) else None
                    if value is not None:
                        values.append(value)
                gaps.append(f"{statistics.fmean(values):+.3f}" if values else "–")
            diff = difference(runs, curves, arm, family) if family in NORMAL else None
            rows.append(
                {
                    "regime": label,
                    "recipe": recipe,
                    "family": FAMILIES[family],
                    "seeds": ", ".join(str(r["seed"]) for r in sorted(mine, key=lambda r: r["seed"])),
                    "test error % (95 % CI, n final)": error,
                    "RP − normal, points (95 % CI)": "" if diff is None else pct(diff.get("mean", math.nan), diff.get("ci", math.nan), True),
                    "loss gap at 10 / 50 / last": " / ".join(gaps),
                    "verdict": "" if diff is None else verdict(diff),
                }
            )  # fmt: skip
    return rows


def overall(rows: list[dict]) -> str:
    """The verdict across regimes (the C.4 arm is the finding itself; the others test its reach)."""
    verdicts = {r["regime"]: r["verdict"] for r in rows if r["verdict"]}
    others = {k: v for k, v in verdicts.items() if k != ARMS["c4"][0]}
    closing = [k for k, v in others.items() if v in ("closes", "reverses")]
    if closing:
        return f"not under C.4's recipe; {', '.join(closing)} closes it"
    pending = [
        k for k in (label for arm, (label, _) in ARMS.items() if arm != "c4") if verdicts.get(k) not in ("holds",)
    ]
    if pending:
        return f"pending: {', '.join(pending)} not final"
    return "not, robust across the paper's recipes"


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "No run yet.\n"
    keys = [k for k in rows[0] if k != "recipe"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict], keys: list[str]) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def plot(runs: list[dict], curves: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_error, ax_gap) = plt.subplots(1, 2, figsize=(11, 4))
    colours = dict(zip(ARMS, ("black", "tab:orange", "tab:blue", "tab:green"), strict=True))
    for arm, (label, _) in ARMS.items():
        for family in FAMILIES:
            seeds = sorted({r["seed"] for r in runs if r["arm"] == arm and r["family"] == family})
            per_seed = [curve_of(curves, arm, family, s) for s in seeds]
            per_seed = [c for c in per_seed if c]
            if not per_seed:
                continue
            epochs = sorted(set.intersection(*(set(c) for c in per_seed)))
            style = dict(color=colours[arm], linestyle="--" if family.startswith("rp_") else "-", linewidth=1)
            name = f"{label}: {FAMILIES[family]}"
            ax_error.plot(epochs, [100 * statistics.fmean(c[e]["test_error"] for c in per_seed) for e in epochs],
                          label=name, **style)  # fmt: skip
            gap = [(e, [loss_gap(c, e) for c in per_seed]) for e in epochs]
            gap = [(e, statistics.fmean(v)) for e, v in gap if None not in v]
            ax_gap.plot([e for e, _ in gap], [v for _, v in gap], **style)
    ax_error.set(xlabel="epoch", ylabel="test error (%)", title="RP in the paper's regimes (Ω = 2^14, C = 25, S = 26)")
    ax_error.set_ylim(25, 60)
    ax_gap.set(xlabel="epoch", ylabel="test loss − training loss", title="overfitting: the loss gap")
    ax_gap.axhline(0, color="grey", linewidth=0.5)
    ax_error.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def fill_doc(doc: Path, out: Path) -> int:
    """Each block of DOC between `<!-- rp_regimes.py NAME.md -->` and DOC_CLOSE becomes OUT/NAME.md."""
    lines = doc.read_text().splitlines(keepends=True)
    opened, blocks = None, []
    for number, line in enumerate(lines):
        match = DOC_OPEN.fullmatch(line.strip())
        if match:
            opened = (number, match["name"])
        elif line.strip() == DOC_CLOSE and opened is not None:
            blocks.append((*opened, number))
            opened = None
    for start, name, end in reversed(blocks):
        lines[start + 1 : end] = (out / name).read_text().splitlines(keepends=True)
    doc.write_text("".join(lines))
    return len(blocks)


def report(runs_root: Path, out: Path, paper: Path) -> tuple[list[dict], str]:
    fresh_runs, fresh_curves = read_runs(runs_root)
    c4_runs, c4_curves = recorded_c4(paper)
    runs = merge(c4_runs + read_csv(out / "runs.csv") + fresh_runs)
    curves = merge(c4_curves + read_csv(out / "curves.csv") + fresh_curves)
    rows = table(runs, curves)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "runs.csv", [r for r in runs if r["arm"] != "c4" or r["checkpoint_sha256"]], RUN_KEYS)
    write_csv(out / "curves.csv", [c for c in curves if c["arm"] != "c4" or c["test_loss"] is not None], CURVE_KEYS)
    write_csv(out / "regimes.csv", rows, list(rows[0]) if rows else ["regime"])
    (out / "regimes.md").write_text(markdown(rows))
    verdict_text = overall(rows)
    (out / "verdict.md").write_text(f"Across the regimes: **{verdict_text}**.\n")
    if curves:
        plot(runs, curves, out / "regimes.png")
    return rows, verdict_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/repro"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs/reproductions/rp_regimes")
    parser.add_argument(
        "--paper", type=Path, default=ROOT / "docs/reproductions/paper", help="paper_schedule.py's record"
    )
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    rows, verdict_text = report(args.runs, args.out, args.paper)
    print(markdown(rows) + f"\nAcross the regimes: {verdict_text}")
    if args.doc is not None:
        print(f"{args.doc}: {fill_doc(args.doc, args.out)} blocks filled")


if __name__ == "__main__":
    main()
