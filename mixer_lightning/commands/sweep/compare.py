"""``mixer sweep report`` of ordinary runs (``runs/NAME/version_N``, or ``runs/NAME`` for all its versions):
side by side, each named by what was trained (the network in the papers' words and what else differs in the
configs, `curves.run_names`), with its final figures (the last epoch's training loss, validation loss and
accuracy, the test accuracy where ``mixer test`` wrote one), its parameters and its training throughput
(``fit_summary.json``); ``runs.csv`` and the curves of every run (``curves_<metric>.png``)."""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_curves, spread
from mixer_lightning.commands.sweep.curves import labelled, plot, run_config, run_directories, run_names, validation_of
from mixer_lightning.commands.sweep.manifest import load_metrics
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import write_csv

METRICS = ("train/loss", "val/loss", "val/acc1")


def _parameters(run_dir: str) -> int | None:
    """The parameters of the run's network, counted as the run's header counts them (its last.ckpt)."""
    from mixer_lightning.tasks.loading import load_classifier

    ckpt = Path(run_dir, "checkpoints", "last.ckpt")
    return sum(p.numel() for p in load_classifier(ckpt, "directories").parameters()) if ckpt.is_file() else None


def compare_runs(directories: list[str], out: Path, draw: bool = True, labels: list[str] | None = None) -> dict:
    """One row per run of `directories`, the CSV and the plots; what `mixer sweep report --json` prints."""
    runs = [run for directory in directories for run in run_directories(directory)]
    require(
        bool(runs),
        "directories",
        f"no sweep (sweep.json) and no runs with logs in {', '.join(map(repr, directories))}",
        "give sweep directories or run directories (runs/NAME/version_N)",
    )
    configs = [run_config(run) for run in runs]
    names = labelled(run_names(configs, ["/".join(Path(run).parts[-2:]) for run in runs]), labels, "run")
    known = [c for c in configs if c is not None]
    differ = [k for k in sorted({k for c in known for k in c}) if len({c.get(k) for c in known}) > 1]
    rows, curves = [], []
    for run, config, name in zip(runs, configs, names, strict=True):
        logged = epoch_curves(run, list(METRICS))
        last = {m: c[max(c)] if c else None for m, c in logged.items()}
        summary = Path(run, "fit_summary.json")
        fit = json.loads(summary.read_text()) if summary.is_file() else {}
        test = load_metrics(run)[0] or {}
        rows.append(
            {
                "run": name,
                "directory": run,
                "parameters": fit.get("parameters") or _parameters(run),  # counted by the fit: no import
                "images_per_s": (fit.get("throughput") or {}).get("images_per_s"),
                "epochs": max((max(c) + 1 for c in logged.values() if c), default=0),
                "train_loss": last["train/loss"],
                "val_loss": last["val/loss"],
                "val_acc1": last["val/acc1"],
                "test_acc1": test.get("test/acc1"),
                "differs": ", ".join(f"{k}={json.loads(config[k])}" for k in differ if config and k in config),
            }
        )
        validation = validation_of([config])
        for metric, curve in logged.items():
            if curve:
                curves.append(
                    {"series": name, "point": name, "metric": metric, "runs": 1, "rows": spread([curve])}
                    | {"longest": len(curve), "validation": validation}
                )
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "runs.csv", rows)
    drawn = [m for m in METRICS if any(c["metric"] == m for c in curves)] if draw else []
    plots = [str(plot(curves, m, out / f"curves_{m.replace('/', '_')}.png")) for m in drawn]
    return {"runs": rows, "validation": validation_of(configs), "csv": str(out / "runs.csv"), "plots": plots}


def print_runs(result: dict) -> None:
    """The runs side by side, one line each, and what ``val/`` measured."""
    number = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    width = max(len(r["run"]) for r in result["runs"])
    print(
        f"{'run':<{width}} {'parameters':>10} {'img/s':>8} {'epochs':>6} {'train loss':>10} {'val loss':>9} "
        f"{'val acc1':>8} {'test acc1':>9}"
    )
    for r in result["runs"]:
        print(
            f"{r['run']:<{width}} {number(r['parameters'], ',d'):>10} {number(r['images_per_s'], ',.0f'):>8} "
            f"{r['epochs']:>6} {number(r['train_loss'], '.4f'):>10} {number(r['val_loss'], '.4f'):>9} "
            f"{number(r['val_acc1'], '.4f'):>8} {number(r['test_acc1'], '.4f'):>9}"
        )
    print(f"val: the {result['validation']} images (the runs' data.val_split); written: {result['csv']}")
    for r in result["runs"]:
        print(f"{r['run']}: {r['directory']}" + (f"; {r['differs']}" if r["differs"] else ""))
    if result["plots"]:
        print("plots: " + ", ".join(result["plots"]))
