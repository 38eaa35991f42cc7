"""Weights in a Hugging Face Hub repository's layout (``config.json`` + ``model.safetensors``), from a
local folder or an ``hf-hub:ORG/NAME`` repo, as `mixer push` (or timm's ``save_for_hf``) writes them.

A config with a ``mixer_lightning`` section (`mixer push`) carries the checkpoint's hyper-parameters,
which rebuild the same network; a timm folder without it is read as timm weights. An ``hf-hub:`` repo
of timm's own goes through timm (`mixer_lightning.weights.timm.read_hub_weights`). Nothing here runs
code from the files: ``json`` and safetensors only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mixer_lightning.errors import ConfigError
from mixer_lightning.weights.file import WeightsFile

PREPROCESSING_KEYS = ("mean", "std", "crop_pct", "interpolation", "input_size")
FIX = "give a folder `mixer push` (or timm's save_for_hf) wrote: config.json and model.safetensors"


def hub_file(name: str, filename: str, field: str) -> Path:
    """`filename` of the hub repo `name` (``hf-hub:ORG/NAME[@REVISION]``), from huggingface_hub's cache or
    the hub (HF_HUB_OFFLINE=1: the cache only)."""
    from huggingface_hub import hf_hub_download

    repo, _, revision = name.removeprefix("hf-hub:").partition("@")
    try:
        return Path(hf_hub_download(repo, filename, revision=revision or None))
    except Exception as error:  # huggingface_hub: not cached offline, no such repo or file, no network
        cause = (str(error).splitlines() or [""])[0][:200]
        fix = "download it once where the hub is reachable (then HF_HUB_OFFLINE=1 reads the cache)"
        raise ConfigError(
            field, f"cannot fetch {filename} of {name!r} ({type(error).__name__}: {cause})", fix
        ) from None


def read_hub_folder(path: Any, field: str = "init_from") -> WeightsFile:
    """The weights of the hub-layout folder (or ``hf-hub:`` repo) `path` in this project's key layout."""
    from safetensors.torch import load_file

    from mixer_lightning.weights.keys import TIMM_NAMES, from_timm_key

    text = str(path)
    if text.startswith("hf-hub:"):
        config = json.loads(hub_file(text, "config.json", field).read_text())
        if "mixer_lightning" not in config:
            from mixer_lightning.weights.timm import read_hub_weights

            return read_hub_weights(text, field)
        weights_file = hub_file(text, "model.safetensors", field)
    else:
        config_file, weights_file = Path(text) / "config.json", Path(text) / "model.safetensors"
        if not (config_file.is_file() and weights_file.is_file()):
            raise ConfigError(field, f"{text} is a folder without config.json and model.safetensors", FIX)
        config = json.loads(config_file.read_text())
    state_dict = load_file(str(weights_file))
    ours = config.get("mixer_lightning") or {}
    timm_names = any(TIMM_NAMES.search(k) for k in state_dict)
    if timm_names:
        state_dict = {from_timm_key(k): v for k, v in state_dict.items()}
    elif not ours:
        raise ConfigError(field, f"{text}: architecture {config.get('architecture')!r} is no MLP-Mixer of timm's", FIX)
    architecture = {k: v for k, v in (ours.get("hyper_parameters") or {}).items() if k != "init_from"}
    if not ours:  # a timm folder: timm's Mixer has the exact GELU and LayerNorm ε 1e-6
        architecture = {"act": "gelu", "norm_eps": 1e-6}
    cfg = config.get("pretrained_cfg") or {}
    preprocessing = {k: cfg[k] for k in PREPROCESSING_KEYS if cfg.get(k) is not None}
    fmt = "timm" if timm_names else "mixer"
    return WeightsFile(text, fmt, state_dict, architecture, ours.get("class_path"), preprocessing)
