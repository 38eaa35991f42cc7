"""Weights in a Hugging Face Hub repository's layout (``config.json`` + ``model.safetensors``), read
from a local folder or from an ``hf-hub:ORG/NAME`` repo whose config names a mixer-lightning model.

`mixer push` writes such a folder: a plain MLP-Mixer of timm's shapes as timm's ``mixer_*`` (timm's
parameter names), any other family with ``architecture: mixer_lightning:<family>`` and this
project's names; its ``config.json`` carries the checkpoint's class and hyper-parameters under
``mixer_lightning``, so the folder rebuilds the same model (`WeightsFile.architecture`,
`WeightsFile.class_path`). A folder timm wrote (``save_for_hf``) without that section is read as
timm weights, its architecture then read from the shapes. ``hf-hub:`` repos of timm's own models
keep going through timm (`mixer_lightning.weights.timm.read_hub_weights`).

Nothing here runs code from the files: ``config.json`` is read with ``json``, the weights with
safetensors, and the class a config names is only ever looked up among the registered families.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mixer_lightning.errors import ConfigError
from mixer_lightning.weights.file import WeightsFile

ARCHITECTURE_PREFIX = "mixer_lightning:"
PREPROCESSING_KEYS = ("mean", "std", "crop_pct", "interpolation", "input_size")


def _hub_config(name: str) -> dict[str, Any] | None:
    """The config.json of the hub repo `name` (``hf-hub:ORG/NAME``) from the hub or its cache, or None
    when it cannot be had (timm's reader then says why in one line)."""
    try:
        from huggingface_hub import hf_hub_download

        repo, _, revision = name.removeprefix("hf-hub:").partition("@")
        return json.loads(Path(hf_hub_download(repo, "config.json", revision=revision or None)).read_text())
    except Exception:  # offline without a cache, no such repo, no huggingface_hub
        return None


def is_hub_folder(path: Any) -> bool:
    """Whether `path` is a folder in the hub layout, or an ``hf-hub:`` repo that names a mixer-lightning
    model (which timm cannot build)."""
    text = str(path)
    if text.startswith("hf-hub:"):
        config = _hub_config(text)
        return isinstance(config, dict) and "mixer_lightning" in config
    return Path(text).is_dir() and (Path(text) / "config.json").is_file()


def folder_pretrained_cfg(path: Any) -> dict[str, Any] | None:
    """The ``pretrained_cfg`` (with the config's ``num_classes`` and ``label_names``) of the local
    hub-layout folder `path`, or None when `path` is none or its config.json does not read."""
    if not is_hub_folder(path) or str(path).startswith("hf-hub:"):
        return None
    try:
        config = json.loads((Path(str(path)) / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    cfg = config.get("pretrained_cfg") if isinstance(config, dict) else None
    if not isinstance(cfg, dict):
        return None
    return {**{k: config[k] for k in ("num_classes", "label_names") if k in config}, **cfg}


def read_hub_folder(path: Any, field: str = "init_from") -> WeightsFile:
    """The weights of the hub-layout folder (or ``hf-hub:`` repo) `path` in this project's key layout."""
    from safetensors.torch import load_file

    from mixer_lightning.weights.keys import TIMM_NAMES, from_timm_key

    text = str(path)
    fix = "give a folder `mixer push` (or timm's save_for_hf) wrote: config.json and model.safetensors"
    if text.startswith("hf-hub:"):
        from huggingface_hub import hf_hub_download

        repo, _, revision = text.removeprefix("hf-hub:").partition("@")
        try:
            config_file = Path(hf_hub_download(repo, "config.json", revision=revision or None))
            weights_file = Path(hf_hub_download(repo, "model.safetensors", revision=revision or None))
        except Exception as error:  # huggingface_hub: not cached offline, no such file, connection errors
            cause = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
            raise ConfigError(field, f"cannot fetch {text!r} from the hub or its cache ({cause})", fix) from None
    else:
        config_file, weights_file = Path(text) / "config.json", Path(text) / "model.safetensors"
        if not weights_file.is_file():
            raise ConfigError(field, f"{text} has a config.json but no model.safetensors", fix)
    try:
        config = json.loads(config_file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError(field, f"{config_file} is not a JSON file ({error})", fix) from None
    if not isinstance(config, dict):
        raise ConfigError(field, f"{config_file} holds a {type(config).__name__}, not a JSON object", fix)
    try:
        state_dict = load_file(str(weights_file))
    except Exception as error:  # safetensors raises its own SafetensorError
        raise ConfigError(field, f"{weights_file} is not a safetensors file ({error})", fix) from None
    ours = config.get("mixer_lightning") if isinstance(config.get("mixer_lightning"), dict) else {}
    timm_names = any(TIMM_NAMES.search(k) for k in state_dict)
    if timm_names:
        state_dict = {from_timm_key(k, field, text): v for k, v in state_dict.items()}
    elif not ours:
        raise ConfigError(
            field, f"{text}: architecture {config.get('architecture')!r} is not an MLP-Mixer of timm's", fix
        )
    architecture = dict(ours.get("hyper_parameters") or {})
    architecture.pop("init_from", None)  # the weights are here
    if not ours:  # a timm folder: the activation and LayerNorm ε of timm's Mixer (exact GELU, 1e-6)
        architecture = {"act": "gelu", "norm_eps": 1e-6}
    cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    preprocessing = {k: cfg[k] for k in PREPROCESSING_KEYS if cfg.get(k) is not None}
    return WeightsFile(
        text, "timm" if timm_names else "mixer", state_dict, architecture, ours.get("class_path"), preprocessing
    )
