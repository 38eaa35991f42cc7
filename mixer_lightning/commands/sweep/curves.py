"""``mixer sweep curves``: training curves across seeds as App. D.7 of Hayase & Karakida 2024 draws them
(Figs. S.6-S.8: the test loss of normal and RP Mixers over the epochs, the mean over seeds with the range
between the minimum and the maximum shaded).

Each directory is one series: a sweep directory (one curve per grid point) or a directory of runs
(``runs/NAME`` with ``version_0`` …): runs whose configs agree but for the seed are one curve, runs that
differ are separate curves named by what differs. Curves come from the runs' logs (TensorBoard event files
or a CSVLogger's metrics.csv), averaged over the epochs every seed reached. The configs validate on the
test split (``val_split: 0``), so ``val/loss`` is the paper's test loss. Writes ``curves.csv`` and one
``curves_<metric>.png`` per metric.

Examples:
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp                          Fig. S.6 (left): val/loss
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp --points C173_S16 --metric val/loss --metric train/loss_epoch
    mixer sweep curves runs/cifar10_d7_mlp_mixer runs/cifar10_d7_rp_mlp_mixer --metric val/acc1   Fig. S.8
"""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_curves, has_logs, spread
from mixer_lightning.commands.sweep.manifest import MANIFEST, read_manifest
from mixer_lightning.commands.sweep.report import series_names
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import check_output_dir, pyplot, save_figure, write_csv
from mixer_lightning.safety.config_files import load_configs

# What differs between the seeds of one setting: the seed, where the run went, how it was shown.
RUN_ONLY = ("seed_everything", "ckpt_path", "trainer.logger.init_args.version", "trainer.enable_progress_bar")


def add_curves_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="one series each: sweep directories, or directories of runs")
    parser.add_argument(
        "--metric", type=str, action="append", default=None, help="a logged metric (repeatable; default val/loss)"
    )
    parser.add_argument("--points", type=str, default=None, help="comma-separated grid points to draw (default: all)")
    parser.add_argument("--out", type=str, default=None, help="where to write (default: the first directory)")
    parser.add_argument("--json", action="store_true", help="print the curves as JSON")


def _flatten(config, prefix: str = "") -> dict[str, str]:
    if isinstance(config, dict) and config:
        return {k: v for key, value in config.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: json.dumps(config, sort_keys=True, default=str)}


def _setting(run_dir: str) -> tuple[tuple | None, str | None]:
    """A run's config (flattened) without what differs between seeds of one setting, and its seed; (None,
    None) without a config.yaml."""
    path = Path(run_dir, "config.yaml")
    if not path.is_file():
        return None, None
    flat = _flatten(load_configs([str(path)], "directories"))
    kept = tuple(sorted((k, v) for k, v in flat.items() if k not in RUN_ONLY and k.split(".")[0] != "progress"))
    return kept, flat.get("seed_everything")


def _names(default: str, settings: list[tuple | None]) -> list[str]:
    """A curve name per setting: the keys in which the settings differ (three at most), ``channels=8``."""
    known = [dict(s) for s in settings if s is not None]
    differ = [k for k in sorted({k for s in known for k in s}) if len({s.get(k) for s in known}) > 1]
    names = []
    for setting in map(dict, (s or () for s in settings)):
        parts = [f"{k.rsplit('.', 1)[-1]}={json.loads(setting[k]) if k in setting else '-'}" for k in differ[:3]]
        names.append(",".join(parts) + (",…" if len(differ) > 3 else "") if setting else default)
    return names


def groups(directory: str) -> dict[str, list[str]]:
    """point -> the run directories (seeds) of one series."""
    root = Path(directory)
    found: dict[str, list[str]] = {}
    if (root / MANIFEST).is_file():
        for entry in read_manifest(root)["runs"]:
            if has_logs(entry["run_dir"]):
                found.setdefault(entry.get("point") or Path(entry["run_dir"]).parent.name, []).append(entry["run_dir"])
        return found
    require(
        root.is_dir(),
        "directories",
        f"{directory!r} is not a directory",
        "give sweep directories or directories of runs",
    )
    runs = [str(p) for p in sorted(root.iterdir()) if p.is_dir() and has_logs(p)] or (
        [str(root)] if has_logs(root) else []
    )
    read = [_setting(run) for run in runs]
    distinct = list(dict.fromkeys(setting for setting, _ in read))
    names = _names(root.name, distinct) if len(distinct) > 1 else [root.name]
    if len(set(names)) < len(names):  # not told apart by three keys: by the first run of each
        names = [
            f"{n} ({Path(runs[[s for s, _ in read].index(d)]).name})" for n, d in zip(names, distinct, strict=True)
        ]
    seen: dict[tuple, str] = {}
    for run, (setting, seed) in zip(runs, read, strict=True):
        name = names[distinct.index(setting)]
        if seed is not None and seed.isdigit():
            other = seen.setdefault((name, seed), run)
            require(
                other == run,
                "directories",
                f"{other!r} and {run!r} are the same config and seed ({seed}): a curve averages seeds",
                "remove one, or give them as separate directories",
            )
        found.setdefault(name, []).append(run)
    return found


def compute(directories: list[str], metrics: list[str], points: list[str] | None) -> list[dict]:
    """One entry per (series, point, metric): the curve's rows (epoch, mean, min, max) over its runs."""
    curves = []
    for directory, series in zip(directories, series_names(directories), strict=True):
        found = groups(directory)
        require(bool(found), "directories", f"{directory!r} holds no runs with logs yet", "run the sweep first")
        for point, run_dirs in sorted(found.items()):
            per_run = [epoch_curves(run_dir, metrics) for run_dir in run_dirs] if not points or point in points else []
            for metric in metrics:
                logged = [c[metric] for c in per_run if c[metric]]
                if logged:  # "longest" beside the rows: the curve is cut to the epochs all seeds reached
                    curves.append(
                        {
                            "series": series,
                            "point": point,
                            "metric": metric,
                            "runs": len(logged),
                            "rows": spread(logged),
                            "longest": max(map(len, logged)),
                        }
                    )
    for metric in metrics:
        require(
            any(c["metric"] == metric for c in curves),
            "metric",
            f"no run logged {metric!r}",
            "e.g. val/loss, val/acc1, train/loss_epoch",
        )
    return curves


def metric_label(metric: str) -> str:
    """``val/loss`` → "test loss (cross-entropy), val/loss" (the configs validate on the test split)."""
    stage, _, name = metric.partition("/")
    name = name.removesuffix("_epoch").removesuffix("_step")
    what = {"loss": "loss (cross-entropy)", "acc1": "top-1 accuracy (fraction)", "acc5": "top-5 accuracy (fraction)"}
    split = {"val": "test", "train": "training"}.get(stage, stage)
    return f"{split} {what[name]}, {metric}" if name in what else metric


def plot(curves: list[dict], metric: str, path: Path) -> Path:
    """Mean over seeds with the min–max band; colour by point, line style by series."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    points, series = sorted({c["point"] for c in curves}), sorted({c["series"] for c in curves})
    drawn = [c for c in curves if c["metric"] == metric]
    for curve in drawn:
        color, style = (
            f"C{points.index(curve['point']) % 10}",
            ["-", "--", ":", "-."][series.index(curve["series"]) % 4],
        )
        epochs = [r["epoch"] for r in curve["rows"]]
        seeds = "1 seed" if curve["runs"] == 1 else f"{curve['runs']} seeds"
        name = curve["series"] if curve["point"] == curve["series"] else f"{curve['series']} {curve['point']}"
        ax.plot(
            epochs, [r["mean"] for r in curve["rows"]], style, color=color, marker="o", ms=3, label=f"{name} ({seeds})"
        )
        ax.fill_between(
            epochs, [r["min"] for r in curve["rows"]], [r["max"] for r in curve["rows"]], color=color, alpha=0.18, lw=0
        )
    epochs = sorted({r["epoch"] for c in drawn for r in c["rows"]})
    if len(epochs) <= 12:
        ax.set_xticks(epochs)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    what = metric_label(metric)
    names = ", ".join(dict.fromkeys(c["series"] for c in drawn))
    ax.set(
        xlabel="epoch (from 0)",
        ylabel=what,
        title=f"{names}: {what.split(',')[0]} per epoch\nmean over seeds, min–max shaded (App. D.7)",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def run_curves(args) -> None:
    """Training curves across seeds (mean with a min–max band), per series and grid point (App. D.7)."""
    metrics = list(dict.fromkeys(args.metric or ["val/loss"]))
    points = [p.strip() for p in args.points.split(",") if p.strip()] if args.points else None
    out = check_output_dir(args.out or args.directories[0], "out")
    curves = compute(args.directories, metrics, points)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(
        out / "curves.csv",
        [
            {"series": c["series"], "point": c["point"], "metric": c["metric"], **row}
            for c in curves
            for row in c["rows"]
        ],
    )
    plots = [str(plot(curves, metric, out / f"curves_{metric.replace('/', '_')}.png")) for metric in metrics]
    if args.json:
        print(json.dumps({"curves": curves, "csv": str(out / "curves.csv"), "plots": plots}, indent=2))
        return
    for c in curves:
        last, epochs = c["rows"][-1], f"{len(c['rows'])} epochs"
        if c["longest"] > len(c["rows"]):
            epochs = f"cut to the {len(c['rows'])} epochs all reached (the longest: {c['longest']})"
        seeds = "1 seed" if c["runs"] == 1 else f"{c['runs']} seeds"
        print(
            f"{c['series']:<24} {c['point']:<16} {c['metric']:<18} {seeds}, {epochs}; last epoch {last['epoch']}: {last['mean']:.4f} [{last['min']:.4f}, {last['max']:.4f}]"
        )
    print(f"written: {out / 'curves.csv'}, " + ", ".join(plots))
