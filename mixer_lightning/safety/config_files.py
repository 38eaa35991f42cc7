"""Reading YAML configs outside LightningCLI (sweeps, analysis commands): files compose as repeated
``--config`` do, later over earlier, recursively for mappings; a class outside the trusted packages is
refused before anything imports it (`mixer_lightning.safety.trust`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mixer_lightning.errors import ConfigError
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


def load_configs(paths: list[str] | str, field: str = "config", imported: bool = True) -> dict:
    """The YAML mappings at `paths` merged in order; a missing or malformed file is a `ConfigError` on `field`.
    `imported`: what they name will be imported (built, run), so a class outside the trusted packages is refused
    now, naming the file; a caller that only reads them (a run's figures) imports nothing and needs no trust."""
    config: dict = {}
    for path in [paths] if isinstance(paths, str) else paths:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            problem = " ".join(str(error).split())[:200]
            raise ConfigError(
                field, f"cannot read {str(path)!r} as a YAML config ({problem})", "fix the file"
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError(field, f"{str(path)!r} is not a YAML mapping", "give a config of trainer:, model:, data:")
        if imported:
            check_class_paths(loaded, field, repr(str(path)))
        config = deep_merge(config, loaded)
    return config
