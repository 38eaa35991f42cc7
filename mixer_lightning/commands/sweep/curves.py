"""``mixer sweep curves``: training curves across seeds, as App. D.7 of Hayase & Karakida 2024 draws them
(Figs. S.6-S.8: the test loss (and train loss, test accuracy) of normal and RP Mixers over the epochs,
the mean over five seeds with the range between the minimum and the maximum shaded).

Each directory is one series (e.g. the normal and the RP sweep): a sweep directory (its runs grouped
by grid point, one curve per point) or any directory whose sub-directories are runs of one setting
(``runs/NAME`` with ``version_0`` … or ``seed0`` …, one curve). Curves are read from the runs' logs
(`mixer_lightning.analysis.curves`: TensorBoard event files or a CSVLogger's metrics.csv) and averaged
over the epochs every seed of a point reached. The configs validate on the test split (``val_split: 0``),
so ``val/loss`` is the paper's test loss.

Writes ``curves.csv`` (series, point, metric, epoch, mean, min, max, runs) and one plot per metric,
``curves_<metric>.png`` (``/`` written ``_``).

Examples:
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp                          Fig. S.6 (left): val/loss
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp --points C173_S16 --metric val/loss --metric train/loss_epoch
    mixer sweep curves runs/cifar10_d7_mlp_mixer runs/cifar10_d7_rp_mlp_mixer --metric val/acc1   Fig. S.8
"""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_curves, has_logs, spread
from mixer_lightning.commands.lists import comma_list
from mixer_lightning.commands.sweep.report import series_names
from mixer_lightning.commands.sweep.runs import MANIFEST, check_output_directory, read_manifest
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure, write_csv


def add_curves_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="one series each: sweep directories, or directories of runs")
    parser.add_argument(
        "--metric",
        type=str,
        action="append",
        default=None,
        help="a logged metric (repeatable; default val/loss, the test loss of D.7)",
    )
    parser.add_argument("--points", type=str, default=None, help="comma-separated grid points to draw (default: all)")
    parser.add_argument("--out", type=str, default=None, help="where to write (default: the first directory)")
    parser.add_argument("--json", action="store_true", help="print the curves as JSON")


def groups(directory: str) -> dict[str, list[str]]:
    """point -> the run directories (seeds) of a series directory."""
    root = Path(directory)
    if (root / MANIFEST).is_file():
        found: dict[str, list[str]] = {}
        for entry in read_manifest(root)["runs"]:
            if has_logs(entry["run_dir"]):
                found.setdefault(entry.get("point") or Path(entry["run_dir"]).parent.name, []).append(entry["run_dir"])
        return found
    require(
        root.is_dir(),
        "directories",
        f"{directory!r} is not a directory",
        "give sweep directories or directories of runs (runs/NAME)",
    )
    runs = [str(p) for p in sorted(root.iterdir()) if p.is_dir() and has_logs(p)]
    if not runs and has_logs(root):
        runs = [str(root)]
    return {root.name: runs} if runs else {}


def compute(directories: list[str], metrics: list[str], points: list[str] | None) -> list[dict]:
    """One entry per (series, point, metric): the curve's rows (epoch, mean, min, max, runs)."""
    curves = []
    for directory, series in zip(directories, series_names(directories), strict=True):
        found = groups(directory)
        require(
            bool(found),
            "directories",
            f"{directory!r} holds no runs with logs yet",
            "run the sweep (or give runs/NAME of `mixer fit` runs)",
        )
        for point, run_dirs in sorted(found.items()):
            if points and point not in points:
                continue
            per_run = [epoch_curves(run_dir, metrics) for run_dir in run_dirs]
            for metric in metrics:
                logged = [c[metric] for c in per_run if c[metric]]
                if logged:
                    curves.append(
                        {
                            "series": series,
                            "point": point,
                            "metric": metric,
                            "runs": len(logged),
                            "rows": spread(logged),
                        }
                    )
    for metric in metrics:
        require(
            any(c["metric"] == metric for c in curves),
            "metric",
            f"no run logged {metric!r}",
            "give a metric the runs log, e.g. val/loss, val/acc1, train/loss_epoch",
        )
    return curves


def plot(curves: list[dict], metric: str, path: Path) -> Path:
    """Mean over seeds with the min–max band; colour by point, line style by series."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    points = sorted({c["point"] for c in curves})
    series = sorted({c["series"] for c in curves})
    styles = ["-", "--", ":", "-."]
    for curve in (c for c in curves if c["metric"] == metric):
        color = f"C{points.index(curve['point']) % 10}"
        style = styles[series.index(curve["series"]) % len(styles)]
        rows = curve["rows"]
        epochs = [r["epoch"] for r in rows]
        ax.plot(
            epochs,
            [r["mean"] for r in rows],
            style,
            color=color,
            label=f"{curve['series']} {curve['point']} ({curve['runs']} seeds)",
        )
        ax.fill_between(epochs, [r["min"] for r in rows], [r["max"] for r in rows], color=color, alpha=0.18, lw=0)
    ax.set(xlabel="epoch", ylabel=metric, title=f"{metric}: mean over seeds, min–max shaded")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def run_curves(args) -> None:
    """Training curves across seeds (mean with a min–max band), per series and grid point (App. D.7)."""
    metrics = list(dict.fromkeys(args.metric or ["val/loss"]))
    points = comma_list(args.points, "points", str, "grid point ids", "C16_S173,C173_S16") if args.points else None
    out = check_output_directory(args.out or args.directories[0], "out")
    curves = compute(args.directories, metrics, points)
    out.mkdir(parents=True, exist_ok=True)
    table = [
        {"series": c["series"], "point": c["point"], "metric": c["metric"], **row} for c in curves for row in c["rows"]
    ]
    write_csv(out / "curves.csv", table)
    plots = [str(plot(curves, metric, out / f"curves_{metric.replace('/', '_')}.png")) for metric in metrics]
    if args.json:
        print(json.dumps({"curves": curves, "csv": str(out / "curves.csv"), "plots": plots}, indent=2))
        return
    for c in curves:
        last = c["rows"][-1]
        print(
            f"{c['series']:<24} {c['point']:<16} {c['metric']:<18} {c['runs']} seeds, {len(c['rows'])} epochs; "
            f"last epoch {last['epoch']}: {last['mean']:.4f} [{last['min']:.4f}, {last['max']:.4f}]"
        )
    print(f"written: {out / 'curves.csv'}, " + ", ".join(plots))
