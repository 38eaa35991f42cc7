"""Sweep an experiment over the width grid at a fixed number of connections Ω (Hayase & Karakida
Fig. 4-6): one ready config per grid point and seed, scripts that run them (plain shell and a SLURM
array), and a report that gathers the finished runs into a CSV and the paper's plots.

Grid points: for each channel size C, S is solved from (Ω, C, γ) (``--channels``, default the paper's
values and their mirrors); or, with ``--patch_sizes``, C = in_chans·P² for each patch size P (the
ImageNet sweep of Figure 6). For an SW-MLP config the grid is over the density p instead
(``--densities``, default the paper's 1-p ∈ {0.1, 0.3, 0.5, 0.7, 0.9}), each at the width
m = √(Ω/(γp)) with the same Ω (Fig. 5's SW-MLP arm, eq. S.43). Each point is run once per seed.

Examples:
    mixer sweep --config configs/cifar10_fig5_s_mixer.yaml --omega 2**18 --seeds 0,1,2 --emit sweeps/fig5_c10
    mixer sweep --config configs/imagenet_fig6_mlp_mixer.yaml --omega 290217984 --gamma 4 \\
        --patch_sizes 7,8,14,16,28,32 --emit sweeps/fig6_in1k
    mixer sweep --config configs/cifar10_fig5_s_mixer.yaml --omega 2**18 --run sweeps/fig5_c10   # here, in turn
    mixer sweep --config configs/cifar10_fig5_sw_mlp.yaml --omega 2**18 --seeds 0,1,2 --emit sweeps/fig5_c10_sw
    mixer sweep report sweeps/fig5_c10 sweeps/fig5_c10_rp sweeps/fig5_c10_sw   # CSV + error vs width and vs C
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import statistics
from pathlib import Path

import yaml
from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.config_files import deep_merge, load_configs
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.width import default_channels, density, optimum, parse_int_expression, solve_tokens

# LightningModule class name -> (family, γ when the family fixes it)
FAMILIES = {"SMixerModule": ("s_mixer", 1.0), "MLPMixerModule": ("mlp_mixer", None), "SWMLPModule": ("sw_mlp", None)}
# Hayase & Karakida Fig. 5: the SW-MLP at sparsity 1-p ∈ {0.1, 0.3, 0.5, 0.7, 0.9}.
PAPER_DENSITIES = (0.9, 0.7, 0.5, 0.3, 0.1)
MANIFEST = "sweep.json"


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--config", action="append", required=True, help="base config(s), composed in order")
    parser.add_argument("--omega", type=str, required=True, help="connections per layer Ω, e.g. 2**18")
    parser.add_argument("--gamma", type=float, default=None, help="γ (default: the base config's; 1 for S-Mixers)")
    parser.add_argument("--channels", type=str, default=None, help="comma-separated C values (default: the paper's)")
    parser.add_argument("--patch_sizes", type=str, default=None, help="sweep P with C = in_chans·P² instead")
    parser.add_argument("--in_chans", type=int, default=3, help="image channels, for C = in_chans·P²")
    parser.add_argument("--densities", type=str, default=None,
                        help="SW-MLP configs: comma-separated densities p (default: the paper's 0.9,0.7,0.5,0.3,0.1)")  # fmt: skip
    parser.add_argument("--seeds", type=str, default="0", help="comma-separated seeds")
    parser.add_argument("--emit", type=str, default=None, help="write configs and scripts to this directory")
    parser.add_argument("--run", type=str, default=None, help="write them there and run them here, one by one")


def _ints(text: str, field: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(field, f"cannot read {text!r}", "give comma-separated integers, e.g. 16,32,48") from None
    require(bool(values) and all(v > 0 for v in values), field, f"needs positive integers, got {text!r}")
    return values


def model_family(config: dict) -> tuple[str, float | None]:
    class_path = str(config.get("model", {}).get("class_path", ""))
    name = class_path.rsplit(".", 1)[-1]
    require(
        name in FAMILIES,
        "config",
        f"model {class_path or '(none)'} has no width grid",
        f"sweep a config whose model is one of {', '.join(FAMILIES)}",
    )
    return FAMILIES[name]


def _densities(text: str | None) -> list[float]:
    if text is None:
        return list(PAPER_DENSITIES)
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(
            "densities", f"cannot read {text!r}", "give comma-separated numbers, e.g. 0.9,0.5,0.1"
        ) from None
    require(bool(values) and all(0 < v <= 1 for v in values), "densities", f"needs values in (0, 1], got {text!r}",
            "give densities p such as 0.9,0.5,0.1")  # fmt: skip
    return values


def sw_mlp_grid(args: Namespace, init_args: dict, omega: int) -> tuple[list[dict], float]:
    """SW-MLP points at fixed Ω: one per density p, at the width the model itself derives from (Ω, p)."""
    from mixer_lightning.models.sw_mlp import resolve_width_density

    require(not args.channels and not args.patch_sizes, "channels",
            "an SW-MLP sweep is over densities, not channels or patch sizes", "use --densities")  # fmt: skip
    import inspect

    from mixer_lightning.models import get_entry
    from mixer_lightning.models.sw_mlp import SWMLP

    # γ as the model resolves it: the config's value, else its preset's, else SWMLP's default block.
    settings = {**(get_entry(init_args["preset"]).defaults if init_args.get("preset") else {}),
                **{k: v for k, v in init_args.items() if v is not None}}  # fmt: skip
    block = settings.get("block") or inspect.signature(SWMLP).parameters["block"].default
    gamma = 1.0 if block == "fc" else float(args.gamma or settings.get("gamma") or 2.0)
    if block == "fc" and args.gamma not in (None, 1, 1.0):
        raise ConfigError("gamma", "a single-FC SW-MLP block has γ = 1", "drop --gamma (or use block: mlp)")
    points = []
    for p in _densities(args.densities):
        m, p = resolve_width_density(1, gamma, None, None, p, float(omega))
        points.append({"id": f"p{p:g}_m{m}", "C": None, "S": None, "P": init_args.get("patch_size"), "m": m, "p": p,
                       "overrides": {"omega": omega, "density": p, "width": None, "channels": None}})  # fmt: skip
        if block != "fc":  # the model must use the γ its width was solved with (--gamma may differ from the config's)
            points[-1]["overrides"]["gamma"] = gamma
    return points, gamma


def grid(args: Namespace, base: dict) -> tuple[list[dict], float, float]:
    """The grid points (model overrides and their width figures), Ω and γ."""
    omega = parse_int_expression(args.omega, "omega")
    require(omega > 0, "omega", f"must be positive, got {omega}", "give e.g. 2**18")
    family, fixed_gamma = model_family(base)
    init_args = base["model"].get("init_args", {}) or {}
    if family == "sw_mlp":
        points, gamma = sw_mlp_grid(args, init_args, omega)
        return points, omega, gamma
    require(args.densities is None, "densities", f"the {family} family is swept over channels, not densities",
            "drop --densities (or sweep an SW-MLP config)")  # fmt: skip
    gamma = fixed_gamma or args.gamma or init_args.get("gamma") or 4.0
    if fixed_gamma is not None and args.gamma not in (None, fixed_gamma):
        raise ConfigError("gamma", f"the {family} family has γ = {fixed_gamma:g}", "drop --gamma")
    points = []
    if args.patch_sizes:
        require(not args.channels, "channels", "give --channels or --patch_sizes, not both")
        for p in _ints(args.patch_sizes, "patch_sizes"):
            c = args.in_chans * p * p
            points.append({"id": f"P{p}_C{c}", "overrides": {"patch_size": p, "channels": c}, "P": p, "C": c})
    else:
        channels = _ints(args.channels, "channels") if args.channels else default_channels(omega, gamma)
        for c in channels:
            points.append({"id": f"C{c}", "overrides": {"channels": c}, "P": init_args.get("patch_size"), "C": c})
    for point in points:
        s = solve_tokens(omega, point["C"], gamma)
        point["id"] += f"_S{s}"
        point.update(S=s, m=s * point["C"], p=density(s, point["C"], gamma))
        point["overrides"].update(omega=omega, tokens=None)
        if family == "mlp_mixer":
            point["overrides"]["gamma"] = gamma
    return points, omega, gamma


def emit(args: Namespace, directory: str) -> list[dict]:
    """Write one config per grid point and seed, the manifest and the scripts; return the runs."""
    base = load_configs(args.config)
    points, omega, gamma = grid(args, base)
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip() != ""]
    root = Path(directory)
    (root / "configs").mkdir(parents=True, exist_ok=True)
    runs = []
    for point in points:
        for seed in seeds:
            name = f"{point['id']}_seed{seed}"
            logger = {"save_dir": str(root / "runs"), "name": point["id"], "version": f"seed{seed}"}
            config = deep_merge(
                base,
                {
                    "seed_everything": seed,
                    "model": {"init_args": point["overrides"]},
                    "trainer": {
                        "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": logger}
                    },
                },
            )
            path = root / "configs" / f"{name}.yaml"
            shape = (f"p = {point['p']:g}, m = {point['m']:,}" if point["C"] is None
                     else f"C = {point['C']}, S = {point['S']}, m = S·C = {point['m']:,}")  # fmt: skip
            header = (
                f"# Sweep point {point['id']} (seed {seed}): Ω = {omega:,}, γ = {gamma:g}, {shape}\n"
                f"# From: {' + '.join(args.config)}\n"
            )
            path.write_text(header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
            run_dir = root / "runs" / point["id"] / f"seed{seed}"
            runs.append({**{k: v for k, v in point.items() if k != "overrides"}, "seed": seed,
                         "config": str(path), "run_dir": str(run_dir)})  # fmt: skip
    manifest_path = root / MANIFEST
    if manifest_path.is_file():  # extend an earlier sweep into the same directory, never drop its runs
        earlier = json.loads(manifest_path.read_text())
        require(
            (earlier["omega"], earlier["gamma"]) == (omega, gamma),
            "emit",
            f"{directory!r} holds a sweep at Ω = {earlier['omega']:,}, γ = {earlier['gamma']:g}",
            "write this one to another directory",
        )
        new = {r["config"] for r in runs}
        runs = [r for r in earlier["runs"] if r["config"] not in new] + runs
    manifest = {"omega": omega, "gamma": gamma, "base": args.config, "runs": runs}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    _write_scripts(root, runs)
    return runs


def _write_scripts(root: Path, runs: list[dict]) -> None:
    workdir = shlex.quote(os.getcwd())
    fit_and_test = (
        'mixer fit --config "$config" ${MIXER_ARGS:-}\n'
        'mixer test --config "$config" --ckpt_path "$run/checkpoints/last.ckpt" ${MIXER_ARGS:-}\n'
    )
    configs = " ".join(shlex.quote(r["config"]) for r in runs)
    run_dirs = " ".join(shlex.quote(r["run_dir"]) for r in runs)
    shell = (
        "#!/usr/bin/env bash\n# Every grid point of this sweep, one after another: fit, then test the last checkpoint.\n"
        "# Extra flags for every run: MIXER_ARGS='--config configs/trainer/gpu.yaml' bash run_all.sh\n"
        f'set -euo pipefail\ncd "${{MIXER_WORKDIR:-{workdir}}}"\nCONFIGS=({configs})\nRUNS=({run_dirs})\n'
        'for i in "${!CONFIGS[@]}"; do\n  config=${CONFIGS[$i]}; run=${RUNS[$i]}\n'
        '  if [ -f "$run/test_metrics.json" ]; then echo "done: $run"; continue; fi\n'
        + "".join("  " + line + "\n" for line in fit_and_test.splitlines())
        + f"done\nmixer sweep report {shlex.quote(str(root))}\n"
    )
    slurm = (
        f"#!/usr/bin/env bash\n#SBATCH --job-name=mixer-sweep\n#SBATCH --array=0-{len(runs) - 1}\n"
        "#SBATCH --gres=gpu:1\n#SBATCH --cpus-per-task=8\n#SBATCH --output=%x-%A_%a.out\n"
        "# Submit: sbatch slurm_array.sh; then: mixer sweep report <this directory>\n"
        f'set -euo pipefail\ncd "${{MIXER_WORKDIR:-{workdir}}}"\nCONFIGS=({configs})\nRUNS=({run_dirs})\n'
        "config=${CONFIGS[$SLURM_ARRAY_TASK_ID]}; run=${RUNS[$SLURM_ARRAY_TASK_ID]}\n" + fit_and_test
    )
    for name, text in (("run_all.sh", shell), ("slurm_array.sh", slurm)):
        (root / name).write_text(text)
        (root / name).chmod(0o755)


def run(args: Namespace) -> None:
    require(bool(args.emit) != bool(args.run), "emit", "give exactly one of --emit DIR or --run DIR")
    if args.emit:
        runs = emit(args, args.emit)
        print(f"{len(runs)} configs in {args.emit}/configs; run them with {args.emit}/run_all.sh or "
              f"sbatch {args.emit}/slurm_array.sh, then: mixer sweep report {args.emit}")  # fmt: skip
        return
    from mixer_lightning.cli import main

    runs = emit(args, args.run)
    for entry in runs:
        if Path(entry["run_dir"], "test_metrics.json").is_file():
            continue  # finished earlier: a re-run of the sweep resumes where it stopped
        main(["fit", "--config", entry["config"]])
        main(
            [
                "test",
                "--config",
                entry["config"],
                "--ckpt_path",
                str(Path(entry["run_dir"], "checkpoints", "last.ckpt")),
            ]
        )
    report_directories([args.run], plot=True)


# ----------------------------------------------------------------------------------------------- report


def add_report_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("directories", nargs="+", help="sweep directories (one series each: e.g. normal and RP)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--out", type=str, default=None, help="where to write the CSVs and plots (default: the first)")


def collect(directory: str) -> tuple[dict, list[dict]]:
    """The manifest of a sweep and one row per finished run (test error from test_metrics.json)."""
    path = Path(directory, MANIFEST)
    require(path.is_file(), "directories", f"{directory!r} is not a sweep directory (no {MANIFEST})",
            "give a directory written by `mixer sweep --emit/--run`")  # fmt: skip
    manifest = json.loads(path.read_text())
    rows = []
    for entry in manifest["runs"]:
        metrics_path = Path(entry["run_dir"], "test_metrics.json")
        if not metrics_path.is_file():
            continue
        metrics = json.loads(metrics_path.read_text())
        rows.append({"series": Path(directory).name, "point": Path(entry["run_dir"]).parent.name,
                     "C": entry["C"], "S": entry["S"], "P": entry.get("P"), "m": entry["m"], "p": entry["p"],
                     "seed": entry["seed"], "test_acc1": metrics["test/acc1"],
                     "test_error": 1.0 - metrics["test/acc1"]})  # fmt: skip
    return manifest, rows


def summarise(rows: list[dict]) -> list[dict]:
    """Mean ± std of the test error over seeds, per series and grid point."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["series"], row["point"]), []).append(row)
    summary = []
    for (series, point), members in groups.items():
        errors = [r["test_error"] for r in members]
        first = members[0]
        summary.append({"series": series, "point": point, "C": first["C"], "S": first["S"], "P": first["P"],
                        "m": first["m"], "p": first["p"], "seeds": len(members),
                        "test_error_mean": statistics.fmean(errors),
                        "test_error_std": statistics.stdev(errors) if len(errors) > 1 else 0.0})  # fmt: skip
    return sorted(summary, key=lambda r: (r["series"], r["m"]))


def plot_summary(summary: list[dict], omega: float, gamma: float, out: Path) -> list[Path]:
    """Figure 5 (test error against the effective width m) and Figure 6 (against C, S = C marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    figures = [("m", "error_vs_width.png", "effective width m = S·C")]
    if any(r["C"] is not None for r in summary):  # not for SW-MLP series alone: they have no C
        figures.append(("C", "error_vs_channels.png", "C"))
    for x, name, label in figures:
        fig, ax = plt.subplots(figsize=(6, 4))
        for series in sorted({r["series"] for r in summary}):
            rows = sorted((r for r in summary if r["series"] == series and r[x] is not None), key=lambda r: r[x])
            if not rows:
                continue  # an SW-MLP series has no C: it appears against the width m only
            ax.errorbar([r[x] for r in rows], [r["test_error_mean"] for r in rows],
                        yerr=[r["test_error_std"] for r in rows], marker="o", capsize=3, label=series)  # fmt: skip
        if x == "C":
            ax.axvline(optimum(omega, gamma)["C"], color="gray", linestyle="--", label="S = C")
        ax.set(xscale="log", xlabel=label, ylabel="test error", title=f"Ω = {omega:,}, γ = {gamma:g}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        paths.append(out / name)
    return paths


def report_directories(directories: list[str], plot: bool = True, out: str | None = None) -> dict:
    rows, manifests = [], []
    for directory in directories:
        manifest, found = collect(directory)
        manifests.append(manifest)
        rows.extend(found)
    require(bool(rows), "directories", "no finished runs (test_metrics.json) yet", "run the sweep first")
    out_dir = Path(out or directories[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows)
    for name, table in (("report.csv", rows), ("summary.csv", summary)):
        with open(out_dir / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    omega, gamma = manifests[0]["omega"], manifests[0]["gamma"]
    plots = [str(p) for p in plot_summary(summary, omega, gamma, out_dir)] if plot else []
    return {"omega": omega, "gamma": gamma, "summary": summary, "plots": plots, "csv": str(out_dir / "report.csv")}


def run_report(args: Namespace) -> None:
    """Gather finished sweep runs into report.csv / summary.csv and plot the test error against the
    effective width (Figure 5) and against C with S = C marked (Figure 6)."""
    result = report_directories(args.directories, plot=True, out=args.out)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'series':<20} {'point':<14} {'C':>6} {'S':>6} {'p':>8} {'m':>8} {'seeds':>5} {'test error':>16}")
    for r in result["summary"]:
        error = f"{r['test_error_mean']:.4f} ± {r['test_error_std']:.4f}"
        c, s = ("-", "-") if r["C"] is None else (r["C"], r["S"])
        print(
            f"{r['series']:<20} {r['point']:<14} {c:>6} {s:>6} {r['p']:>8.4g} {r['m']:>8} {r['seeds']:>5} {error:>16}"
        )
    best = min(result["summary"], key=lambda r: r["test_error_mean"])["point"]
    optimum_note = (f"; S = C at {optimum(result['omega'], result['gamma'])['C']:.4g}"
                    if any(r["C"] is not None for r in result["summary"]) else "")  # fmt: skip
    print(f"best: {best}{optimum_note}; written: {result['csv']}, " + ", ".join(result["plots"]))


SUBCOMMANDS = {"report": (add_report_arguments, run_report)}
