"""The preprocessing pretrained weights were trained with, as the data's defaults: timm's
``pretrained_cfg`` of hub weights (Google's Mixer weights expect mean = std = 0.5, bicubic resizing and
a 0.875 centre crop, not ImageNet's statistics) becomes the data module's ``mean``, ``std``,
``interpolation`` and ``eval_crop_pct`` where the config does not set them (`data_defaults`,
`apply_defaults`: a config that sets one differently keeps it, with one warning line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mixer_lightning.weights.file import HUB_PREFIXES, WeightsFile

PRETRAINED_KEYS = ("mean", "std", "crop_pct", "crop_mode", "interpolation", "input_size")
DATA_ARGUMENTS = {"mean": "mean", "std": "std", "interpolation": "interpolation", "crop_pct": "eval_crop_pct"}


def hub_preprocessing(name: str) -> dict[str, Any]:
    """The ``pretrained_cfg`` preprocessing of hub weights `name` (timm's registry for ``timm:``, the
    repo's config.json for ``hf-hub:``) or of a local hub-layout folder, read without the weights; empty
    for a file, or when it cannot be read (reading the weights then says why in one line)."""
    if not isinstance(name, str):
        return {}
    if not name.startswith(HUB_PREFIXES):  # a folder in the hub layout (`mixer push`'s), or a file
        config_file = Path(name) / "config.json"
        if not config_file.is_file():
            return {}
        try:
            config = json.loads(config_file.read_text())
            cfg = {**{k: config[k] for k in ("num_classes", "label_names") if k in config}, **config["pretrained_cfg"]}
        except (ValueError, UnicodeDecodeError, TypeError, KeyError, AttributeError):
            return {}  # reading the weights says why in one line (`hub_folder.read_config`)
        return pretrained_preprocessing(cfg)
    from timm.models import get_pretrained_cfg, load_model_config_from_hf

    try:
        if name.startswith("timm:"):
            cfg: Any = get_pretrained_cfg(name.removeprefix("timm:"), allow_unregistered=False).to_dict()
        else:
            cfg = load_model_config_from_hf(name.removeprefix("hf-hub:"))[0]
    except Exception:  # an unknown name; not in the cache offline; no network
        return {}
    return pretrained_preprocessing(cfg)


def pretrained_preprocessing(cfg: dict[str, Any]) -> dict[str, Any]:
    """The preprocessing keys of a timm ``pretrained_cfg`` (`PRETRAINED_KEYS`, tuples as lists), and
    ``label_names``, the name of each class, where the config gives them: timm's save_for_hf writes
    ``label_names`` (a list, or {index: name}) and ``label_descriptions`` ({name: description})."""
    out = {key: list(v) if isinstance(v := cfg.get(key), tuple) else v for key in PRETRAINED_KEYS}
    out = {key: value for key, value in out.items() if value is not None}
    labels, descriptions, count = cfg.get("label_names"), cfg.get("label_descriptions") or {}, cfg.get("num_classes")
    if isinstance(labels, dict) and isinstance(count, int):
        labels = [labels.get(i, labels.get(str(i))) for i in range(count)]
    if isinstance(labels, (list, tuple)) and len(labels) == count and None not in labels:
        out["label_names"] = [str(descriptions.get(label, label)) for label in labels]
    return out


def data_defaults(preprocessing: dict[str, Any]) -> dict[str, Any]:
    """The data module's arguments that `preprocessing` implies."""
    cast = {"mean": lambda v: [float(x) for x in v], "std": lambda v: [float(x) for x in v], "crop_pct": float}
    return {
        argument: cast.get(key, lambda v: v)(preprocessing[key])
        for key, argument in DATA_ARGUMENTS.items()
        if preprocessing.get(key) is not None
    }


# timm's crop_mode -> the data module's eval_crop (Mixer supplementary C; `data.transforms.TIMM_CROP_MODE`).
EVAL_CROPS = {"center": "resmall_crop", "squash": "resize_crop"}
# Google's Mixer weights (the official JAX .npz): timm's pretrained_cfg of them (mixer_b16_224.goog_in21k_ft_in1k).
GOOGLE_MIXER_PREPROCESSING = {"mean": [0.5] * 3, "std": [0.5] * 3, "interpolation": "bicubic", "crop_pct": 0.875}


def imagenet_class_names(num_classes: int) -> list[str] | None:
    """The names of ImageNet's classes for a head of `num_classes` (1000: ImageNet-1k, 21,843 or 11,821:
    ImageNet-21k and its winter-21 subset), as timm's ``inference.py`` shows them; None otherwise."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset({"num_classes": num_classes})
    if subset is None:
        return None
    names = ImageNetInfo(subset).label_descriptions()
    return [str(name) for name in names] if len(names) == num_classes else None


def converted_data_facts(
    weights: WeightsFile, num_classes: int, image_size: int, in_chans: int
) -> dict[str, Any] | None:
    """The ``data`` entry of a checkpoint ``mixer convert`` writes from `weights` (the keys of
    `mixer_lightning.data.predict.FACT_KEYS`): a mixer-lightning checkpoint's own; for hub weights,
    their ``pretrained_cfg``; for an official JAX file with ImageNet's classes, Google's Mixer
    preprocessing. None where the weights say nothing of their data (a plain state dict)."""
    if weights.data:
        return dict(weights.data)
    if weights.preprocessing:
        preprocessing, dataset = weights.preprocessing, weights.path
    elif weights.format == "jax" and imagenet_class_names(num_classes) is not None:
        preprocessing, dataset = GOOGLE_MIXER_PREPROCESSING, "imagenet"
    else:
        return None
    defaults = data_defaults(preprocessing)
    names = preprocessing.get("label_names") or imagenet_class_names(num_classes)
    interpolation = defaults.get("interpolation", "bicubic")
    return {
        "dataset": dataset,
        "num_classes": num_classes,
        "class_names": list(names) if names and len(names) == num_classes else [str(i) for i in range(num_classes)],
        "image_size": image_size,
        "in_chans": in_chans,
        "mean": defaults.get("mean", [0.5] * in_chans),
        "std": defaults.get("std", [0.5] * in_chans),
        "eval_crop": EVAL_CROPS.get(preprocessing.get("crop_mode") or "center", "resmall_crop"),
        "eval_crop_pct": defaults.get("eval_crop_pct", 0.875),
        "interpolation": interpolation,  # the caller maps one the data module lacks (convert: to bicubic)
        "input_permutation": "none",
    }


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    try:
        return np.shape(a) == np.shape(b) and bool(np.allclose(a, b, rtol=1e-6, atol=1e-6))
    except TypeError:  # strings (the interpolation)
        return a == b


def apply_defaults(
    init_args: Any, defaults: dict[str, Any], explicit: set[str], source: str
) -> tuple[dict, str | None]:
    """Set each of `defaults` in the data module's `init_args` unless the config sets it (`explicit`):
    what was set, and one warning line naming both values where the config's differs."""
    applied, conflicts = {}, []
    for key, value in defaults.items():
        current = init_args.get(key) if hasattr(init_args, "get") else getattr(init_args, key, None)
        if key in explicit and current is not None:
            if not _same(current, value):
                conflicts.append(f"data.{key} {_show(current)} (config) vs {_show(value)} ({source})")
            continue
        init_args[key] = tuple(value) if isinstance(value, list) else value
        applied[key] = value
    if not conflicts:
        return applied, None
    return (
        applied,
        f"the config's preprocessing differs from the pretrained weights': {'; '.join(conflicts)}; the config's is used",
    )


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)
