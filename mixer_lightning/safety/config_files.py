"""Reading YAML configs (sweeps, analysis commands, and the files `mixer fit` is given, checked first):
several files compose as repeated ``--config`` do, later files over earlier ones, recursively for
mappings; a class path outside the trusted packages is refused before import (`mixer_lightning.safety.trust`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.trust import check_class_paths


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, recursively for mappings (what composing ``--config`` files does)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_configs(paths: list[str] | str, field: str = "config") -> dict:
    """The YAML files at `paths` merged in order; a missing, unreadable or non-mapping file is a
    `ConfigError` naming `field`."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    require(bool(paths), field, "no config given", "give --config FILE.yaml")
    config: dict = {}
    for path in paths:
        require(Path(path).is_file(), field, f"no such file {path!r}", "give the path of a YAML config")
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(
                field,
                f"{path!r} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})",
                "save it as UTF-8",
            ) from None
        except OSError as error:
            raise ConfigError(field, f"cannot read {path!r} ({error.strerror})") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(field, f"{path!r} is not valid YAML ({problem}{where})", "fix the file") from None
        require(
            loaded is not None,
            field,
            f"{path!r} is empty (no settings)",
            "give a YAML mapping, e.g. a run's config.yaml",
        )
        require(
            isinstance(loaded, dict),
            field,
            f"{path!r} is not a YAML mapping (it holds a {type(loaded).__name__})",
            "give a mapping of keys such as trainer:, model:, data:",
        )
        check_class_paths(loaded, field, repr(str(path)))  # before anything imports the classes it names
        config = deep_merge(config, loaded)
    return config
