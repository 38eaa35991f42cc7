"""``mixer sweep curves``: training curves across seeds as App. D.7 of Hayase & Karakida 2024 draws them
(Figs. S.6-S.8: the test loss of normal and RP Mixers over the epochs, the mean over seeds with the range
between the minimum and the maximum shaded).

Each directory is one series: a sweep directory (one curve per grid point, named by the directory), a
run directory or a directory of runs (``runs/NAME`` with ``version_0`` …), named by what was trained: the
network in the paper's words and what else differs in the series' configs (``RP S-Mixer``, ``S-Mixer,
channels=32``, ``seed=1``). Inside a directory of runs, runs whose configs agree but for the seed are one
curve, runs that differ are separate curves named by what differs. Curves come from the runs' logs
(TensorBoard event files or a CSVLogger's metrics.csv), averaged over the epochs every seed reached;
``train/loss`` is the epoch's mean over every batch (``train/loss_epoch``). ``val/`` is what the run's data
config validated on: the test split (``val_split: 0``, the paper's test loss) or images held out from the
training set. Writes ``curves.csv`` and one ``curves_<metric>.png`` per metric.

Examples:
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp                          Fig. S.6 (left): val/loss
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp --points C173_S16 --metric val/loss --metric train/loss
    mixer sweep curves runs/cifar10_s_mixer/version_3 runs/cifar10_rp_s_mixer/version_1 --metric train/loss
    mixer sweep curves runs/cifar10_d7_mlp_mixer runs/cifar10_d7_rp_mlp_mixer --metric val/acc1   Fig. S.8
"""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_curves, has_logs, spread
from mixer_lightning.commands.sweep.manifest import MANIFEST, read_manifest
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import check_output_dir, pyplot, save_figure, write_csv
from mixer_lightning.safety.config_files import load_configs

UNNAMED = ("ckpt_path", "trainer.logger.", "trainer.enable_progress_bar", "progress.")  # where a run went, how shown
NETWORK = ("model.net.class_path", "model.net.init_args.permute")  # said by the network's name


def add_curves_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="one series each: sweep directories, or directories of runs")
    parser.add_argument(
        "--metric", type=str, action="append", default=None, help="a logged metric (repeatable; default val/loss)"
    )
    parser.add_argument("--points", type=str, default=None, help="comma-separated grid points to draw (default: all)")
    parser.add_argument("--out", type=str, default=None, help="where to write (default: the first directory)")
    parser.add_argument("--label", type=str, action="append", default=None, help=LABEL_HELP)
    parser.add_argument("--json", action="store_true", help="print the curves as JSON")


LABEL_HELP = "a series' name in the legends and tables, one per directory in their order (default: from the configs)"


def labelled(names: list[str], labels: list[str] | None, what: str = "directory") -> list[str]:
    """`names`, or the ``--label`` given for each (the names from the configs list three differing keys at most)."""
    if not labels:
        return names
    problem = f"{len(labels)} labels for {len(names)} series"
    require(len(labels) == len(names), "label", problem, f"give one --label per {what}, in order")
    return list(labels)


def _flatten(config, prefix: str = "") -> dict[str, str]:
    if isinstance(config, dict) and config:
        return {k: v for key, value in config.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: json.dumps(config, sort_keys=True, default=str)}


def series_names(directories: list[str]) -> list[str]:
    """Each sweep directory's name in a report: its last part, the whole path where two share it."""
    names = [Path(d).name or str(d) for d in directories]
    return [str(d) if names.count(n) > 1 else n for d, n in zip(directories, names, strict=True)]


def run_config(run_dir: str | Path) -> dict[str, str] | None:
    """A run's config.yaml flattened (``model.net.init_args.channels``: its value as JSON), without what never
    names a run; None without one."""
    path = Path(run_dir, "config.yaml")
    if not path.is_file():
        return None
    flat = _flatten(load_configs([str(path)], "directories", imported=False))
    return {k: v for k, v in flat.items() if not k.startswith(UNNAMED)}


def _setting(run_dir: str) -> tuple[tuple | None, str | None]:
    """A run's config without its seed, and its seed; (None, None) without a config.yaml."""
    flat = run_config(run_dir)
    if flat is None:
        return None, None
    return tuple(sorted((k, v) for k, v in flat.items() if k != "seed_everything")), flat.get("seed_everything")


def network_name(config: dict[str, str]) -> str:
    """The network of a flattened config in the papers' words: ``RP S-Mixer``."""
    from mixer_lightning.models.registry import paper_name

    class_path, permute = (json.loads(config.get(k, "null")) for k in NETWORK)
    return paper_name(str(class_path or "?").rsplit(".", 1)[-1], permute or False)


def run_names(configs: list[dict | None], defaults: list[str]) -> list[str]:
    """A name per run (or series) by what was trained: the network and up to three keys in which the configs
    differ (``RP S-Mixer, channels=32``; ``seed=1``); the default (the directory's name) without a config, or
    where two would be named alike."""
    known = [c for c in configs if c is not None]
    keys = sorted({k for c in known for k in c} - set(NETWORK))
    differ = [k for k in keys if len({c.get(k) for c in known}) > 1]
    names = []
    for config, default in zip(configs, defaults, strict=True):
        if config is None:
            names.append(default)
            continue
        short = {"seed_everything": "seed"}
        parts = [f"{short.get(k, k.rsplit('.', 1)[-1])}={json.loads(config.get(k, 'null'))}" for k in differ[:3]]
        names.append(", ".join([network_name(config), *parts, *(["…"] if len(differ) > 3 else [])]))
    return [f"{n} ({d})" if names.count(n) > 1 else n for n, d in zip(names, defaults, strict=True)]


def run_directories(directory: str) -> list[str]:
    """The runs of a directory: itself where it is a run (logs), else its sub-directories with logs."""
    root = Path(directory)
    if has_logs(root):
        return [str(root)]
    return [str(p) for p in sorted(root.iterdir()) if p.is_dir() and has_logs(p)] if root.is_dir() else []


def validation_of(configs: list[dict | None]) -> str:
    """What ``val/`` measured, by the runs' data configs (`ImageDataModule.setup`): an image folder's own val
    split; else with ``val_split: 0`` the test split (the paper's test figures), else images held out from
    the training set."""
    kinds = set()
    for config in (c for c in configs if c is not None):
        dataset = json.loads(config.get("data.init_args.dataset", "null"))
        held_out = json.loads(config.get("data.init_args.val_split", "0.1"))
        kinds.add("validation" if dataset == "folder" else "held-out validation" if held_out else "test")
    return kinds.pop() if len(kinds) == 1 else "validation"


def _names(default: str, settings: list[tuple | None]) -> list[str]:
    """A curve name per setting: the keys in which the settings differ (three at most), ``channels=8``."""
    known = [dict(s) for s in settings if s is not None]
    differ = [k for k in sorted({k for s in known for k in s}) if len({s.get(k) for s in known}) > 1]
    names = []
    for setting in map(dict, (s or () for s in settings)):
        parts = [f"{k.rsplit('.', 1)[-1]}={json.loads(setting[k]) if k in setting else '-'}" for k in differ[:3]]
        names.append(",".join(parts) + (",…" if len(differ) > 3 else "") if setting else default)
    return names


def groups(directory: str, series: str) -> dict[str, list[str]]:
    """point -> the run directories (seeds) of one series (a series of one setting: its one point is the series)."""
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
    runs = run_directories(directory)
    read = [_setting(run) for run in runs]
    distinct = list(dict.fromkeys(setting for setting, _ in read))
    names = _names(root.name, distinct) if len(distinct) > 1 else [series]
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


def names_of(directories: list[str]) -> list[str]:
    """A series name per directory: a sweep's name; runs by what was trained (`run_names` of the settings
    the series' runs share)."""
    by_name = series_names(directories)
    configs = []
    for directory in directories:
        read = (
            [run_config(run) for run in run_directories(directory)] if not Path(directory, MANIFEST).is_file() else []
        )
        shared = dict(set.intersection(*(set(c.items()) for c in read))) if read and None not in read else None
        configs.append(shared)
    names = run_names(configs, by_name)
    return [b if Path(d, MANIFEST).is_file() else n for d, b, n in zip(directories, by_name, names, strict=True)]


def compute(
    directories: list[str], metrics: list[str], points: list[str] | None, labels: list[str] | None = None
) -> list[dict]:
    """One entry per (series, point, metric): the curve's rows (epoch, mean, min, max) over its runs."""
    curves = []
    for directory, series in zip(directories, labelled(names_of(directories), labels), strict=True):
        found = groups(directory, series)
        require(bool(found), "directories", f"{directory!r} holds no runs with logs yet", "run the sweep first")
        for point, run_dirs in sorted(found.items()):
            per_run = [epoch_curves(run_dir, metrics) for run_dir in run_dirs] if not points or point in points else []
            validation = validation_of([run_config(run_dir) for run_dir in run_dirs])
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
                            "validation": validation,
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


def metric_label(metric: str, validation: str = "validation") -> str:
    """``val/loss`` → "test loss (cross-entropy), val/loss" where the runs validated on the test split
    (`validation_of`); ``train/loss`` → "training loss (cross-entropy, epoch mean), train/loss"."""
    stage, _, name = metric.partition("/")
    name = name.removesuffix("_epoch").removesuffix("_step")
    what = {"loss": "loss (cross-entropy)", "acc1": "top-1 accuracy (fraction)", "acc5": "top-5 accuracy (fraction)"}
    split = {"val": validation, "train": "training"}.get(stage, stage)
    mean = ", epoch mean)" if stage == "train" else ")"
    return f"{split} {what[name].replace(')', mean)}, {metric}" if name in what else metric


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
    kinds = {c["validation"] for c in drawn}
    what = metric_label(metric, kinds.pop() if len(kinds) == 1 else "validation")
    names = ", ".join(dict.fromkeys(c["series"] for c in drawn))
    spread_of = (
        "mean over seeds, min–max shaded (App. D.7)" if any(c["runs"] > 1 for c in drawn) else "one run per curve"
    )
    ax.set(xlabel="epoch", ylabel=what, title=f"{names}: {what.rsplit(', ', 1)[0]} per epoch\n{spread_of}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def run_curves(args) -> None:
    """Training curves across seeds (mean with a min–max band), per series and grid point (App. D.7)."""
    metrics = list(dict.fromkeys(args.metric or ["val/loss"]))
    points = [p.strip() for p in args.points.split(",") if p.strip()] if args.points else None
    out = check_output_dir(args.out or args.directories[0], "out")
    curves = compute(args.directories, metrics, points, args.label)
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
            f"{c['series']:<24} {'' if c['point'] == c['series'] else c['point']:<16} {c['metric']:<18} {seeds}, {epochs}; last epoch {last['epoch']}: {last['mean']:.4f} [{last['min']:.4f}, {last['max']:.4f}]"
        )
    print(f"written: {out / 'curves.csv'}, " + ", ".join(plots))
