"""The plots of ``mixer sweep report`` (`plot_summary`), each drawn where the summary has data for it:

- ``error_vs_width.png``: test error against the effective width m (Fig. 5, S.2); a series whose mirror
  points (C, S) and (S, C) share m (App. C.4) is drawn as its two branches C ≤ S and C ≥ S;
- ``error_vs_channels.png``: against C, S = C marked (Fig. 6; at fixed m, Fig. S.3 right with C* = √m);
- ``error_vs_gamma.png``: against γ, for a γ grid at fixed m (Fig. S.3, eq. S.46);
- ``error_vs_sparsity.png``: a density grid against p (log₂), the final training loss beside the test error
  (Fig. S.1 left: trainability falls as 1 − p grows);
- ``error_vs_<axis>.png``: against each numeric generic axis, one line per width point;
- ``error_by_<axis>.png``: bars per value of a non-numeric one (App. D.5's ``permute`` lists).

Ticks sit at the grid's values, written as numbers (never matplotlib's 4×10^1), densities as 2⁻ⁿ."""

from __future__ import annotations

import math
from pathlib import Path

from mixer_lightning.commands.sweep.axes import format_value
from mixer_lightning.commands.sweep.grid import network
from mixer_lightning.commands.sweep.manifest import REFERENCE
from mixer_lightning.commands.sweep.status import max_epochs_of
from mixer_lightning.safety.atomic import pyplot, save_figure
from mixer_lightning.width import optimum

DENSITY_KINDS = ("densities_at_omega", "densities_at_width")
AXIS_LABELS = {  # what is counted, so that a figure read alone says its units
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


def _tick_text(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() and abs(value) >= 1 else f"{value:.3g}"


def power_of_two_text(value: float) -> str:
    """A density on a log₂ axis: 2⁻⁵ where it is a power of two, else the number."""
    exponent = math.log2(value) if value > 0 else 0.5
    return f"$2^{{{int(exponent)}}}$" if float(exponent).is_integer() else _tick_text(value)


def grid_ticks(axis, values, text=_tick_text, log: bool = False, slant: bool = True) -> None:
    """Ticks at the grid's values only, labelled with them; crowded labels slant, and a value too close to
    the one labelled before it keeps its tick without a label."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    values = sorted({float(v) for v in values})
    if not values:
        return
    position = [math.log(v) if log else v for v in values]
    span = (position[-1] - position[0]) or 1.0
    crowded = len(values) > 8 or any((b - a) / span < 0.09 for a, b in zip(position, position[1:], strict=False))
    labels, last = [], None
    for value, at in zip(values, position, strict=True):
        shown = last is None or (at - last) / span >= (0.035 if crowded else 0.0)
        labels.append(text(value) if shown else "")
        last = at if shown else last
    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(FixedFormatter(labels))
    axis.set_minor_locator(NullLocator())
    for label in axis.get_ticklabels() if crowded and slant else ():
        label.set_rotation(40)
        label.set_horizontalalignment("right")


def seeds_label(summary: list[dict], what: str = "test error") -> str:
    """The y label of a plot of means: how many seeds each mean (and error bar) stands for."""
    seeds = sorted({r["seeds"] for r in summary if r.get("seeds") is not None})
    if seeds == [1]:
        return f"{what} (1 seed, no error bar)"
    count = "" if not seeds else f"{seeds[0]} " if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]} "
    return f"{what} (mean ± std over {count}seeds)"


def _first_config(manifest: dict) -> dict:
    import yaml

    runs = [r for r in manifest.get("runs") or [] if r.get("role") != REFERENCE]
    try:
        config = yaml.safe_load(Path(runs[0]["config"]).read_text())
    except (IndexError, KeyError, OSError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def _fixed_value(manifest: dict, key: str):
    """The value a sweep that did not vary `key` (``trainer.max_epochs``) ran at, from its config."""
    value = _first_config(manifest)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if _numeric([value]) else None


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def figure_title(manifests: list[dict], series: list[str], context: str, vary: str | None = None) -> str:
    """The series, what they trained (network, data, epochs; not an axis the grid varied) and the fixed sizes."""
    facts = []
    for manifest in manifests:
        config = _first_config(manifest)
        data = (config.get("data") or {}).get("init_args") or {}
        # the epochs the runs trained for (their saved configs: flags such as $MIXER_ARGS included), else the sweep's
        started = [r for r in manifest.get("runs") or [] if Path(r.get("run_dir", ""), "config.yaml").is_file()]
        trained = sorted({e for e in map(max_epochs_of, started) if e is not None})
        epochs = trained or [(config.get("trainer") or {}).get("max_epochs")]
        facts.append({"model": network(config)[0].rsplit(".", 1)[-1], "data": str(data.get("dataset") or "")})
        if all(isinstance(e, int) for e in epochs) and vary != "max_epochs":
            facts[-1]["epochs"] = f"{' / '.join(map(str, epochs))} epoch{'s' if epochs != [1] else ''}"
    parts = [" / ".join(dict.fromkeys(f[k] for f in facts if f.get(k))) for k in ("model", "data", "epochs")]
    line = ", ".join(dict.fromkeys(series)) + (f": {', '.join(p for p in parts if p)}" if any(parts) else "")
    return f"{line}\n{context}" if context else line


def _plot_lines(ax, summary: list[dict], x, label, y: str = "test_error_mean", err: str | None = "test_error_std"):
    groups: dict[str, list[tuple]] = {}
    for row in summary:
        if x(row) is not None and row.get(y) is not None:
            groups.setdefault(label(row), []).append((x(row), row[y], (row.get(err) or 0.0) if err else None))
    for name, points in sorted(groups.items()):
        xs, ys, es = zip(*sorted(points), strict=True)
        if err:
            ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, label=name)
        else:
            ax.plot(xs, ys, marker="o", ms=4, label=name)


def _save(fig, ax, path: Path, **legend) -> Path:
    ax.legend(fontsize=8, **legend)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def plot_summary(
    summary: list[dict], manifests: list[dict], axis_names: list[str], out: Path, names: list[str] | None = None
) -> list[Path]:
    """The plots of the module docstring the summary has data for; `names` are the series of `manifests`."""
    names = (names or list(dict.fromkeys(r["series"] for r in summary)))[: len(manifests)]
    names += [""] * (len(manifests) - len(names))
    plt = pyplot()
    kind, omega, gamma, width = (manifests[0].get(k) for k in ("kind", "omega", "gamma", "width"))
    context = ", ".join(
        t
        for t in (
            omega and f"Ω = {omega:,} connections per layer",
            gamma and f"γ = {gamma:g}",
            width and f"m = {width:,}",
        )
        if t
    )

    def title(rows: list[dict], vary: str | None = None) -> str:
        drawn = list(dict.fromkeys(r["series"] for r in rows))
        return figure_title([m for m, n in zip(manifests, names, strict=True) if n in drawn], drawn, context, vary)

    def series_label(row: dict) -> str:
        extra = ", ".join(f"{n} = {row[n]}" for n in axis_names if row.get(n) is not None)
        label = f"{row['series']} ({extra})" if extra else row["series"]
        return f"{label}, {row['_branch']}" if row.get("_branch") else label

    mirrored = {
        s
        for s in {r["series"] for r in summary}
        if len(ms := [r["m"] for r in summary if r["series"] == s and r["C"] is not None]) > len(set(ms))
    }
    by_branch = []
    for row in summary:
        if row["series"] not in mirrored:
            by_branch.append(row)
        else:
            by_branch += [
                {**row, "_branch": b}
                for b, keep in (("C ≤ S", row["C"] <= row["S"]), ("C ≥ S", row["C"] >= row["S"]))
                if keep
            ]
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
        _plot_lines(ax, by_branch if key == "m" else summary, lambda r, k=key: r[k], series_label)
        if key == "C" and (omega or width):
            c_star = width**0.5 if width else optimum(omega, gamma or 1.0)["C"]
            ax.axvline(c_star, color="gray", linestyle="--", label=f"S = C = {c_star:.4g}")
        drawn = [r for r in summary if r[key] is not None]
        ax.set(xscale=scale, xlabel=xlabel, ylabel=seeds_label(drawn), title=title(drawn))
        grid_ticks(ax.xaxis, [r[key] for r in drawn], log=scale == "log")
        paths.append(_save(fig, ax, out / name))
    if kind in DENSITY_KINDS and len({r["p"] for r in summary}) > 1:
        losses = any(r.get("train_loss_mean") is not None for r in summary)
        fig, axes = plt.subplots(1, 2 if losses else 1, figsize=(11 if losses else 6.6, 4.4), squeeze=False)
        xlabel = "density p of the weights (log₂ scale; sparser to the left)"
        _plot_lines(axes[0, 0], summary, lambda r: r["p"], series_label)
        axes[0, 0].set(xlabel=xlabel, ylabel=seeds_label(summary), title=title(summary))
        if losses:
            _plot_lines(axes[0, 1], summary, lambda r: r["p"], series_label, "train_loss_mean", None)
            axes[0, 1].set(
                xlabel=xlabel,
                ylabel="final training loss (cross-entropy, mean over seeds)",
                title="trainability (App. D.1, Fig. S.1 left)",
            )
        for ax in axes[0]:
            ax.set_xscale("log", base=2)
            grid_ticks(
                ax.xaxis, [r["p"] for r in summary if r["p"] is not None], power_of_two_text, log=True, slant=False
            )
            ax.legend(fontsize=8)
        paths.append(_save(fig, axes[0, -1], out / "error_vs_sparsity.png"))
    for axis in axis_names:
        shown = [r for r in summary if r.get(axis) is not None]  # a series without the axis has None
        if len({format_value(r[axis]) for r in shown}) < 2:
            continue
        others = [n for n in axis_names if n != axis]
        if not _numeric([r[axis] for r in shown]):
            paths.append(_plot_bars(plt, shown, manifests, axis, others, title(shown, axis), out))
            continue
        # a series that did not vary the axis is drawn at its config's value (budget_5ep, budget_20ep and
        # fig5_s_mixer at its 10 epochs: three budgets on one axis); the CSVs keep what the grids varied
        keys = [a["key"] for m in manifests for a in m.get("axes") or [] if a["name"] == axis]
        filled = [
            r
            if r.get(axis) is not None or r["series"] not in names
            else {**r, axis: _fixed_value(manifests[names.index(r["series"])], keys[0])}
            for r in summary
        ]
        rows = [r for r in filled if r.get(axis) is not None]
        values = [r[axis] for r in rows]
        series = list(dict.fromkeys(r["series"] for r in summary))
        # series holding one value each (budget_5ep, budget_20ep) are joined: one line per grid point across them
        joined = len(series) > 1 and all(
            len({format_value(r[axis]) for r in rows if r["series"] == s}) == 1 for s in {r["series"] for r in rows}
        )
        varied = [n for n in others if len({format_value(r.get(n)) for r in rows}) > 1]

        def line(r, varied=varied, joined=joined):
            parts = ([] if joined else [r["series"]]) + (
                [r["width_point"]] if r["width_point"] != "base" or joined else []
            )
            return ", ".join([" ".join(parts)] + [f"{n} = {r[n]}" for n in varied if r.get(n) is not None])

        fig, ax = plt.subplots(figsize=(6.6, 4.4))
        _plot_lines(ax, rows, lambda r, a=axis: r[a], line)
        log = all(v > 0 for v in values) and max(values) / min(values) >= 8
        ax.set(
            xscale="log" if log else "linear",
            xlabel=AXIS_LABELS.get(axis, axis),
            ylabel=seeds_label(rows),
            title=title(rows, axis),
        )
        grid_ticks(ax.xaxis, values, log=log)
        paths.append(
            _save(
                fig,
                ax,
                out / f"error_vs_{axis.replace('/', '_')}.png",
                title="grid point" if joined else None,
                title_fontsize=8,
            )
        )
    return paths


def _plot_bars(
    plt, shown: list[dict], manifests: list[dict], axis: str, others: list[str], title: str, out: Path
) -> Path:
    """Test error (mean ± std over seeds) per value of a non-numeric axis, in the grid's order and spelled as
    the run names spell them ([true, false] → tf); only values with a finished run get a place (an empty bar
    would read as an error of 0)."""
    groups: dict[str, dict[str, tuple]] = {}
    for row in shown:
        parts = [row["series"]] + ([row["width_point"]] if row["width_point"] != "base" else [])
        label = " ".join(parts + [f"{n} = {row[n]}" for n in others if row.get(n) is not None])
        groups.setdefault(label, {})[format_value(row[axis])] = (row["test_error_mean"], row["test_error_std"] or 0.0)
    present = {v for bars in groups.values() for v in bars}
    grid_order = [
        format_value(v) for m in manifests for a in m.get("axes") or [] if a["name"] == axis for v in a["values"]
    ]
    order = list(dict.fromkeys(v for v in grid_order if v in present)) + sorted(present - set(grid_order))
    fig, ax = plt.subplots(figsize=(max(6.6, 0.9 * len(order) * len(groups)), 4.4))
    width = 0.8 / len(groups)
    for i, (label, bars) in enumerate(sorted(groups.items())):
        xs = [j + (i - (len(groups) - 1) / 2) * width for j, v in enumerate(order) if v in bars]
        ys, es = zip(*(bars[v] for v in order if v in bars), strict=True)
        ax.bar(xs, ys, width=width, yerr=es, capsize=3, label=label)
    low = min(r["test_error_mean"] - (r["test_error_std"] or 0.0) for r in shown)
    high = max(r["test_error_mean"] + (r["test_error_std"] or 0.0) for r in shown)
    margin = max(high - low, 0.01) * 0.5  # the differences, not the bars' common base, fill the axes
    ax.set(xticks=range(len(order)), ylim=(max(0.0, low - margin), high + margin))
    ax.set_xticklabels(order)
    spelled = any(isinstance(r[axis], list) and all(isinstance(v, bool) for v in r[axis]) for r in shown)
    xlabel = AXIS_LABELS.get(axis, axis) + (" (one letter per block: t = true, f = false)" if spelled else "")
    ax.set(xlabel=xlabel, ylabel=seeds_label(shown), title=title)
    return _save(fig, ax, out / f"error_by_{axis.replace('/', '_')}.png")
