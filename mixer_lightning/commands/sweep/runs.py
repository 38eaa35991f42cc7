"""The runs of a sweep: one ready config per grid point and seed, the manifest (``sweep.json``), the
scripts that run them (``run_all.sh``, ``slurm_array.sh``), and `run_point`, the one place that
decides what a run still needs, used by ``mixer sweep --run``, by the scripts (through
``mixer sweep point``) and so by a re-submitted SLURM array alike:

=========  =====================================  ===========================================
state      found in the run directory             what runs
=========  =====================================  ===========================================
tested     ``test_metrics.json``                  nothing
fitted     ``fit_summary.json``                   ``mixer test`` of its last.ckpt
partial    ``checkpoints/last.ckpt``              ``mixer fit --ckpt_path last`` (the run's own
                                                  checkpoint: the logger's name and version are
                                                  pinned per point and seed), then the test
fresh      none of these                          ``mixer fit``, then the test; leftovers of a run
                                                  killed before its first checkpoint are moved
                                                  aside to ``<run>.aborted-N`` first
=========  =====================================  ===========================================

Everything is checked before anything is written: the grid, the seeds, the output directory (not a
file, writable), and that no run that has started would get a different config. Files are written
atomically (temporary file, rename), the manifest last.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

import yaml

from mixer_lightning import run_mixer
from mixer_lightning.commands.lists import seeds as parse_seeds
from mixer_lightning.commands.sweep.grid import Grid, GridPoint, build
from mixer_lightning.commands.sweep.manifest import MANIFEST, METRICS_LIMIT, _number, read_json, read_manifest
from mixer_lightning.errors import ConfigError, ResourceError, require
from mixer_lightning.safety.atomic import atomic_write
from mixer_lightning.safety.config_files import deep_merge, load_configs
from mixer_lightning.safety.rundir import LOCK_NAME, RunLock, _holder

SCRIPTS = ("run_all.sh", "slurm_array.sh")
REFERENCE = "reference"  # the point id of a sweep's CKA reference runs (Fig. 2(a): the Mixer)
EXTRA_ARGS_ENV = "MIXER_ARGS"  # extra flags for every fit and test of a sweep, e.g. a trainer overlay
TESTED, FITTED, PARTIAL, FRESH = "tested", "fitted", "partial", "fresh"
# How a partial run is resumed: `mixer fit --ckpt_path last` continues the run directory its config
# pins (logger name = point, version = seed), from that run's own last.ckpt.
RESUME_ARGS = ("--ckpt_path", "last")


# ----------------------------------------------------------------------------------- run states


METRICS = "test_metrics.json"
LOGS = "logs"  # <sweep>/logs/<run>.log: the output of each point of a --parallel sweep


def load_metrics(run_dir: str | Path) -> tuple[dict | None, str | None]:
    """A run's ``test_metrics.json``: (metrics, None), (None, None) when there is none, or (None, what is
    wrong) when it is damaged (truncated, empty, not UTF-8, not an object, ``test/acc1`` missing or not
    a number in [0, 1]): a damaged result is never read as a result."""
    path = Path(run_dir, METRICS)
    if not path.exists():
        return None, None
    if not path.is_file():
        return None, "not a regular file"
    try:
        metrics = read_json(path, METRICS_LIMIT)
    except ValueError as error:
        return None, str(error)
    except OSError as error:
        return None, f"unreadable: {error.strerror or error}"
    if not isinstance(metrics, dict):
        return None, f"a JSON {type(metrics).__name__}, not an object"
    acc = metrics.get("test/acc1")
    if acc is None:
        return None, "no test/acc1"
    if not _number(acc) or not math.isfinite(acc) or not 0.0 <= acc <= 1.0:
        return None, f"test/acc1 is {acc!r}, not a number in [0, 1]"
    return metrics, None


def run_state(run_dir: str | Path) -> str:
    """What a run has done so far (see the module docstring); a damaged ``test_metrics.json`` does not
    count as tested (`load_metrics`)."""
    run_dir = Path(run_dir)
    if load_metrics(run_dir)[0] is not None:
        return TESTED
    if (run_dir / "fit_summary.json").is_file():
        return FITTED
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        return PARTIAL
    return FRESH


def fit_arguments(entry: dict, state: str, extra: list[str] = ()) -> list[str] | None:
    """The ``mixer`` arguments of the fit a run in `state` needs (None: it needs none)."""
    if state in (TESTED, FITTED):
        return None
    return ["fit", "--config", entry["config"], *(RESUME_ARGS if state == PARTIAL else ()), *extra]


def test_arguments(entry: dict, extra: list[str] = ()) -> list[str]:
    return [
        "test",
        "--config",
        entry["config"],
        "--ckpt_path",
        str(Path(entry["run_dir"], "checkpoints", "last.ckpt")),
        *extra,
    ]


def extra_arguments() -> list[str]:
    """Flags from ``$MIXER_ARGS`` for every fit and test (``MIXER_ARGS='--config configs/trainer/gpu.yaml'``)."""
    text = os.environ.get(EXTRA_ARGS_ENV, "")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise ConfigError(EXTRA_ARGS_ENV, f"cannot read {text!r} ({error})", "quote it as a shell would") from None


def _set_aside(run_dir: Path) -> Path:
    """Move the leftovers of a run killed before its first checkpoint to ``<run>.aborted-N``, holding the
    run's own lock while doing so: a live ``mixer fit`` of it (started by hand, or a point of a sweep
    whose parent died) holds that lock before its first checkpoint too, and is refused, not renamed
    under its feet."""
    lock = RunLock(run_dir, field="sweep point").acquire()
    try:
        n = 1
        while run_dir.with_name(f"{run_dir.name}.aborted-{n}").exists():
            n += 1
        target = run_dir.with_name(f"{run_dir.name}.aborted-{n}")
        run_dir.rename(target)
        (target / LOCK_NAME).unlink(missing_ok=True)  # the lock file moved with the run: drop it there
    finally:
        lock.release()  # closes our descriptor; the (moved) file is gone already
    return target


class PointLock(RunLock):
    """``runs/<point>/.<seed>.point.lock``, held by `run_point` for the whole point (fit and test), beside
    the run directory rather than in it (the directory may be moved aside, or not exist yet): a second
    ``mixer sweep point`` of the same run (two array tasks, a re-run while an orphan trains) is refused
    in one line instead of fitting or testing it twice. `RunLock`'s flock: a killed holder's lock is free."""

    def __init__(self, run_dir: Path, name: str):
        super().__init__(run_dir.parent, field="sweep point")
        self.path = run_dir.parent / f".{run_dir.name}.point.lock"
        self.point, self.point_dir = name, run_dir

    def _refuse(self) -> ResourceError:
        return ResourceError(
            self.field,
            f"{self.point} ({str(self.point_dir)!r}) is being run by {_holder(self.path)} (lock {str(self.path)!r})",
            "wait for it to end (or stop it); one process runs a point at a time",
        )


def run_point(entry: dict, extra: list[str] | None = None, log=print) -> str:
    """Bring one run of a sweep to the end: fit (fresh or resumed) and test, or skip what is done.
    Returns the state it found. Holds the point's `PointLock` throughout."""
    extra = extra_arguments() if extra is None else extra
    run_dir = Path(entry["run_dir"])
    name = entry.get("name") or Path(entry["config"]).stem
    lock = PointLock(run_dir, name).acquire()
    try:
        return _run_point(entry, run_dir, name, extra, log)
    finally:
        lock.release()


def _run_point(entry: dict, run_dir: Path, name: str, extra: list[str], log) -> str:
    state = run_state(run_dir)
    if state == TESTED:
        log(f"sweep: {name}: done ({run_dir / METRICS})")
        return state
    damaged = load_metrics(run_dir)[1]
    if damaged is not None:
        log(f"sweep: {name}: {run_dir / METRICS} is damaged ({damaged}); it is written again")
    if state == FRESH and run_dir.exists():
        log(f"sweep: {name}: no checkpoint in {run_dir} (killed before its first one); moved to {_set_aside(run_dir)}")
    if state == PARTIAL:
        log(f"sweep: {name}: resuming from {run_dir / 'checkpoints' / 'last.ckpt'}")
    elif state == FITTED:
        log(f"sweep: {name}: fitted; testing")
    else:
        log(f"sweep: {name}: fitting")
    arguments = fit_arguments(entry, state, extra)
    if arguments is not None:
        run_mixer(arguments)
    run_mixer(test_arguments(entry, extra))
    return state


# ----------------------------------------------------------------------------------------- emit


def check_output_directory(directory: str, field: str) -> Path:
    """The sweep directory, checked before anything is written: not a file, inside a writable
    directory, and holding nothing of the wrong kind where the sweep writes."""
    require(bool(str(directory).strip()), field, "is empty", "give a directory for the sweep")
    root = Path(directory)
    require(
        not root.exists() or root.is_dir(),
        field,
        f"{directory!r} is a file, not a directory",
        "give a directory for the sweep (it is created if missing)",
    )
    probe = root
    while not probe.exists():
        probe = probe.parent
    require(
        probe.is_dir(), field, f"{str(probe)!r} is a file, so {directory!r} cannot be created", "give a directory path"
    )
    require(
        os.access(probe, os.W_OK | os.X_OK),
        field,
        f"cannot write in {str(probe)!r} (permission denied)",
        "give a directory you can write to",
    )
    for sub in ("configs", "runs", LOGS):
        require(
            not (root / sub).exists() or (root / sub).is_dir(),
            field,
            f"{str(root / sub)!r} is a file",
            "move it away or give another directory",
        )
    for name in (MANIFEST, *SCRIPTS):
        require(
            not (root / name).is_dir(),
            field,
            f"{str(root / name)!r} is a directory",
            "move it away or give another directory",
        )
    return root


def describe(signature: dict) -> str:
    parts = [f"{signature.get('kind') or 'channels'} grid"]
    if signature.get("omega") is not None:
        parts.append(f"Ω = {signature['omega']:,}")
    if signature.get("gamma") is not None:
        parts.append(f"γ = {signature['gamma']:g}")
    if signature.get("width") is not None:
        parts.append(f"m = {signature['width']:,}")
    if signature.get("axes"):
        parts.append("axes " + ", ".join(signature["axes"]))
    return ", ".join(parts)


def _signature_of(manifest: dict) -> dict:
    if "kind" not in manifest:  # manifests written before the kinds existed: channel or Ω-density grids
        runs = manifest.get("runs") or [{}]
        kind = "densities_at_omega" if runs[0].get("C") is None else "channels"
        return {"kind": kind, "omega": manifest.get("omega"), "gamma": manifest.get("gamma"), "width": None, "axes": []}
    return {k: manifest.get(k) for k in ("kind", "omega", "gamma", "width")} | {
        "axes": [a["key"] for a in manifest.get("axes") or []]
    }


def _config_text(header: str, config: dict) -> str:
    return header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def plan(args, directory: str, field: str) -> tuple[dict, dict[Path, str]]:
    """The manifest and every file (path -> text) of the sweep the flags describe, merged with the
    sweep already in `directory`; nothing is written."""
    root = check_output_directory(directory, field)
    base = load_configs(args.config)
    seeds = parse_seeds(args.seeds)
    grid: Grid = build(args, base, list(args.config))
    reference = load_configs(args.cka_reference, "cka_reference") if args.cka_reference else None
    if reference is not None:
        require(
            grid.kind in ("densities_at_width", "densities_at_omega", "base"),
            "cka_reference",
            "the CKA reference is compared with the SW-MLP runs of a density grid (Fig. 2(a))",
            "sweep an SW-MLP config with --densities / --width",
        )
        require(
            isinstance(reference.get("model"), dict),
            "cka_reference",
            "the reference config has no model",
            "give the Mixer's config, e.g. configs/cifar10_fig2_mixer.yaml",
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
        mine, theirs = grid.signature(), _signature_of(earlier)
        require(
            mine == theirs,
            field,
            f"{directory!r} holds a sweep of another grid ({describe(theirs)}; this one: {describe(mine)})",
            "write this one to another directory",
        )
        if earlier.get("cka_reference") and not manifest["cka_reference"]:
            manifest["cka_reference"] = earlier["cka_reference"]
    files: dict[Path, str] = {}
    runs = []
    sources = [(point, base, " + ".join(args.config)) for point in grid.points]
    if reference is not None:
        sources.append((GridPoint(REFERENCE), reference, " + ".join(args.cka_reference)))
    for point, config_base, origin in sources:
        for seed in seeds:
            name = f"{point.id}_seed{seed}"
            logger = {"save_dir": str(root / "runs"), "name": point.id, "version": f"seed{seed}"}
            config = deep_merge(
                deep_merge(config_base, point.overrides),
                {
                    "seed_everything": seed,
                    "trainer": {
                        "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": logger}
                    },
                },
            )
            path = root / "configs" / f"{name}.yaml"
            what = (
                "CKA reference (compared with every SW-MLP run of this seed)"
                if point.id == REFERENCE
                else (f"Ω = {grid.omega:,}, " if grid.omega else "") + point.describe()
            )
            text = _config_text(f"# Sweep point {point.id} (seed {seed}): {what}\n# From: {origin}\n", config)
            run_dir = root / "runs" / point.id / f"seed{seed}"
            if path.is_file() and path.read_text() != text and run_state(run_dir) != FRESH:
                raise ConfigError(
                    field,
                    f"{name} has started ({run_dir}) and this sweep would change its config",
                    "emit to a new directory, or delete that run directory to restart it",
                )
            files[path] = text
            runs.append(
                {
                    "name": name,
                    "point": point.id,
                    "role": REFERENCE if point.id == REFERENCE else "grid",
                    **point.figures(),
                    "seed": seed,
                    "config": str(path),
                    "run_dir": str(run_dir),
                }
            )
    if earlier is not None:  # extend: earlier runs keep their place (and SLURM array index), new ones follow
        new = {r["name"]: r for r in runs}
        merged = [new.pop(r.get("name") or Path(r["config"]).stem, r) for r in earlier["runs"]]
        runs = merged + list(new.values())
    manifest["runs"] = runs
    for name, text in scripts(root, runs).items():
        files[root / name] = text
    return manifest, files


def scripts(root: Path, runs: list[dict]) -> dict[str, str]:
    """run_all.sh (every run in turn, then the report) and slurm_array.sh (one array task per run);
    both call `mixer sweep point`, so a re-run continues: done runs are skipped, killed ones resume."""
    workdir = shlex.quote(os.getcwd())
    names = " ".join(shlex.quote(r.get("name") or Path(r["config"]).stem) for r in runs)
    sweep = shlex.quote(str(root))
    logs = shlex.quote(str(root / LOGS))
    # PARALLEL=N: each point's output to <sweep>/logs/NAME.log (as --parallel does), one line per end here;
    # a failed point still fails the script (its status passes through xargs).
    point_to_log = (
        'log="$0/logs/$1.log"; echo "sweep: $1: started (log: $log)"; '
        'if mixer sweep point "$0" "$1" >> "$log" 2>&1; then echo "sweep: $1: done (log: $log)"; '
        'else status=$?; echo "sweep: $1: failed (exit $status; log: $log)"; exit $status; fi'
    )
    common = f'set -euo pipefail\ncd "${{MIXER_WORKDIR:-{workdir}}}"\nRUNS=({names})\n'
    shell = (
        "#!/usr/bin/env bash\n"
        "# Every run of this sweep in turn: `mixer sweep point` skips a finished run, resumes a killed one from\n"
        "# its own checkpoints/last.ckpt, fits a new one, then tests it. Run it again after a kill: it continues.\n"
        "# Extra flags for every fit and test: MIXER_ARGS='--config configs/trainer/gpu.yaml' bash run_all.sh\n"
        "# PARALLEL=N runs N at a time (one per core of a CPU, or several small models on one GPU), each with\n"
        "# the CPUs split between them unless OMP_NUM_THREADS is set, and its output in logs/NAME.log.\n"
        + common
        + "PARALLEL=${PARALLEL:-1}\n"
        + 'if [ "$PARALLEL" -gt 1 ]; then\n'
        + "  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / PARALLEL > 0 ? $(nproc) / PARALLEL : 1 ))}\n"
        + f"  mkdir -p {logs}\n"
        + f'  printf \'%s\\n\' "${{RUNS[@]}}" | xargs -P "$PARALLEL" -I{{}} sh -c {shlex.quote(point_to_log)} {sweep} {{}}\n'
        + "else\n"
        + f'  for run in "${{RUNS[@]}}"; do\n    mixer sweep point {sweep} "$run"\n  done\n'
        + "fi\n"
        + f"mixer sweep report {sweep}\n"
    )
    slurm = (
        f"#!/usr/bin/env bash\n#SBATCH --job-name=mixer-sweep\n#SBATCH --array=0-{len(runs) - 1}\n"
        "#SBATCH --gres=gpu:1\n#SBATCH --cpus-per-task=8\n#SBATCH --output=%x-%A_%a.out\n"
        "# Submit: sbatch slurm_array.sh; then: mixer sweep report <this directory>. Submit it again after a\n"
        "# pre-emption or a time-out: finished runs are skipped, killed ones resume from their last.ckpt.\n"
        + common
        + f'mixer sweep point {sweep} "${{RUNS[$SLURM_ARRAY_TASK_ID]}}"\n'
    )
    return {"run_all.sh": shell, "slurm_array.sh": slurm}


def _write(path: Path, text: str, field: str) -> None:
    """`text` to `path` atomically (`mixer_lightning.safety.atomic`); run scripts executable."""
    with atomic_write(path, "w", field) as f:
        f.write(text)
        if path.suffix == ".sh":
            os.chmod(f.fileno(), 0o755)


def emit(args, directory: str, field: str) -> list[dict]:
    """Write the sweep's configs, scripts and manifest (only what changed); return its runs."""
    manifest, files = plan(args, directory, field)
    for path, text in files.items():
        if not (path.is_file() and path.read_text() == text):
            _write(path, text, field)
    _write(Path(directory, MANIFEST), json.dumps(manifest, indent=2) + "\n", field)
    return manifest["runs"]
