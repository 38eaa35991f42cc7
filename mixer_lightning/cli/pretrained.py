"""The data's defaults from pretrained weights: ``model.init_from`` names hub weights, and their
preprocessing (timm's ``pretrained_cfg``: mean, std, interpolation, crop_pct) becomes the data's
defaults where the user's config files and flags do not set them (`mixer_lightning.weights.preprocessing`)."""

from __future__ import annotations

import re
import sys
from typing import Any

from mixer_lightning.cli.rundirs import first_process
from mixer_lightning.safety.config_files import load_configs
from mixer_lightning.weights.preprocessing import apply_defaults, data_defaults, hub_preprocessing


def explicit_data_arguments(config_files: list[str], args: list[str]) -> set[str]:
    """The data module's arguments that the config files (``data.init_args``) or the flags
    (``--data.X``, ``--data.init_args.X``) set."""
    explicit: set[str] = set()
    for name in config_files:
        data = (load_configs([name], "config") or {}).get("data")
        if isinstance(data, dict):
            explicit |= {k for k in (data.get("init_args") or {})} | {
                k for k in data if k not in ("class_path", "init_args")
            }
    for arg in args:
        found = re.match(r"--data\.(?:init_args\.)?(\w+)", arg)
        if found:
            explicit.add(found.group(1))
    return explicit


def apply_pretrained_defaults(config: Any, explicit: set[str]) -> None:
    """The preprocessing of the hub weights ``model.init_from`` names as the data's defaults, except for
    the arguments in `explicit`; a config that sets one differently keeps it, with one warning line."""
    model, data = config.get("model"), config.get("data")
    init_from = model.get("init_from") if model is not None else None  # temporary (issue 44, H3): model.init_from
    data_args = data.get("init_args") if data is not None else None
    if not init_from or data_args is None:
        return
    defaults = {k: v for k, v in data_defaults(hub_preprocessing(str(init_from))).items() if k in data_args}
    applied, warning = apply_defaults(data_args, defaults, explicit, str(init_from))
    if not first_process():
        return
    if applied:
        shown = ", ".join(f"{k}={list(v) if isinstance(v, (list, tuple)) else v}" for k, v in applied.items())
        print(f"data   {shown} (the preprocessing of {init_from})", flush=True)
    if warning:
        print(f"mixer: warning: {warning}", file=sys.stderr, flush=True)
