"""What a sweep directory holds, read by every sweep command: its manifest (``sweep.json``), each run's
state as its files show it, its test result, and whether a process is running it (the point's lock)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from filelock import FileLock, Timeout

from mixer_lightning.errors import ConfigError, require

MANIFEST = "sweep.json"
METRICS = "test_metrics.json"
REFERENCE = "reference"  # the point id of a sweep's CKA reference runs (Fig. 2(a): the Mixer)
TESTED, FITTED, PARTIAL, FRESH = "tested", "fitted", "partial", "fresh"


def load_metrics(run_dir: str | Path) -> tuple[dict | None, str | None]:
    """A run's ``test_metrics.json``: (metrics, None); (None, None) when there is none; (None, what is
    wrong) when it holds no ``test/acc1`` in [0, 1]: a damaged result is tested again, never reported."""
    path = Path(run_dir, METRICS)
    if not path.is_file():
        return None, None
    try:
        metrics = json.loads(path.read_bytes())
    except ValueError as error:
        return None, f"not JSON: {error}"
    acc = metrics.get("test/acc1") if isinstance(metrics, dict) else None
    if not isinstance(acc, (int, float)) or isinstance(acc, bool) or not (math.isfinite(acc) and 0 <= acc <= 1):
        return None, f"test/acc1 is {acc!r}, not a number in [0, 1]"
    return metrics, None


def run_state(run_dir: str | Path) -> str:
    """``tested`` (a test result), ``fitted`` (``fit_summary.json``: the test is next), ``partial`` (a
    ``last.ckpt``: it resumes from it) or ``fresh``."""
    run_dir = Path(run_dir)
    if load_metrics(run_dir)[0] is not None:
        return TESTED
    if (run_dir / "fit_summary.json").is_file():
        return FITTED
    return PARTIAL if (run_dir / "checkpoints" / "last.ckpt").is_file() else FRESH


def point_lock(run_dir: str | Path, timeout: float = 0) -> FileLock:
    """``runs/<point>/.<seed>.point.lock``: held by the process that runs the point (fit and test), beside
    the run directory, which may be moved aside or not exist yet. A flock: a killed holder's lock is free."""
    run_dir = Path(run_dir)
    return FileLock(run_dir.parent / f".{run_dir.name}.point.lock", timeout=timeout)


def is_running(run_dir: str | Path) -> bool:
    """Whether a live process holds the point's lock (a probe: taken and let go at once when free)."""
    lock = point_lock(run_dir)
    if not Path(lock.lock_file).is_file():
        return False
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


def _inside(path: str, root: Path) -> bool:
    resolved = Path(path).resolve()
    return resolved != root and resolved.is_relative_to(root)


def read_manifest(directory: str | Path, field: str = "directories") -> dict:
    """The manifest of a sweep directory, each run with its name. A run's ``config`` and ``run_dir`` must
    lie inside the sweep's ``configs/`` and ``runs/`` (the paths are relative to the directory the sweep
    was emitted from): a run directory is moved aside and written, so a hand-edited one never names a
    folder of the user's."""
    path = Path(directory, MANIFEST)
    require(path.is_file(), field, f"{str(directory)!r} is not a sweep directory (no {MANIFEST})")
    root = Path(directory).resolve()
    runs = []
    try:
        manifest = json.loads(path.read_bytes())
        for entry in manifest["runs"]:
            name, seed = entry.get("name") or Path(entry["config"]).stem, int(entry["seed"])
            for key, folder in (("run_dir", "runs"), ("config", "configs")):
                require(
                    _inside(entry[key], (root / folder).resolve()),
                    field,
                    f"{str(path)!r}: run {name!r}: {key} {entry[key]!r} is not inside {str(root / folder)!r}",
                    "run this from the directory the sweep was emitted in (run_all.sh does), or emit it again",
                )
            runs.append({**entry, "name": name, "seed": seed})
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ConfigError(field, f"{str(path)!r} is damaged ({type(error).__name__}: {error})") from None
    return {**manifest, "runs": runs}
