"""A sweep written out: one ready config per grid point and seed, the manifest (``sweep.json``) and the
scripts that run them (``run_all.sh``, ``slurm_array.sh``), merged with the sweep already in the directory
(earlier runs keep their place, and their SLURM array index). The grid is checked before anything is
written, and a run that has started never gets another config."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import yaml

from mixer_lightning.commands.lists import seeds as parse_seeds
from mixer_lightning.commands.sweep.grid import Grid, GridPoint, build
from mixer_lightning.commands.sweep.manifest import FRESH, MANIFEST, REFERENCE, read_manifest, run_state
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.atomic import atomic_write, check_output_dir
from mixer_lightning.safety.config_files import deep_merge, load_configs

LOGS = "logs"  # <sweep>/logs/<run>.log: the output of each point of a side-by-side sweep


def _signature(manifest: dict) -> dict:
    keys = [a["key"] for a in manifest.get("axes") or []]
    return {k: manifest.get(k) for k in ("kind", "omega", "gamma", "width")} | {"axes": keys}


def plan(args, directory: str, field: str) -> tuple[dict, dict[Path, str]]:
    """The manifest and every file (path -> text) of the sweep the flags describe, merged with the sweep
    already in `directory`; nothing is written."""
    root = check_output_dir(directory, field, "the sweep")
    base = load_configs(args.config)
    seeds = parse_seeds(args.seeds)
    grid: Grid = build(args, base, list(args.config))
    reference = load_configs(args.cka_reference, "cka_reference") if args.cka_reference else None
    if reference is not None:
        require(
            grid.kind in ("densities_at_width", "densities_at_omega", "base"),
            "cka_reference",
            "the CKA reference is compared with the SW-MLP runs of a density grid (Fig. 2(a))",
        )
    manifest = {
        "version": 2,
        **grid.signature(),
        "axes": [{"key": a.key, "name": a.name, "values": list(a.values)} for a in grid.axes],
        "base": list(args.config),
        "cka_reference": list(args.cka_reference or []) or None,
    }
    earlier = read_manifest(root, field) if (root / MANIFEST).is_file() else None
    if earlier is not None:
        theirs = _signature(earlier)
        require(
            theirs == grid.signature(),
            field,
            f"{directory!r} holds a sweep of another grid ({theirs})",
            "write this one to another directory",
        )
        manifest["cka_reference"] = manifest["cka_reference"] or earlier.get("cka_reference")
    files: dict[Path, str] = {}
    runs = []
    sources = [(point, base, " + ".join(args.config)) for point in grid.points]
    if reference is not None:
        sources.append((GridPoint(REFERENCE), reference, " + ".join(args.cka_reference)))
    for point, config_base, origin in sources:
        for seed in seeds:
            name = f"{point.id}_seed{seed}"
            logger = {"save_dir": str(root / "runs"), "name": point.id, "version": f"seed{seed}"}
            pinned = {
                "seed_everything": seed,
                "trainer": {
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": logger}
                },
            }
            config = deep_merge(deep_merge(config_base, point.overrides), pinned)
            what = (
                "CKA reference (compared with every SW-MLP run of this seed)"
                if point.id == REFERENCE
                else (f"Ω = {grid.omega:,}, " if grid.omega else "") + point.describe()
            )
            text = f"# Sweep point {point.id} (seed {seed}): {what}\n# From: {origin}\n"
            text += yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
            path, run_dir = root / "configs" / f"{name}.yaml", root / "runs" / point.id / f"seed{seed}"
            if path.is_file() and path.read_text() != text and run_state(run_dir) != FRESH:
                raise ConfigError(
                    field,
                    f"{name} has started ({run_dir}) and this sweep would change its config",
                    "emit to a new directory, or delete that run directory to restart it",
                )
            files[path] = text
            role = REFERENCE if point.id == REFERENCE else "grid"
            runs.append(
                {
                    "name": name,
                    "point": point.id,
                    "role": role,
                    **point.figures(),
                    "seed": seed,
                    "config": str(path),
                    "run_dir": str(run_dir),
                }
            )
    if earlier is not None:
        new = {r["name"]: r for r in runs}
        runs = [new.pop(r["name"], r) for r in earlier["runs"]] + list(new.values())
    manifest["runs"] = runs
    for name, text in scripts(root, runs).items():
        files[root / name] = text
    return manifest, files


def scripts(root: Path, runs: list[dict]) -> dict[str, str]:
    """run_all.sh (every run in turn, or PARALLEL=N at a time, then the report) and slurm_array.sh (one array
    task per run, requeued on its time limit); both call `mixer sweep point`, so that a re-run continues where
    the last one stopped. Both run in the directory the sweep was emitted from (its paths are relative to it),
    found from where the script lies (run_all.sh) or where sbatch was called (slurm_array.sh), not spelt."""
    names = " ".join(shlex.quote(r["name"]) for r in runs)
    sweep, logs = shlex.quote(str(root)), shlex.quote(str(root / LOGS))
    back = shlex.quote(os.path.relpath(Path.cwd(), root.resolve()))
    # PARALLEL=N: each point's output to <sweep>/logs/NAME.log, one line per start and end here; a failed
    # point still fails the script (xargs passes its status on)
    point_to_log = (
        'log="$0/logs/$1.log"; echo "sweep: $1: started (log: $log)"; '
        'if mixer sweep point "$0" "$1" --parallel "$PARALLEL" >> "$log" 2>&1; then echo "sweep: $1: done (log: $log)"; '
        'else status=$?; echo "sweep: $1: failed (exit $status; log: $log)"; exit $status; fi'
    )
    shell = (
        "#!/usr/bin/env bash\n"
        "# Every run of this sweep: `mixer sweep point` skips a finished run, resumes a killed one from its own\n"
        "# last.ckpt, fits a new one, then tests it; run it again after a kill and it continues.\n"
        "# MIXER_ARGS='--config configs/trainer/gpu.yaml': extra flags for every fit and test.\n"
        "# PARALLEL=N: N at a time (the usable CPUs split between them unless OMP_NUM_THREADS is set), output in logs/.\n"
        f'set -euo pipefail\ncd "${{MIXER_WORKDIR:-$(dirname "$0")/{back}}}"\nRUNS=({names})\n'
        + "export PARALLEL=${PARALLEL:-1}\n"
        + 'if [ "$PARALLEL" -gt 1 ]; then\n'
        + f"  mkdir -p {logs}\n"
        + f'  printf \'%s\\n\' "${{RUNS[@]}}" | xargs -P "$PARALLEL" -I{{}} sh -c {shlex.quote(point_to_log)} {sweep} {{}}\n'
        + "else\n"
        + f'  for run in "${{RUNS[@]}}"; do\n    mixer sweep point {sweep} "$run"\n  done\n'
        + "fi\n"
        + f"mixer sweep report {sweep}\n"
    )
    slurm = (
        f"#!/usr/bin/env bash\n#SBATCH --job-name=mixer-sweep\n#SBATCH --array=0-{len(runs) - 1}\n"
        "#SBATCH --gres=gpu:1\n#SBATCH --cpus-per-task=8\n"
        "#SBATCH --time=24:00:00\n"
        "#SBATCH --signal=USR1@90\n"
        "#SBATCH --requeue\n"
        "#SBATCH --output=%x-%A_%a.out\n"
        "# Submit from the directory the sweep was emitted in: sbatch "
        + shlex.quote(str(root / "slurm_array.sh"))
        + "\n# (or set MIXER_WORKDIR); then: mixer sweep report "
        + sweep
        + ".\n# 90 s before --time ends SLURM sends SIGUSR1: the run stops at a step it resumes from exactly, saves\n"
        "# last.ckpt and requeues its task, which resumes it (configs/trainer/slurm.yaml, docs/usage.md). A finished\n"
        "# run is skipped: submit the array again after a failure and only the unfinished runs train.\n"
        "# MIXER_VENV: the environment with `mixer` (default .venv; or activate yours below).\n"
        "# MIXER_ARGS: flags for every fit and test, after the one-GPU and SLURM overlays (a later --config wins).\n"
        f'set -euo pipefail\ncd "${{MIXER_WORKDIR:-$SLURM_SUBMIT_DIR}}"\n'
        'if [ -f "${MIXER_VENV:-.venv}/bin/activate" ]; then source "${MIXER_VENV:-.venv}/bin/activate"; fi\n'
        'export MIXER_ARGS="--config configs/trainer/gpu.yaml --config configs/trainer/slurm.yaml${MIXER_ARGS:+ $MIXER_ARGS}"\n'
        f"RUNS=({names})\n"
        f'srun mixer sweep point {sweep} "${{RUNS[$SLURM_ARRAY_TASK_ID]}}"\n'
    )
    return {"run_all.sh": shell, "slurm_array.sh": slurm}


def emit(args, directory: str, field: str) -> list[dict]:
    """Write the sweep's configs, scripts and manifest (only what changed; atomically, the manifest last);
    return its runs."""
    manifest, files = plan(args, directory, field)
    files[Path(directory, MANIFEST)] = json.dumps(manifest, indent=2) + "\n"
    for path, text in files.items():
        if not (path.is_file() and path.read_text() == text):
            with atomic_write(path, "w", field) as f:
                f.write(text)
                if path.suffix == ".sh":
                    os.chmod(f.fileno(), 0o755)
    return manifest["runs"]
