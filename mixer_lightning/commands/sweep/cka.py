"""Figure 2(a) of Hayase & Karakida 2024: the average of the diagonal entries of the CKA matrix between a
trained MLP-Mixer and SW-MLPs of density p = 2^-n at the Mixer's width (App. C.1).

A sweep emitted with ``--cka_reference MIXER.yaml`` trains the reference Mixer once per seed beside its
SW-MLP grid; the report then computes, for each SW-MLP run, the minibatch CKA (unbiased HSIC,
`mixer_lightning.analysis.cka.compute_matrix`) between the skip-connection inputs of the reference run of the
same seed and of that run, on the test split. The diagonal pairs the i-th skip input of each: L Mixer
blocks have 2L (token, channel), the SW-MLP of App. C.1 has 2L blocks. Each value is cached beside the
SW-MLP run (``cka_reference.json``, keyed by both checkpoints), so a later report computes only new ones."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mixer_lightning.commands.sweep.manifest import FITTED, REFERENCE, TESTED, run_state
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.atomic import pyplot, save_figure, write_csv, write_text

CACHE = "cka_reference.json"


def pair_cka(reference: dict, entry: dict, batches=None, batch_size=None, accelerator: str = "auto") -> dict:
    """The CKA of a run against the reference run (from the cache while both checkpoints are unchanged)."""
    a, b = (Path(r["run_dir"], "checkpoints", "last.ckpt") for r in (reference, entry))
    key = {"reference": str(a), "reference_mtime": a.stat().st_mtime_ns, "ckpt": str(b)}
    key |= {"ckpt_mtime": b.stat().st_mtime_ns, "batches": batches, "batch_size": batch_size, "split": "test"}
    cache = Path(entry["run_dir"], CACHE)
    try:
        stored = json.loads(cache.read_text())
        if stored["key"] == key:
            return stored["result"]
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or damaged: computed again
        pass
    from mixer_lightning.analysis.cka import compute_matrix
    from mixer_lightning.commands.quiet import quiet_libraries

    quiet_libraries()
    options = {"batch_size": batch_size, "batches": batches, "accelerator": accelerator, "devices": 1}
    result = compute_matrix(str(a), str(b), [entry["config"]], **options)
    result.pop("main_process", None)
    if "diagonal_mean" not in result:
        inputs = f"{len(result['layers_a'])} and {len(result['layers_b'])} skip inputs"
        raise ConfigError(
            "cka_reference", f"the reference and {entry['name']} have {inputs}", "give the SW-MLP 2L blocks"
        )
    write_text(cache, json.dumps({"key": key, "result": result}, indent=2) + "\n", field="cka_reference")
    return result


def cka_report(names: list[str], manifests: list[dict], out: Path, plot: bool, **options) -> dict:
    """CKA diagonals of every finished SW-MLP run against its seed's finished reference run (`options`: of
    `pair_cka`)."""
    rows, references, groups = [], {}, {}
    for series, manifest in zip(names, manifests, strict=True):
        by_seed = {r["seed"]: r for r in manifest["runs"] if r.get("role") == REFERENCE}
        for entry in manifest["runs"]:
            pair = (by_seed.get(entry["seed"]), entry)
            if (
                entry.get("role") == REFERENCE
                or pair[0] is None
                or any(run_state(r["run_dir"]) not in (FITTED, TESTED) for r in pair)
            ):
                continue
            result = pair_cka(*pair, **options)
            references[series] = result.get("mixing_a")
            diagonal = " ".join(f"{result['cka'][i][i]:.6f}" for i in range(len(result["cka"])))
            row = {k: entry[k] for k in ("point", "p", "m", "seed")} | {"cka_diagonal_mean": result["diagonal_mean"]}
            rows.append({"series": series, **row, "cka_diagonal": diagonal, "examples": result["examples"]})
            groups.setdefault((series, entry["point"]), []).append(rows[-1])
    summary = []
    for (series, point), members in groups.items():
        values = [r["cka_diagonal_mean"] for r in members]
        row = {"series": series, "point": point, "p": members[0]["p"], "m": members[0]["m"], "seeds": len(values)}
        summary.append(
            row
            | {"cka_mean": statistics.fmean(values), "cka_std": statistics.stdev(values) if len(values) > 1 else 0.0}
        )
    summary.sort(key=lambda r: (r["series"], -r["p"]))
    outcome = {"rows": rows, "summary": summary, "csv": None, "plots": []}
    if rows:
        write_csv(out / "cka.csv", rows)
        outcome["csv"] = str(out / "cka.csv")
        if plot:
            outcome["plots"] = [str(plot_cka(summary, references, out / "cka_vs_density.png"))]
    return outcome


def plot_cka(summary: list[dict], references: dict, path: Path) -> Path:
    """Average diagonal CKA against the density p (log₂ axis), one line per series, the reference's own
    p = (1/S + 1/C)/2 dashed (Fig. 2(a))."""
    from mixer_lightning.commands.sweep.plots import grid_ticks, power_of_two_text, seeds_label

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    for i, series in enumerate(sorted({r["series"] for r in summary})):
        rows = sorted((r for r in summary if r["series"] == series), key=lambda r: r["p"])
        mixing = references.get(series)
        label = series + (f" (Mixer S = {mixing['S']}, C = {mixing['C']})" if mixing else "")
        xs, ys, es = ([r[k] for r in rows] for k in ("p", "cka_mean", "cka_std"))
        ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, color=f"C{i}", label=label)
        if mixing:
            ax.axvline((1 / mixing["S"] + 1 / mixing["C"]) / 2, color=f"C{i}", linestyle="--", alpha=0.6)
    ax.set_xscale("log", base=2)
    grid_ticks(ax.xaxis, [r["p"] for r in summary], power_of_two_text, log=True, slant=False)
    ax.set(
        xlabel="density p of the SW-MLP's weights (log₂ scale; dashed: the Mixer's (1/S + 1/C)/2)",
        ylabel=seeds_label(summary, "average diagonal CKA"),
        title="CKA between the Mixer and SW-MLPs (Fig. 2(a))",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path
