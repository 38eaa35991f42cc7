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
from mixer_lightning.commands.sweep.manifest import MANIFEST, read_manifest
from mixer_lightning.commands.sweep.report import series_names
from mixer_lightning.commands.sweep.runs import check_output_directory
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure, write_csv
from mixer_lightning.safety.config_files import load_configs


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


# What differs between runs of one setting: the seed, where the run went, how it was shown.
RUN_ONLY = ("seed_everything", "ckpt_path", "trainer.logger.init_args.version", "trainer.enable_progress_bar")


def _flatten(config, prefix: str = "") -> dict[str, str]:
    """Dotted keys -> the values as JSON text (lists and null included), for comparing configs."""
    if isinstance(config, dict) and config:
        flat: dict[str, str] = {}
        for key, value in config.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: json.dumps(config, sort_keys=True, default=str)}


def _setting(run_dir: str) -> tuple[dict[str, str] | None, str | None]:
    """A run's config without what differs between the seeds of one setting (`RUN_ONLY`, ``progress.*``),
    and its seed; (None, None) for a run without a config.yaml (its setting is not known)."""
    path = Path(run_dir, "config.yaml")
    if not path.is_file():
        return None, None
    flat = _flatten(load_configs([str(path)], "directories"))
    setting = {k: v for k, v in flat.items() if k not in RUN_ONLY and k != "progress" and not k.startswith("progress.")}
    return setting, flat.get("seed_everything")


def _names(root: Path, settings: list[dict[str, str] | None]) -> list[str]:
    """A curve name per distinct setting: the keys in which they differ (``channels=8``), or the directory's
    name for runs without a config."""
    known = [s for s in settings if s is not None]
    keys = sorted({k for s in known for k in s})
    differing = [k for k in keys if len({s.get(k) for s in known}) > 1]
    names = []
    for setting in settings:
        if setting is None:
            names.append(root.name)
            continue
        parts = [f"{k.rsplit('.', 1)[-1]}={json.loads(setting[k]) if k in setting else '-'}" for k in differing[:3]]
        names.append(",".join(parts) + (",…" if len(differing) > 3 else ""))
    return names


def groups(directory: str) -> dict[str, list[str]]:
    """point -> the run directories (seeds) of a series directory. In a directory of runs, runs are
    seeds of one point only when their configs agree but for the seed (and the run's own keys); two runs
    of one setting and one seed are an error (a curve averages seeds, not repeats)."""
    root = Path(directory)
    if (root / MANIFEST).is_file():
        found: dict[str, list[str]] = {}
        seeds: dict[str, set] = {}
        for entry in read_manifest(root)["runs"]:
            point = entry.get("point") or Path(entry["run_dir"]).parent.name
            require(
                entry["seed"] not in seeds.setdefault(point, set()),
                "directories",
                f"{str(root / MANIFEST)!r} lists point {point!r} with seed {entry['seed']} twice",
                "emit the sweep again into a new directory",
            )
            seeds[point].add(entry["seed"])
            if has_logs(entry["run_dir"]):
                found.setdefault(point, []).append(entry["run_dir"])
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
    if not runs:
        return {}
    read = [_setting(run) for run in runs]
    distinct: list[dict | None] = []
    for setting, _ in read:
        if setting not in distinct:
            distinct.append(setting)
    if len(distinct) == 1:
        names = [root.name]
    else:
        names = _names(root, distinct)
        if len(set(names)) < len(names):  # not told apart by 3 keys: by the first run of each
            names = [
                f"{name} ({Path(runs[[s for s, _ in read].index(d)]).name})"
                for name, d in zip(names, distinct, strict=True)
            ]
    found, seen = {}, {}
    for run, (setting, seed) in zip(runs, read, strict=True):
        name = names[distinct.index(setting)]
        if seed is not None and isinstance(json.loads(seed), int) and seed not in ("true", "false"):
            other = seen.setdefault((name, seed), run)
            require(
                other == run,
                "directories",
                f"{other!r} and {run!r} are the same config and seed ({json.loads(seed)}): a curve averages seeds",
                "remove one, or give them as separate directories",
            )
        found.setdefault(name, []).append(run)
    return found


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
                            "longest": max(len(c) for c in logged),  # more than rows: cut to the common epochs
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


def metric_label(metric: str) -> str:
    """A logged metric named for a reader, with its unit: ``val/loss`` → "test loss (cross-entropy,
    val/loss)" (the configs validate on the test split, App. D.7); the name itself where not known."""
    stage, _, name = metric.partition("/")
    split = {"val": "test", "train": "training", "test": "test"}.get(stage, stage)
    name = name.removesuffix("_epoch").removesuffix("_step")
    what = {"loss": "loss (cross-entropy)", "acc1": "top-1 accuracy (fraction)", "acc5": "top-5 accuracy (fraction)"}
    return f"{split} {what[name]}, {metric}" if name in what else metric


def plot(curves: list[dict], metric: str, path: Path) -> Path:
    """Mean over seeds with the min–max band; colour by point, line style by series."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    points = sorted({c["point"] for c in curves})
    series = sorted({c["series"] for c in curves})
    styles = ["-", "--", ":", "-."]
    drawn = [c for c in curves if c["metric"] == metric]
    for curve in drawn:
        color = f"C{points.index(curve['point']) % 10}"
        style = styles[series.index(curve["series"]) % len(styles)]
        rows = curve["rows"]
        epochs = [r["epoch"] for r in rows]
        seeds = "1 seed" if curve["runs"] == 1 else f"{curve['runs']} seeds"
        # A series of one point (a directory of runs of one setting) is named once, not "name name".
        name = curve["series"] if curve["point"] == curve["series"] else f"{curve['series']} {curve['point']}"
        ax.plot(epochs, [r["mean"] for r in rows], style, color=color, marker="o", ms=3, label=f"{name} ({seeds})")
        ax.fill_between(epochs, [r["min"] for r in rows], [r["max"] for r in rows], color=color, alpha=0.18, lw=0)
    epochs = sorted({r["epoch"] for c in drawn for r in c["rows"]})
    if len(epochs) <= 12:  # epochs are whole numbers: a tick at each (one epoch drew ticks at ±0.045)
        ax.set_xticks(epochs)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="epoch (from 0)",
        ylabel=metric_label(metric),
        title=f"{', '.join(dict.fromkeys(c['series'] for c in drawn))}: {metric_label(metric).split(',')[0]} per epoch\n"
        "mean over seeds, min–max shaded (App. D.7)",
    )
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
        epochs = f"{len(c['rows'])} epochs"
        if c["longest"] > len(c["rows"]):
            epochs = f"cut to the {len(c['rows'])} epochs all reached (the longest: {c['longest']})"
        seeds = "1 seed" if c["runs"] == 1 else f"{c['runs']} seeds"
        print(
            f"{c['series']:<24} {c['point']:<16} {c['metric']:<18} {seeds}, {epochs}; "
            f"last epoch {last['epoch']}: {last['mean']:.4f} [{last['min']:.4f}, {last['max']:.4f}]"
        )
    print(f"written: {out / 'curves.csv'}, " + ", ".join(plots))
