"""The preprocessing that pretrained weights were trained with, as the data's defaults.

Weights named on a hub (``model.init_from: timm:mixer_b16_224.goog_in21k_ft_in1k`` or
``hf-hub:ORG/REPO``) come with timm's ``pretrained_cfg``: Google's Mixer weights expect inputs
normalised with mean = std = 0.5, bicubic resizing and a 0.875 centre crop, not ImageNet's statistics.
`data_defaults` turns it into the data module's arguments (``mean``, ``std``, ``interpolation``,
``eval_crop_pct``), which the ``mixer`` command applies where the config does not set them; a config
that sets one differently keeps its value, with one warning line naming both (`apply_defaults`).

The ``pretrained_cfg`` is read without the weights (timm's registry for ``timm:`` names; the repo's
``config.json`` from the hub cache for ``hf-hub:``), the same one `mixer_lightning.weights.timm.
read_hub_weights` records as ``WeightsFile.preprocessing``.
"""

from __future__ import annotations

from typing import Any

from mixer_lightning.weights.file import HUB_PREFIXES, WeightsFile

# What of timm's pretrained_cfg is preprocessing.
PRETRAINED_KEYS = ("mean", "std", "crop_pct", "crop_mode", "interpolation", "input_size")
# timm's pretrained_cfg key -> the data module's argument.
DATA_ARGUMENTS = {"mean": "mean", "std": "std", "interpolation": "interpolation", "crop_pct": "eval_crop_pct"}


def hub_preprocessing(name: str) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` preprocessing (mean, std, crop_pct, interpolation, input_size) of the
    hub weights `name`, or of the ``config.json`` of a local folder in the hub layout (`mixer push`'s);
    empty for a file, or when the config cannot be read (the model then says why in one line when it
    reads the weights)."""
    if not isinstance(name, str):
        return {}
    if not name.startswith(HUB_PREFIXES):
        from mixer_lightning.weights.hub_folder import folder_pretrained_cfg

        cfg = folder_pretrained_cfg(name)
        return pretrained_preprocessing(cfg) if cfg else {}
    if name.startswith("hf-hub:"):
        from mixer_lightning.hub import offline_or_reachable

        offline_or_reachable()  # no network: the cache only (not a minute of retries)
    try:
        if name.startswith("timm:"):
            from timm.models import get_pretrained_cfg

            cfg: Any = get_pretrained_cfg(name.removeprefix("timm:"), allow_unregistered=False)
        else:
            from timm.models._hub import load_model_config_from_hf

            cfg = load_model_config_from_hf(name.removeprefix("hf-hub:"))[0]
    except Exception:  # an unknown name, no network and no cache: the weights' reader says so
        return {}
    return pretrained_preprocessing(cfg if isinstance(cfg, dict) else cfg.to_dict())


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
    defaults = {}
    for key, argument in DATA_ARGUMENTS.items():
        value = preprocessing.get(key)
        if value is None:
            continue
        if key in ("mean", "std"):
            value = [float(v) for v in value]
        elif key == "crop_pct":
            value = float(value)
        defaults[argument] = value
    return defaults


# timm's crop_mode -> the data module's eval_crop (Mixer supplementary C; `data.transforms.TIMM_CROP_MODE`).
EVAL_CROPS = {"center": "resmall_crop", "squash": "resize_crop"}
# Google's MLP-Mixer weights (the official JAX .npz files): timm's pretrained_cfg of the same weights
# (``mixer_b16_224.goog_in21k_ft_in1k``), with which timm measures their ImageNet accuracy.
GOOGLE_MIXER_PREPROCESSING = {
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "interpolation": "bicubic",
    "crop_pct": 0.875,
    "crop_mode": "center",
}


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
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))
    return a == b


def apply_defaults(
    init_args: Any, defaults: dict[str, Any], explicit: set[str], source: str
) -> tuple[dict, str | None]:
    """Set each of `defaults` in the data module's `init_args` (a namespace or dict) unless the config
    sets it (`explicit`). Returns what was set and, if the config contradicts any, one warning line
    naming both values."""
    applied, conflicts = {}, []
    for key, value in defaults.items():
        current = init_args.get(key) if hasattr(init_args, "get") else getattr(init_args, key, None)
        if key in explicit and current is not None:
            if not _same(current, value):
                conflicts.append(f"data.{key} {_show(current)} (config) vs {_show(value)} ({source})")
            continue
        init_args[key] = tuple(value) if isinstance(value, list) else value
        applied[key] = value
    warning = None
    if conflicts:
        warning = (
            f"the config's preprocessing differs from that of the pretrained weights: {'; '.join(conflicts)}; "
            "the config's is used"
        )
    return applied, warning


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)
