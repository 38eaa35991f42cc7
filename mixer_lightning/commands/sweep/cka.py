"""Figure 2(a) of Hayase & Karakida 2024: the average of the diagonal entries of the CKA matrix between
a trained MLP-Mixer and SW-MLPs of density p = 2^-n, n = 0 … 10, at the Mixer's width (App. C.1).

A sweep emitted with ``--cka_reference MIXER.yaml`` trains the reference Mixer once per seed beside
its SW-MLP grid; ``mixer sweep report`` then computes, for each SW-MLP run, the minibatch CKA
(`mixer_lightning.analysis.cka.compute_matrix`, unbiased HSIC) between the inputs of the skip
connections of the reference run of the same seed and of that run, on the test split of the run's
config. The diagonal pairs the i-th skip input of each: the Mixer's L blocks have 2L (token, channel)
and the SW-MLP of App. C.1 has 2L blocks, "a total of 6 blocks" for L = 3. Each value is cached beside
the SW-MLP run (``cka_reference.json``, keyed by both checkpoints and the minibatches), so a report
after more runs finish computes only the new ones.

Writes ``cka.csv`` (one row per run: the diagonal and its mean) and ``cka_vs_density.png`` (mean ± std
over seeds against p, one line per sweep, the reference's own p = (1/S + 1/C)/2 dashed).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mixer_lightning.commands.sweep.runs import FITTED, REFERENCE, TESTED, run_state
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.atomic import pyplot, save_figure, write_csv, write_text

CACHE = "cka_reference.json"


def _finished(entry: dict) -> bool:
    return run_state(entry["run_dir"]) in (FITTED, TESTED)


def _checkpoint(entry: dict) -> Path:
    return Path(entry["run_dir"], "checkpoints", "last.ckpt")


def pair_cka(reference: dict, entry: dict, batches: int | None, batch_size: int | None, accelerator: str) -> dict:
    """The CKA of a run against the reference run (from the cache when both checkpoints are unchanged)."""
    import warnings

    from mixer_lightning.analysis.cka import compute_matrix
    from mixer_lightning.commands.quiet import quiet_libraries

    a, b = _checkpoint(reference), _checkpoint(entry)
    key = {
        "reference": str(a),
        "reference_mtime": a.stat().st_mtime_ns,
        "ckpt": str(b),
        "ckpt_mtime": b.stat().st_mtime_ns,
        "batches": batches,
        "batch_size": batch_size,
        "split": "test",
    }
    cache = Path(entry["run_dir"], CACHE)
    if cache.is_file():
        try:
            stored = json.loads(cache.read_text())
        except (ValueError, RecursionError, OSError):  # ValueError: not JSON, not UTF-8
            stored = None  # a damaged cache is recomputed
        if isinstance(stored, dict) and stored.get("key") == key and isinstance(stored.get("result"), dict):
            return stored["result"]
    with warnings.catch_warnings():  # the console of `mixer fit` (and `mixer cka`): no GPU/TPU lines, tips
        quiet_libraries()
        result = compute_matrix(
            str(a),
            str(b),
            [entry["config"]],
            batch_size=batch_size,
            batches=batches,
            accelerator=accelerator,
            devices=1,
        )
    result.pop("main_process", None)
    if "diagonal_mean" not in result:
        raise ConfigError(
            "cka_reference",
            f"the reference has {len(result['layers_a'])} skip inputs and {entry['name']} has {len(result['layers_b'])}: "
            "the CKA diagonal needs as many",
            "give the SW-MLP 2L blocks for an L-block Mixer (App. C.1)",
        )
    write_text(cache, json.dumps({"key": key, "result": result}, indent=2) + "\n", field="cka_reference")
    return result


def cka_report(
    directories: list[str],
    names: list[str],
    manifests: list[dict],
    out: Path,
    plot: bool,
    batches: int | None = None,
    batch_size: int | None = None,
    accelerator: str = "auto",
) -> dict:
    """CKA diagonals of every finished SW-MLP run against its seed's finished reference run."""
    rows, references = [], {}
    for series, manifest in zip(names, manifests, strict=True):
        by_seed = {r["seed"]: r for r in manifest["runs"] if r.get("role") == REFERENCE}
        for entry in manifest["runs"]:
            reference = by_seed.get(entry["seed"])
            if entry.get("role") == REFERENCE or reference is None or not (_finished(reference) and _finished(entry)):
                continue
            result = pair_cka(reference, entry, batches, batch_size, accelerator)
            diagonal = [result["cka"][i][i] for i in range(len(result["cka"]))]
            references[series] = result.get("mixing_a")
            rows.append(
                {
                    "series": series,
                    "point": entry["point"],
                    "p": entry["p"],
                    "m": entry["m"],
                    "seed": entry["seed"],
                    "cka_diagonal_mean": result["diagonal_mean"],
                    "cka_diagonal": " ".join(f"{v:.6f}" for v in diagonal),
                    "examples": result["examples"],
                }
            )
    summary = []
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["series"], row["point"]), []).append(row)
    for (series, point), members in groups.items():
        values = [r["cka_diagonal_mean"] for r in members]
        summary.append(
            {
                "series": series,
                "point": point,
                "p": members[0]["p"],
                "m": members[0]["m"],
                "seeds": len(values),
                "cka_mean": statistics.fmean(values),
                "cka_std": statistics.stdev(values) if len(values) > 1 else 0.0,
            }
        )
    summary.sort(key=lambda r: (r["series"], -r["p"]))
    outcome = {"rows": rows, "summary": summary, "csv": None, "plots": []}
    if not rows:
        return outcome
    write_csv(out / "cka.csv", rows)
    outcome["csv"] = str(out / "cka.csv")
    if plot:
        outcome["plots"] = [str(plot_cka(summary, references, out / "cka_vs_density.png"))]
    return outcome


def plot_cka(summary: list[dict], references: dict, path: Path) -> Path:
    """Average diagonal CKA against the density p (log₂ axis), one line per series (Fig. 2(a))."""
    from mixer_lightning.commands.sweep.ticks import grid_ticks, power_of_two_text

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    for i, series in enumerate(sorted({r["series"] for r in summary})):
        rows = sorted((r for r in summary if r["series"] == series), key=lambda r: r["p"])
        mixing = references.get(series)
        label = series + (f" (Mixer S = {mixing['S']}, C = {mixing['C']})" if mixing else "")
        ax.errorbar(
            [r["p"] for r in rows],
            [r["cka_mean"] for r in rows],
            yerr=[r["cka_std"] for r in rows],
            marker="o",
            ms=4,
            capsize=3,
            color=f"C{i}",
            label=label,
        )
        if mixing:
            ax.axvline((1 / mixing["S"] + 1 / mixing["C"]) / 2, color=f"C{i}", linestyle="--", alpha=0.6)
    ax.set_xscale("log", base=2)
    grid_ticks(
        ax.xaxis, [r["p"] for r in summary], power_of_two_text, log=True, slant=False
    )  # the grid's densities, as 2⁻ⁿ
    seeds = sorted({r["seeds"] for r in summary})
    ax.set(
        xlabel="density p of the SW-MLP's weights (log₂ scale; dashed: the Mixer's (1/S + 1/C)/2)",
        ylabel="average diagonal CKA "
        + (
            "(1 seed)"
            if seeds == [1]
            else f"(mean ± std over {'–'.join(str(s) for s in dict.fromkeys((seeds[0], seeds[-1])))} seeds)"
        ),
        title="CKA between the Mixer and SW-MLPs (Fig. 2(a))",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path
