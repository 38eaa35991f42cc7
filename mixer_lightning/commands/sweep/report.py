"""``mixer sweep report``: the finished runs of one or more sweeps (one series each: e.g. normal and RP) in
``report.csv`` (one row per run) and ``summary.csv`` (test error mean ± std over seeds, per series and grid
point, one column per generic axis), and the paper's plots of them (`plots`). With generic axes the summary
names, per series and width point, the axis values of the lowest mean error (Table 1's choice of learning
rate: "the highest accuracy, averaged over the seeds"). With a CKA reference (``--cka_reference``):
``cka.csv`` and ``cka_vs_density.png`` (Fig. 2(a), `cka`). Ordinary runs (no sweep.json) are set side by
side instead (`compare`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from jsonargparse.typing import PositiveInt

from mixer_lightning.commands.sweep.curves import LABEL_HELP, labelled, series_names
from mixer_lightning.commands.sweep.manifest import MANIFEST, METRICS, REFERENCE, load_metrics, read_manifest
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import check_output_dir, write_csv

DENSITY_KINDS = ("densities_at_omega", "densities_at_width")
FIGURES = ("C", "S", "P", "m", "p", "gamma")


def _final_train_loss(run_dir: str) -> float | None:
    from mixer_lightning.analysis.curves import epoch_curves, has_logs

    curve = epoch_curves(run_dir, ["train/loss_epoch"])["train/loss_epoch"] if has_logs(run_dir) else {}
    return curve[max(curve)] if curve else None


def _partial(metrics: dict) -> str:
    """ "" for a test of the whole split, else what was tested ("64 of 359", or "yes")."""
    if metrics.get("partial") is not True:
        return ""
    images, total = metrics.get("images"), metrics.get("of")
    return f"{images:,} of {total:,}" if isinstance(images, int) and isinstance(total, int) else "yes"


def collect(directory: str, series: str) -> tuple[dict, list[dict]]:
    """The manifest of a sweep and one row per tested grid run."""
    manifest = read_manifest(directory)
    rows = []
    for entry in manifest["runs"]:
        if entry.get("role") == REFERENCE:
            continue
        metrics, damaged = load_metrics(entry["run_dir"])
        require(
            damaged is None,
            "directories",
            f"{str(Path(entry['run_dir'], METRICS))!r} is damaged ({damaged})",
            f"run `mixer sweep point {directory} {entry['name']}` to test that run again",
        )
        if metrics is None:
            continue
        point = entry.get("point") or Path(entry["run_dir"]).parent.name
        row = {"series": series, "point": point, "width_point": entry.get("width_point") or point}
        row |= {k: entry.get(k) for k in FIGURES} | (entry.get("axes") or {})
        row |= {"seed": entry["seed"], "test_acc1": metrics["test/acc1"], "test_error": 1.0 - metrics["test/acc1"]}
        row["partial"] = _partial(metrics)  # a test of part of the split (--trainer.limit_test_batches)
        if manifest.get("kind") in DENSITY_KINDS:
            row["train_loss"] = _final_train_loss(entry["run_dir"])
        rows.append(row)
    return manifest, rows


def _value_key(value) -> tuple:
    """Numbers by value (depth 8 before 16, which the names "num_blocks16" < "num_blocks8" do not give)."""
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, float(value), "") if numeric else (1, 0.0, str(value))


def summarise(rows: list[dict], axis_names: list[str]) -> list[dict]:
    """Mean ± std of the test error (and the final training loss, where read) over seeds, per series and
    point; one seed has no spread (None: "–" and no error bar, not a measured 0)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["series"], row["point"]), []).append(row)
    summary = []
    for (series, point), members in groups.items():
        errors, first = [r["test_error"] for r in members], members[0]
        entry = {"series": series, "point": point, "width_point": first["width_point"]}
        entry |= {k: first.get(k) for k in (*FIGURES, *axis_names)}
        entry |= {
            "seeds": len(members),
            "test_error_mean": statistics.fmean(errors),
            "test_error_std": statistics.stdev(errors) if len(errors) > 1 else None,
            "partial": ", ".join(f"seed {r['seed']}: {r['partial']}" for r in members if r["partial"]),
        }
        if "train_loss" in first:
            losses = [r["train_loss"] for r in members if r["train_loss"] is not None]
            entry["train_loss_mean"] = statistics.fmean(losses) if losses else None
        summary.append(entry)
    order = lambda r: (r["series"], r["m"] or 0, *(_value_key(r.get(n)) for n in axis_names), r["point"])  # noqa: E731
    return sorted(summary, key=order)


def lowest(rows: list[dict]) -> list[dict]:
    """The row of the lowest mean test error and those tied with it: whose mean less its std over seeds reaches
    the lowest's mean plus its std (the seeds cannot tell them apart). One seed has no spread: no tie."""
    low = min(rows, key=lambda r: r["test_error_mean"])
    reach = low["test_error_mean"] + (low["test_error_std"] or 0.0)
    tied = [r for r in rows if r is not low and r["test_error_mean"] - (r["test_error_std"] or 0.0) <= reach]
    return [low, *tied] if low["test_error_std"] is not None else [low]


def best_by_axes(summary: list[dict], axis_names: list[str]) -> list[dict]:
    """Per series and width point with a choice (two settings or more), the axis values of the lowest mean error,
    and the points tied with it within the seeds' spread (`lowest`: then none is the best)."""
    groups: dict[tuple, list[dict]] = {}
    for row in summary if axis_names else ():
        groups.setdefault((row["series"], row["width_point"]), []).append(row)
    best = []
    for (series, point), members in groups.items():
        if len(members) > 1:
            w, *tied = lowest(members)
            best.append(
                {"series": series, "point": point, **{n: w[n] for n in axis_names}}
                | {k: w[k] for k in ("test_error_mean", "test_error_std", "seeds")}
                | {"tied": [r["point"] for r in tied]}
            )
    return best


def report_directories(
    directories: list[str],
    plot: bool = True,
    out: str | None = None,
    cka_options: dict | None = None,
    labels: list[str] | None = None,
) -> dict:
    """Collect, summarise, write the CSVs and plots; the CKA diagonals where a sweep has a reference. Returns
    what `mixer sweep report --json` prints."""
    out_dir = check_output_dir(out or directories[0], "out")
    if not any(Path(d, MANIFEST).is_file() for d in directories):  # ordinary runs, side by side
        from mixer_lightning.commands.sweep.compare import compare_runs

        return compare_runs(directories, out_dir, plot, labels)
    rows, manifests, names = [], [], labelled(series_names(directories), labels)
    for directory, series in zip(directories, names, strict=True):
        manifest, found = collect(directory, series)
        manifests.append(manifest)
        rows.extend(found)
    axis_names = list(dict.fromkeys(a["name"] for m in manifests for a in m.get("axes") or []))
    has_reference = any(r.get("role") == REFERENCE for m in manifests for r in m["runs"])
    require(
        bool(rows) or has_reference, "directories", "no finished runs (test_metrics.json) yet", "run the sweep first"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {k: manifests[0].get(k) for k in ("omega", "gamma", "kind", "width")}
    result |= {"axes": axis_names, "summary": [], "best": [], "plots": [], "csv": None}
    if rows:
        summary = summarise(rows, axis_names)
        write_csv(out_dir / "report.csv", rows)
        write_csv(out_dir / "summary.csv", summary)
        result.update(summary=summary, best=best_by_axes(summary, axis_names), csv=str(out_dir / "report.csv"))
        if plot:
            from mixer_lightning.commands.sweep.plots import plot_summary

            result["plots"] = [str(p) for p in plot_summary(summary, manifests, axis_names, out_dir, names)]
    if has_reference:
        from mixer_lightning.commands.sweep.cka import cka_report

        result["cka"] = cka_report(names, manifests, out_dir, plot, **(cka_options or {}))
        result["plots"] += result["cka"]["plots"]
    return result


def add_report_arguments(parser) -> None:
    parser.add_argument(
        "directories", nargs="+", help="sweep directories (one series each: e.g. normal and RP), or runs side by side"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--out", type=str, default=None, help="where to write the CSVs and plots (default: the first)")
    parser.add_argument("--label", type=str, action="append", default=None, help=f"{LABEL_HELP}; runs: one per run")
    parser.add_argument(
        "--cka_batches", type=PositiveInt | None, default=None, help="CKA: test minibatches per CKA (default: all)"
    )
    parser.add_argument(
        "--cka_batch_size", type=PositiveInt | None, default=None, help="CKA minibatch size (default: the data's)"
    )
    parser.add_argument("--accelerator", type=str, default="auto", help="for the CKA: auto, cpu, gpu, …")


def _error(row: dict, cell: bool = True) -> str:
    """Mean ± std of the test error; one seed has no std: "–" in its place in a table cell."""
    if row["test_error_std"] is None:
        return f"{row['test_error_mean']:.4f}" + (" –" if cell else "")
    return f"{row['test_error_mean']:.4f} ± {row['test_error_std']:.4f}"


def run_report(args) -> None:
    """Gather finished sweep runs into report.csv / summary.csv and plot them (test error against the width,
    C, γ, the sparsity, each generic axis; average diagonal CKA against the density); or set ordinary runs
    side by side (runs.csv and their curves).

    Examples:
        mixer sweep report sweeps/fig5_c10 sweeps/fig5_c10_rp
        mixer sweep report runs/cifar10_s_mixer/version_3 runs/cifar10_rp_s_mixer/version_1 --out compare
    """
    cka_options = {"batches": args.cka_batches, "batch_size": args.cka_batch_size, "accelerator": args.accelerator}
    result = report_directories(args.directories, out=args.out, cka_options=cka_options, labels=args.label)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    if "runs" in result:
        from mixer_lightning.commands.sweep.compare import print_runs

        return print_runs(result)
    if result["summary"]:
        print(
            f"{'series':<20} {'point':<24} {'C':>6} {'S':>6} {'γ':>7} {'p':>8} {'m':>8} {'seeds':>5} {'test error':>16}"
        )
    for r in result["summary"]:
        cells = [
            "-" if r[k] is None else f"{r[k]:.4g}" if k in ("gamma", "p") else r[k]
            for k in ("C", "S", "gamma", "p", "m")
        ]
        partial = f"  (partial test: {r['partial']})" if r["partial"] else ""
        print(
            f"{r['series']:<20} {r['point']:<24} {cells[0]:>6} {cells[1]:>6} {cells[2]:>7} {cells[3]:>8} {cells[4]:>8} {r['seeds']:>5} {_error(r):>16}{partial}"
        )
    for b in result["best"]:
        values = ", ".join(f"{name} = {b[name]}" for name in result["axes"])
        seeds = f"{b['seeds']} seed{'s' if b['seeds'] != 1 else ''}"
        tie = f"; tied within the seeds' spread with {', '.join(b['tied'])}" if b["tied"] else ""
        print(
            f"{'lowest' if tie else 'best'} for {b['series']} {b['point']}: {values} (test error {_error(b, cell=False)}, {seeds}){tie}"
        )
    if result["summary"]:
        low = [r["point"] for r in lowest(result["summary"])]
        said = low[0] if len(low) == 1 else f"none: {', '.join(low)} tie within the seeds' spread"
        print(f"lowest error: {said}; written: {result['csv']}")
    for row in (result.get("cka") or {}).get("summary", []):
        print(
            f"CKA {row['series']} {row['point']}: p = {row['p']:.4g}, mean diagonal {row['cka_mean']:.4f} ± {row['cka_std']:.4f} ({row['seeds']} seeds)"
        )
    if result["plots"]:
        print("plots: " + ", ".join(result["plots"]))
