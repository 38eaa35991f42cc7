"""A sweep's manifest (``sweep.json``) read and checked: every run an object with a name, a seed, a
config inside the sweep's ``configs/`` and a run directory inside its ``runs/`` (symlinks followed),
the figures numbers; a damaged file is one line naming it (never a KeyError or RecursionError), and a
JSON file of ours is read with a size bound (`read_json`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from mixer_lightning.errors import ConfigError, require

MANIFEST = "sweep.json"
# Result and manifest files are small (a manifest of 10,000 runs is ~4 MB); more is not one of ours.
METRICS_LIMIT, MANIFEST_LIMIT = 1 << 20, 64 << 20


def read_json(path: Path, limit: int):
    """The JSON value in `path`; ValueError naming what is wrong (too large, not UTF-8, not JSON, too
    deeply nested: Python's parser recurses, so 100,000 ``[`` would otherwise end in a RecursionError)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes")
    if not data.strip():
        raise ValueError("empty")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


FIGURE_KEYS = ("C", "S", "P", "m", "p", "gamma")  # numbers (or null) the report sorts and plots


def _damaged(field: str, path: Path, problem: str) -> ConfigError:
    return ConfigError(
        field,
        f"{str(path)!r} is damaged ({problem})",
        "emit the sweep again into a new directory (its configs and runs are kept where they are)",
    )


def _inside(path: str, root: Path) -> bool:
    """Whether `path` (relative to the working directory, as the manifest writes it) lies strictly
    inside `root` once symbolic links are followed."""
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return False
    return resolved != root and resolved.is_relative_to(root)


def _check_entry(index: int, entry, path: Path, field: str, runs_root: Path, configs_root: Path) -> dict:
    """One run of a manifest, checked as `read_manifest` says; returns it with its name filled in."""
    if not isinstance(entry, dict):
        raise _damaged(field, path, f"run {index} is a JSON {type(entry).__name__}, not an object")
    given = entry.get("name")
    label = f"run {index} ({given!r})" if isinstance(given, str) and given else f"run {index}"
    for key in ("config", "run_dir"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            what = "missing" if value is None else f"{value!r}, not a path"
            raise _damaged(field, path, f"{label}: {key} is {what}")
    name = given or Path(entry["config"]).stem  # manifests before names: the config's file name
    label = f"run {index} ({name!r})" if isinstance(name, str) else f"run {index}"
    if not isinstance(name, str) or not name.strip() or "/" in name:
        raise _damaged(field, path, f"{label}: name is not a run name")
    seed = entry.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise _damaged(field, path, f"{label}: seed is {seed!r}, not an integer")
    for key in ("point", "role", "width_point"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise _damaged(field, path, f"{label}: {key} is {entry[key]!r}, not a string")
    for key in FIGURE_KEYS:
        value = entry.get(key)
        if value is not None and (not _number(value) or not math.isfinite(value)):
            raise _damaged(field, path, f"{label}: {key} is {value!r}, not a number")
    if entry.get("axes") is not None and not isinstance(entry["axes"], dict):
        raise _damaged(field, path, f"{label}: axes is not an object")
    # The run directory is renamed, written and reported from, and the config read and trained: both must
    # be the sweep's own (a hand-edited "/home/me/thesis" or "." is never moved aside or trained into).
    for key, root in (("run_dir", runs_root), ("config", configs_root)):
        if not _inside(entry[key], root):
            raise ConfigError(
                field,
                f"{str(path)!r}: {label}: {key} {entry[key]!r} is not inside {str(root)!r}",
                "a sweep writes only below its own directory: run this command from the directory the sweep "
                "was emitted in (run_all.sh does: cd $MIXER_WORKDIR), or emit the sweep again",
            )
    return {**entry, "name": name}


def read_manifest(directory: str | Path, field: str = "directories") -> dict:
    """The manifest of a sweep directory, checked once for every command that reads it (a one-line
    error naming the file and the run if there is none or it is damaged): UTF-8 JSON, an object with a
    list of runs; each run an object with a name, a seed (an integer), ``config`` inside the sweep's
    ``configs/`` and ``run_dir`` inside its ``runs/`` (after following symbolic links; the paths are
    relative to the working directory the sweep was emitted from), names and run directories unique,
    the figures numbers. Returns it with every run's name filled in."""
    path = Path(directory, MANIFEST)
    require(
        path.is_file(),
        field,
        f"{str(directory)!r} is not a sweep directory (no {MANIFEST})",
        "give a directory written by `mixer sweep --emit/--run`",
    )
    try:
        manifest = read_json(path, MANIFEST_LIMIT)
    except ValueError as error:
        raise _damaged(field, path, str(error)) from None
    except OSError as error:
        raise ConfigError(field, f"cannot read {str(path)!r} ({error.strerror or error})", "check the file") from None
    require(
        isinstance(manifest, dict) and isinstance(manifest.get("runs"), list),
        field,
        f"{str(path)!r} is not a sweep manifest",
        "emit the sweep again into a new directory",
    )
    for key in ("omega", "gamma", "width"):
        value = manifest.get(key)
        if value is not None and (not _number(value) or not math.isfinite(value)):
            raise _damaged(field, path, f"{key} is {value!r}, not a number")
    if manifest.get("kind") is not None and not isinstance(manifest["kind"], str):
        raise _damaged(field, path, "kind is not a string")
    axes = manifest.get("axes")
    if axes is not None and not (
        isinstance(axes, list)
        and all(
            isinstance(a, dict)
            and isinstance(a.get("name"), str)
            and isinstance(a.get("key"), str)
            and isinstance(a.get("values"), list)
            for a in axes
        )
    ):
        raise _damaged(field, path, "axes is not a list of {key, name, values}")
    reference = manifest.get("cka_reference")
    if reference is not None and not (isinstance(reference, list) and all(isinstance(r, str) for r in reference)):
        raise _damaged(field, path, "cka_reference is not a list of config paths")
    root = Path(directory).resolve()
    runs_root, configs_root = (root / "runs").resolve(), (root / "configs").resolve()  # runs/ may link to scratch
    runs, names, run_dirs = [], set(), set()
    for index, entry in enumerate(manifest["runs"]):
        checked = _check_entry(index, entry, path, field, runs_root, configs_root)
        where = Path(checked["run_dir"]).resolve()
        if checked["name"] in names or where in run_dirs:
            raise _damaged(field, path, f"run {index} ({checked['name']!r}) repeats the name or run_dir of another run")
        names.add(checked["name"])
        run_dirs.add(where)
        runs.append(checked)
    return {**manifest, "runs": runs}
