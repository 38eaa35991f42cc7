"""``mixer sweep report`` of ordinary runs (``runs/NAME/version_N``, or ``runs/NAME`` for all its versions):
side by side, each named by what was trained (the network in the papers' words and what else differs in the
configs, `curves.run_names`), with its final figures (the last epoch's training loss, validation loss and
accuracy, the test accuracy of the checkpoint the fit named, of the whole split, where ``mixer test`` wrote one,
and what it tested), its parameters and its training throughput
(``fit_summary.json``); ``runs.csv`` and the curves of every run (``curves_<metric>.png``)."""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.analysis.curves import epoch_curves, spread
from mixer_lightning.commands.sweep.curves import labelled, plot, run_config, run_directories, run_names, validation_of
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import write_csv

METRICS = ("train/loss", "val/loss", "val/acc1")


def _parameters(run_dir: str) -> int | None:
    """The parameters of the run's network, counted as the run's header counts them (its last.ckpt)."""
    from mixer_lightning.tasks.loading import load_classifier

    ckpt = Path(run_dir, "checkpoints", "last.ckpt")
    return sum(p.numel() for p in load_classifier(ckpt, "directories").parameters()) if ckpt.is_file() else None


def read_json(path: Path) -> dict:
    """A run's JSON record, or {} where there is none or it is cut short (a run killed as it wrote it)."""
    try:
        content = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def run_test(run: str, named: str | None) -> dict:
    """The test that is the run's figure: of the whole test split, of the checkpoint its fit_summary.json names
    (`named`, as a test's record names it); failing that, the newest test of the whole split, else the newest
    test (which the row marks: `tested`). A run keeps one ``test_metrics*.json`` per checkpoint tested."""
    tests = [(path.stat().st_mtime, read_json(path)) for path in Path(run).glob("test_metrics*.json")]
    tests = [(time, test) for time, test in tests if isinstance(test.get("test/acc1"), (int, float))]
    whole = lambda test: test.get("partial") is not True  # noqa: E731
    of_named = lambda test: named is not None and (test.get("checkpoint") or {}).get("path") == named  # noqa: E731
    return max(tests, key=lambda pair: (whole(pair[1]), of_named(pair[1]), pair[0]), default=(0, {}))[1]


def tested(test: dict) -> str:
    """What `test` evaluated: its checkpoint (as the run names it), and ``partial`` for part of the split."""
    if not test:
        return ""
    path = (test.get("checkpoint") or {}).get("path") or "?"
    return f"{path}, partial" if test.get("partial") is True else path


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
        fit = read_json(Path(run, "fit_summary.json"))
        test = run_test(run, fit.get("test_checkpoint"))
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
                "tested": tested(test),
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
            + (f"  (test of {r['tested']})" if r["tested"] else "")
        )
    print(f"val: the {result['validation']} images (the runs' data.val_split); written: {result['csv']}")
    for r in result["runs"]:
        print(f"{r['run']}: {r['directory']}" + (f"; {r['differs']}" if r["differs"] else ""))
    if result["plots"]:
        print("plots: " + ", ".join(result["plots"]))
