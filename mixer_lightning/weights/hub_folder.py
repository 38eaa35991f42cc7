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


def read_config(file: Path, field: str) -> dict:
    """A hub folder's config.json as a JSON object; anything else is one line on `field` (it is data, not ours)."""
    try:
        config = json.loads(Path(file).read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(field, f"{file} is not JSON ({error})", FIX) from None
    if not isinstance(config, dict) or not isinstance(config.get("mixer_lightning") or {}, dict):
        raise ConfigError(field, f"{file} is no JSON object of a model's settings", FIX)
    return config


def read_hub_folder(path: Any, field: str = "init_from") -> WeightsFile:
    """The weights of the hub-layout folder (or ``hf-hub:`` repo) `path` in this project's key layout."""
    from safetensors.torch import load_file

    from mixer_lightning.weights.keys import TIMM_NAMES, from_timm_key

    text = str(path)
    if text.startswith("hf-hub:"):
        config = read_config(hub_file(text, "config.json", field), field)
        if "mixer_lightning" not in config:
            from mixer_lightning.weights.timm import read_hub_weights

            return read_hub_weights(text, field)
        weights_file = hub_file(text, "model.safetensors", field)
    else:
        config_file, weights_file = Path(text) / "config.json", Path(text) / "model.safetensors"
        if not (config_file.is_file() and weights_file.is_file()):
            raise ConfigError(field, f"{text} is a folder without config.json and model.safetensors", FIX)
        config = read_config(config_file, field)
    try:
        state_dict = load_file(str(weights_file))
    except Exception as error:  # safetensors' own (a header that lies, a cut file): the file is data
        raise ConfigError(
            field, f"{weights_file}: {str(error).splitlines()[0] if str(error) else type(error).__name__}", FIX
        ) from None
    ours = config.get("mixer_lightning") or {}
    timm_names = any(TIMM_NAMES.search(k) for k in state_dict)
    if timm_names:
        state_dict = {from_timm_key(k): v for k, v in state_dict.items()}
    elif not ours:
        raise ConfigError(field, f"{text}: architecture {config.get('architecture')!r} is no MLP-Mixer of timm's", FIX)
    hyper_parameters = ours.get("hyper_parameters") or {}
    if not isinstance(hyper_parameters, dict):
        raise ConfigError(field, f"{text}: config.json's hyper_parameters are no mapping", FIX)
    architecture = {k: v for k, v in hyper_parameters.items() if k != "init_from"}
    if not ours:  # a timm folder: timm's Mixer has the exact GELU and LayerNorm ε 1e-6
        architecture = {"act": "gelu", "norm_eps": 1e-6}
    cfg = config.get("pretrained_cfg") or {}
    preprocessing = {k: cfg[k] for k in PREPROCESSING_KEYS if cfg.get(k) is not None}
    fmt = "timm" if timm_names else "mixer"
    return WeightsFile(text, fmt, state_dict, architecture, ours.get("class_path"), preprocessing)
