"""``mixer sweep report``: the finished runs of one or more sweeps (one series each: e.g. normal and RP)
gathered into ``report.csv`` (one row per run) and ``summary.csv`` (test error mean ± std over seeds,
per series and grid point, one column per generic axis), and the paper's plots of them:

- ``error_vs_width.png``: test error against the effective width m (Fig. 5, S.2);
- ``error_vs_channels.png``: against C, S = C marked (Fig. 6; at fixed m, Fig. S.3 right with C* = √m);
- ``error_vs_gamma.png``: against γ, for a γ grid at fixed m (Fig. S.3, eq. S.46);
- ``error_vs_sparsity.png``: an SW-MLP density grid against the density p (log₂), with the final
  training loss beside the test error (Fig. S.1 left: trainability falls as 1 − p grows);
- ``error_vs_<axis>.png``: against each numeric generic axis (``--grid``), one line per width point;
- ``error_by_<axis>.png``: bars per value of a non-numeric one (App. D.5's ``permute`` lists);
- with a CKA reference (``--cka_reference``): ``cka.csv`` and ``cka_vs_density.png`` (Fig. 2(a),
  `mixer_lightning.commands.sweep.cka`).

With generic axes the summary names, per series and width point, the axis values of the lowest
mean error (Table 1's choice of learning rate: "the highest accuracy, averaged over the seeds").
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mixer_lightning.commands.sweep.axes import format_value
from mixer_lightning.commands.sweep.manifest import read_manifest
from mixer_lightning.commands.sweep.runs import METRICS, REFERENCE, check_output_directory, load_metrics
from mixer_lightning.commands.sweep.ticks import grid_ticks, power_of_two_text, seeds_label
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure, write_csv
from mixer_lightning.width import optimum

DENSITY_KINDS = ("densities_at_omega", "densities_at_width")
FIGURES = ("C", "S", "P", "m", "p", "gamma")


def series_names(directories: list[str]) -> list[str]:
    """The name of each sweep directory in the report: its last part, the whole path where two share it."""
    names = [Path(d).name or str(d) for d in directories]
    return [str(d) if names.count(n) > 1 else n for d, n in zip(directories, names, strict=True)]


def _final_train_loss(run_dir: str) -> float | None:
    from mixer_lightning.analysis.curves import epoch_curves, has_logs

    if not has_logs(run_dir):
        return None
    curve = epoch_curves(run_dir, ["train/loss_epoch"])["train/loss_epoch"]
    return curve[max(curve)] if curve else None


def collect(directory: str, series: str) -> tuple[dict, list[dict]]:
    """The manifest of a sweep and one row per tested grid run (test error from test_metrics.json)."""
    manifest = read_manifest(directory)
    density_grid = manifest.get("kind") in DENSITY_KINDS
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
        row = {
            "series": series,
            "point": point,
            "width_point": entry.get("width_point") or point,
            **{k: entry.get(k) for k in FIGURES},
            **(entry.get("axes") or {}),
            "seed": entry["seed"],
            "test_acc1": metrics["test/acc1"],
            "test_error": 1.0 - metrics["test/acc1"],
            # A test of part of the split (--trainer.limit_test_batches): `mixer test` records it (issue 26, T8).
            "partial": _partial(metrics),
        }
        if density_grid:
            row["train_loss"] = _final_train_loss(entry["run_dir"])
        rows.append(row)
    return manifest, rows


def _partial(metrics: dict) -> str:
    """ "" for a test of the whole split, else what was tested ("64 of 359", or "yes" without counts)."""
    if metrics.get("partial") is not True:
        return ""
    images, total = metrics.get("images"), metrics.get("of")
    if isinstance(images, int) and isinstance(total, int) and not isinstance(images, bool):
        return f"{images:,} of {total:,}"
    return "yes"


def summarise(rows: list[dict], axis_names: list[str]) -> list[dict]:
    """Mean ± std of the test error (and the final training loss, where read) over seeds, per series
    and grid point."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["series"], row["point"]), []).append(row)
    summary = []
    for (series, point), members in groups.items():
        errors = [r["test_error"] for r in members]
        first = members[0]
        entry = {
            "series": series,
            "point": point,
            "width_point": first["width_point"],
            **{k: first.get(k) for k in FIGURES},
            **{name: first.get(name) for name in axis_names},
            "seeds": len(members),
            "test_error_mean": statistics.fmean(errors),
            # One seed has no spread: None (printed "–", drawn without an error bar), not a measured 0.
            "test_error_std": statistics.stdev(errors) if len(errors) > 1 else None,
            "partial": ", ".join(f"seed {r['seed']}: {r['partial']}" for r in members if r["partial"]),
        }
        losses = [r["train_loss"] for r in members if r.get("train_loss") is not None]
        if "train_loss" in first:
            entry["train_loss_mean"] = statistics.fmean(losses) if losses else None
        summary.append(entry)
    return sorted(
        summary,
        key=lambda r: (
            r["series"],
            r["m"] if r["m"] is not None else 0,
            *(_value_key(r.get(name)) for name in axis_names),  # a depth grid 4, 8, 16 in that order
            r["point"],
        ),
    )


def _value_key(value) -> tuple:
    """An axis value's place in the summary: numbers by value (8 before 16, which their point names,
    "num_blocks16" before "num_blocks8", do not give), anything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def best_by_axes(summary: list[dict], axis_names: list[str]) -> list[dict]:
    """Per series and width point, the axis values of the lowest mean test error, where there is a choice
    (a point run at one setting only, e.g. a series without the axis beside one that has it, has none)."""
    if not axis_names:
        return []
    groups: dict[tuple, list[dict]] = {}
    for row in summary:
        groups.setdefault((row["series"], row["width_point"]), []).append(row)
    best = []
    for (series, point), members in groups.items():
        if len(members) < 2:
            continue
        winner = min(members, key=lambda r: r["test_error_mean"])
        best.append(
            {
                "series": series,
                "point": point,
                **{name: winner[name] for name in axis_names},
                "test_error_mean": winner["test_error_mean"],
                "test_error_std": winner["test_error_std"],
                "seeds": winner["seeds"],
            }
        )
    return best


# ------------------------------------------------------------------------------------------ plots

# Axis labels with what is counted (the grid's own names otherwise): a reader of a figure alone knows the units.
AXIS_LABELS = {
    "max_epochs": "training budget (epochs)",
    "lr": "peak learning rate",
    "num_blocks": "depth (blocks)",
    "batch_size": "batch size (images)",
    "weight_decay": "weight decay",
    "gamma": "expansion factor γ",
    "patch_size": "patch size P (pixels)",
    "channels": "channels C",
    "tokens": "tokens S",
    "omega": "connections per layer Ω",
    "density": "density p of the weights",
    "width": "effective width m (units)",
}


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _first_config(manifest: dict) -> dict:
    """The config of a sweep's first grid run ({} where it cannot be read)."""
    import yaml

    runs = [r for r in manifest.get("runs") or [] if r.get("role") != REFERENCE]
    try:
        config = yaml.safe_load(Path(runs[0]["config"]).read_text())
    except (IndexError, KeyError, OSError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def _fixed_value(manifest: dict, key: str):
    """The value a sweep without the axis `key` (``trainer.max_epochs``) ran at, from its config."""
    value = _first_config(manifest)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if _numeric([value]) else None


def _with_fixed_values(summary: list[dict], manifests: list[dict], names: list[str], axis: str) -> list[dict]:
    """The summary with the axis filled in for the series whose sweep did not vary it, where its config
    says the value (budget_5ep, budget_20ep and fig5_s_mixer at its config's 10 epochs: three budgets on
    one axis, not two and a missing one); for the plots only, the CSVs keep what the grid varied."""
    keys = [a["key"] for m in manifests for a in m.get("axes") or [] if a["name"] == axis and "key" in a]
    if not keys:
        return summary
    filled = []
    for row in summary:
        if row.get(axis) is None and row["series"] in names:
            value = _fixed_value(manifests[names.index(row["series"])], keys[0])
            row = {**row, axis: value} if value is not None else row
        filled.append(row)
    return filled


def _run_facts(manifest: dict) -> dict[str, str]:
    """Model family, data set and epochs of a sweep, read from its first run's config (the titles say
    what was trained); empty where the config cannot be read."""
    config = _first_config(manifest)
    model = str((config.get("model") or {}).get("class_path", "")).rsplit(".", 1)[-1].removesuffix("Module")
    data = (config.get("data") or {}).get("init_args") or {}
    epochs = (config.get("trainer") or {}).get("max_epochs")
    facts = {"model": model, "data": str(data.get("dataset") or "")}
    if isinstance(epochs, int):
        facts["epochs"] = f"{epochs} epoch{'s' if epochs != 1 else ''}"
    return {k: v for k, v in facts.items() if v}


def figure_title(manifests: list[dict], series: list[str], context: str, vary: str | None = None) -> str:
    """What the figure shows: the series, what they trained (model, data, epochs; an axis varied by the
    grid is left out) and the fixed sizes (Ω, γ, m), e.g. ``d5_s_mixer: SMixer, cifar10, 200 epochs``."""
    facts = [_run_facts(m) for m in manifests]
    parts = []
    for key in ("model", "data", "epochs"):
        if key == "epochs" and vary == "max_epochs":
            continue
        values = list(dict.fromkeys(f[key] for f in facts if key in f))
        if values:
            parts.append(" / ".join(values))
    head = ", ".join(dict.fromkeys(series))
    line = f"{head}: {', '.join(parts)}" if parts else head
    return f"{line}\n{context}" if context else line


def _plot_lines(ax, summary: list[dict], x, label, y: str = "test_error_mean", err: str | None = "test_error_std"):
    groups: dict[str, list[tuple]] = {}
    for row in summary:
        if x(row) is None or row.get(y) is None:
            continue
        spread = (row.get(err) or 0.0) if err else None  # one seed: no bar
        groups.setdefault(label(row), []).append((x(row), row[y], spread))
    for name, points in sorted(groups.items()):
        points.sort()
        xs, ys, es = zip(*points, strict=True)
        if err:
            ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, label=name)
        else:
            ax.plot(xs, ys, marker="o", ms=4, label=name)
    return bool(groups)


def plot_summary(
    summary: list[dict], manifests: list[dict], axis_names: list[str], out: Path, names: list[str] | None = None
) -> list[Path]:
    """The plots of the module docstring that the summary has data for; `names` are the series of
    `manifests` (their order), for the titles."""
    names = names or list(dict.fromkeys(r["series"] for r in summary))[: len(manifests)]
    if len(names) < len(manifests):
        names = names + [""] * (len(manifests) - len(names))
    plt = pyplot()
    manifest = manifests[0]
    kind, omega, gamma, width = (manifest.get(k) for k in ("kind", "omega", "gamma", "width"))
    context = ", ".join(
        t
        for t in (
            f"Ω = {omega:,} connections per layer" if omega else "",
            f"γ = {gamma:g}" if gamma else "",
            f"m = {width:,}" if width else "",
        )
        if t
    )
    series_order = list(dict.fromkeys(r["series"] for r in summary))

    def title(vary: str | None = None, rows: list[dict] | None = None) -> str:
        drawn = list(dict.fromkeys(r["series"] for r in rows)) if rows is not None else series_order
        return figure_title([m for m, n in zip(manifests, names, strict=True) if n in drawn], drawn, context, vary)

    def series_label(row: dict) -> str:
        extra = ", ".join(f"{n} = {row[n]}" for n in axis_names if row.get(n) is not None)
        label = f"{row['series']} ({extra})" if extra else row["series"]
        return f"{label}, {row['_branch']}" if row.get("_branch") else label

    # At a fixed Ω the mirror points (C, S) and (S, C) share their width m (App. C.4's pairs): against m,
    # such a series is drawn as its two branches, C ≤ S and C ≥ S, meeting at S = C.
    mirrored = {
        series
        for series in {r["series"] for r in summary}
        if len(ms := [r["m"] for r in summary if r["series"] == series and r["C"] is not None]) > len(set(ms))
    }
    by_branch = []
    for row in summary:
        if row["series"] not in mirrored:
            by_branch.append(row)
            continue
        if row["C"] <= row["S"]:
            by_branch.append({**row, "_branch": "C ≤ S"})
        if row["C"] >= row["S"]:
            by_branch.append({**row, "_branch": "C ≥ S"})

    figures = []
    if len({r["m"] for r in summary if r["m"] is not None}) > 1:
        figures.append(("error_vs_width.png", "m", "effective width m = S·C (units per layer)", "log"))
    if len({r["C"] for r in summary if r["C"] is not None}) > 1:
        figures.append(("error_vs_channels.png", "C", "channels C" + (" (tokens S = m/C)" if width else ""), "log"))
    if kind == "gamma_at_width":
        figures.append(("error_vs_gamma.png", "gamma", "expansion factor γ (eq. S.46)", "linear"))
    paths = []
    for name, key, xlabel, scale in figures:
        fig, ax = plt.subplots(figsize=(6.6, 4.4))
        _plot_lines(ax, by_branch if name == "error_vs_width.png" else summary, lambda r, k=key: r[k], series_label)
        if name == "error_vs_channels.png" and (omega or width):
            c_star = width**0.5 if width else optimum(omega, gamma or 1.0)["C"]
            ax.axvline(c_star, color="gray", linestyle="--", label=f"S = C = {c_star:.4g}")
        drawn = [r for r in summary if r[key] is not None]
        ax.set(xscale=scale, xlabel=xlabel, ylabel=seeds_label(drawn), title=title(rows=drawn))
        grid_ticks(ax.xaxis, [r[key] for r in summary if r[key] is not None], log=scale == "log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, out / name, dpi=120)
        paths.append(out / name)
    if kind in DENSITY_KINDS and len({r["p"] for r in summary}) > 1:  # Fig. S.1 left: trainability
        losses = any(r.get("train_loss_mean") is not None for r in summary)
        fig, axes = plt.subplots(1, 2 if losses else 1, figsize=(11 if losses else 6.6, 4.4), squeeze=False)
        densities = [r["p"] for r in summary if r["p"] is not None]
        xlabel = "density p of the weights (log₂ scale; sparser to the left)"
        _plot_lines(axes[0, 0], summary, lambda r: r["p"], series_label)
        axes[0, 0].set(xlabel=xlabel, ylabel=seeds_label(summary), title=title(rows=summary))
        if losses:
            _plot_lines(axes[0, 1], summary, lambda r: r["p"], series_label, "train_loss_mean", None)
            axes[0, 1].set(
                xlabel=xlabel,
                ylabel="final training loss (cross-entropy, mean over seeds)",
                title="trainability (App. D.1, Fig. S.1 left)",
            )
        for ax in axes[0]:
            ax.set_xscale("log", base=2)
            grid_ticks(ax.xaxis, densities, power_of_two_text, log=True, slant=False)
            ax.legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, out / "error_vs_sparsity.png", dpi=120)
        paths.append(out / "error_vs_sparsity.png")
    for axis in axis_names:
        values = [r[axis] for r in summary if r.get(axis) is not None]  # a series without the axis has None
        if len({format_value(v) for v in values}) < 2:
            continue
        others = [n for n in axis_names if n != axis]
        if not _numeric(values):  # e.g. App. D.5's permute lists: one bar per value, in the grid's order
            shown = [r for r in summary if r.get(axis) is not None]
            paths.append(_plot_bars(plt, summary, manifests, axis, others, title(axis, shown), out))
            continue
        fig, ax = plt.subplots(figsize=(6.6, 4.4))
        with_axis = [r for r in _with_fixed_values(summary, manifests, names, axis) if r.get(axis) is not None]
        values = [r[axis] for r in with_axis]
        # A series that holds one value of the axis (the sweeps budget_5ep and budget_20ep, one epoch count
        # each) is one x, not a line: the lines then join the series, one per grid point (C16_S173 over the
        # budgets); otherwise one line per series and grid point.
        joined = len(series_order) > 1 and all(
            len({format_value(r[axis]) for r in with_axis if r["series"] == s}) == 1
            for s in {r["series"] for r in with_axis}
        )

        varied = tuple(n for n in others if len({format_value(r.get(n)) for r in with_axis}) > 1)

        def line(r, varied=varied, joined=joined):
            parts = [] if joined else [r["series"]]
            if r["width_point"] != "base" or joined:
                parts.append(r["width_point"])
            return ", ".join([" ".join(parts)] + [f"{n} = {r[n]}" for n in varied if r.get(n) is not None])

        _plot_lines(ax, with_axis, lambda r, a=axis: r[a], line)
        positive = all(v > 0 for v in values)
        log = positive and max(values) / min(values) >= 8
        ax.set(
            xscale="log" if log else "linear",
            xlabel=AXIS_LABELS.get(axis, axis),
            ylabel=seeds_label(with_axis),
            title=title(axis, with_axis),
        )
        grid_ticks(ax.xaxis, values, log=log)
        ax.legend(fontsize=8, title="grid point" if joined else None, title_fontsize=8)
        fig.tight_layout()
        name = f"error_vs_{axis.replace('/', '_')}.png"
        save_figure(fig, out / name, dpi=120)
        paths.append(out / name)
    return paths


def _plot_bars(plt, summary: list[dict], manifests: list[dict], axis: str, others: list[str], title: str, out: Path):
    """``error_by_<axis>.png``: test error (mean ± std over seeds) per value of a non-numeric axis, the values
    in the order the grid gave them and spelled as the run names spell them (``[true, false]`` → ``tf``),
    one bar per series (and width point and other axes). Only values with a finished run get a place: a
    value of the grid not run (or not tested) yet would be an empty bar, read as an error of 0."""
    groups: dict[str, dict[str, tuple]] = {}
    for row in summary:
        if row.get(axis) is None:
            continue
        parts = [row["series"]] + ([row["width_point"]] if row["width_point"] != "base" else [])
        label = " ".join(parts + [f"{n} = {row[n]}" for n in others if row.get(n) is not None])
        groups.setdefault(label, {})[format_value(row[axis])] = (row["test_error_mean"], row["test_error_std"] or 0.0)
    present = {v for bars in groups.values() for v in bars}
    order = []
    for manifest in manifests:
        for entry in manifest.get("axes") or []:
            if entry["name"] == axis:
                order += [format_value(v) for v in entry["values"] if format_value(v) in present - set(order)]
    order += sorted(present - set(order))
    fig, ax = plt.subplots(figsize=(max(6.6, 0.9 * len(order) * len(groups)), 4.4))
    width = 0.8 / len(groups)
    for i, (label, bars) in enumerate(sorted(groups.items())):
        xs = [j + (i - (len(groups) - 1) / 2) * width for j, v in enumerate(order) if v in bars]
        ys, es = zip(*(bars[v] for v in order if v in bars), strict=True)
        ax.bar(xs, ys, width=width, yerr=es, capsize=3, label=label)
    shown = [r for r in summary if r.get(axis) is not None]
    low = min(r["test_error_mean"] - (r["test_error_std"] or 0.0) for r in shown)
    high = max(r["test_error_mean"] + (r["test_error_std"] or 0.0) for r in shown)
    margin = max(high - low, 0.01) * 0.5  # the differences, not the bars' common base, fill the axes
    ax.set(xticks=range(len(order)), ylim=(max(0.0, low - margin), high + margin))
    ax.set_xticklabels(order)
    spelled = any(isinstance(r[axis], list) and all(isinstance(v, bool) for v in r[axis]) for r in shown)
    xlabel = AXIS_LABELS.get(axis, axis) + (" (one letter per block: t = true, f = false)" if spelled else "")
    ax.set(xlabel=xlabel, ylabel=seeds_label(shown), title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / f"error_by_{axis.replace('/', '_')}.png"
    save_figure(fig, path, dpi=120)
    return path


# ----------------------------------------------------------------------------------------- report


def report_directories(
    directories: list[str], plot: bool = True, out: str | None = None, cka_options: dict | None = None
) -> dict:
    """Collect, summarise, write the CSVs and plots; compute the CKA diagonals where a sweep has a
    reference. Returns what `mixer sweep report --json` prints."""
    out_dir = check_output_directory(out or directories[0], "out")
    rows, manifests, names = [], [], series_names(directories)
    for directory, series in zip(directories, names, strict=True):
        manifest, found = collect(directory, series)
        manifests.append(manifest)
        rows.extend(found)
    axis_names: list[str] = []
    for manifest in manifests:
        axis_names += [a["name"] for a in manifest.get("axes") or [] if a["name"] not in axis_names]
    has_reference = any(any(r.get("role") == REFERENCE for r in m["runs"]) for m in manifests)
    require(
        bool(rows) or has_reference, "directories", "no finished runs (test_metrics.json) yet", "run the sweep first"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "omega": manifests[0].get("omega"),
        "gamma": manifests[0].get("gamma"),
        "kind": manifests[0].get("kind"),
        "width": manifests[0].get("width"),
        "axes": axis_names,
        "summary": [],
        "best": [],
        "plots": [],
        "csv": None,
    }
    if rows:
        summary = summarise(rows, axis_names)
        write_csv(out_dir / "report.csv", rows)
        write_csv(out_dir / "summary.csv", summary)
        result.update(summary=summary, best=best_by_axes(summary, axis_names), csv=str(out_dir / "report.csv"))
        if plot:
            result["plots"] = [str(p) for p in plot_summary(summary, manifests, axis_names, out_dir, names)]
    if has_reference:
        from mixer_lightning.commands.sweep.cka import cka_report

        result["cka"] = cka_report(directories, names, manifests, out_dir, plot, **(cka_options or {}))
        result["plots"] += result["cka"]["plots"]
    return result


def add_report_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+", help="sweep directories (one series each: e.g. normal and RP)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--out", type=str, default=None, help="where to write the CSVs and plots (default: the first)")
    parser.add_argument(
        "--cka_batches",
        type=int,
        default=None,
        help="CKA reference sweeps: minibatches of the test split per CKA (default: all)",
    )
    parser.add_argument("--cka_batch_size", type=int, default=None, help="CKA minibatch size (default: the data's)")
    parser.add_argument("--accelerator", type=str, default="auto", help="for the CKA: auto, cpu, gpu, …")


def _error(row: dict, short: bool = False) -> str:
    """Mean ± std of the test error; one seed has no std: "–" in its place (a table cell) or the mean alone."""
    if row["test_error_std"] is None:
        return f"{row['test_error_mean']:.4f}" + ("" if short else " –")
    return f"{row['test_error_mean']:.4f} ± {row['test_error_std']:.4f}"


def run_report(args) -> None:
    """Gather finished sweep runs into report.csv / summary.csv and plot them (test error against the
    width, C, γ, the sparsity, each generic axis; average diagonal CKA against the density)."""
    cka_options = {"batches": args.cka_batches, "batch_size": args.cka_batch_size, "accelerator": args.accelerator}
    result = report_directories(args.directories, plot=True, out=args.out, cka_options=cka_options)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    axes = result["axes"]
    if result["summary"]:
        header = (
            f"{'series':<20} {'point':<24} {'C':>6} {'S':>6} {'γ':>7} {'p':>8} {'m':>8} {'seeds':>5} {'test error':>16}"
        )
        print(header)
    for r in result["summary"]:
        error = _error(r)
        c, s = ("-", "-") if r["C"] is None else (r["C"], r["S"])
        g = "-" if r["gamma"] is None else f"{r['gamma']:.4g}"
        p = "-" if r["p"] is None else f"{r['p']:.4g}"
        m = "-" if r["m"] is None else r["m"]
        partial = f"  (partial test: {r['partial']})" if r.get("partial") else ""
        print(
            f"{r['series']:<20} {r['point']:<24} {c:>6} {s:>6} {g:>7} {p:>8} {m:>8} {r['seeds']:>5} {error:>16}{partial}"
        )
    for b in result["best"]:
        values = ", ".join(f"{name} = {b[name]}" for name in axes)
        print(
            f"best for {b['series']} {b['point']}: {values} (test error {_error(b, short=True)}, "
            f"{b['seeds']} seed{'s' if b['seeds'] != 1 else ''})"
        )
    if result["summary"]:
        best = min(result["summary"], key=lambda r: r["test_error_mean"])["point"]
        print(f"lowest error: {best}; written: {result['csv']}")
    cka = result.get("cka")
    if cka:
        for row in cka["summary"]:
            print(
                f"CKA {row['series']} {row['point']}: p = {row['p']:.4g}, mean diagonal {row['cka_mean']:.4f} ± "
                f"{row['cka_std']:.4f} ({row['seeds']} seeds)"
            )
        print(f"written: {cka['csv']}")
    if result["plots"]:
        print("plots: " + ", ".join(result["plots"]))
