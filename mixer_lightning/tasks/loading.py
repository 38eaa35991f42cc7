"""Reading checkpoints safely: ``torch.load(weights_only=True)`` (tensors and plain containers, never
pickled code), hyper-parameters in the current form (`upgrade_hparams`), and any family rebuilt without
a config, its network class imported only from a trusted package (`mixer_lightning.safety.trust`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.registry import upgrade_hparams
from mixer_lightning.safety.trust import load_torch_file
from mixer_lightning.tasks.classifier import NON_NETWORK_PREFIXES, ClassifierModule
from mixer_lightning.tasks.initialise import import_network


def read_checkpoint(path: str | Path, field: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint dict at `path`, its ``hyper_parameters`` upgraded (`upgrade_hparams`), or a
    `ConfigError` saying what is wrong with the file (not a checkpoint, untrusted names, NaN weights)."""
    checkpoint = load_torch_file(path, field, "give the path of a checkpoint written by `mixer fit` or `mixer convert`")
    fix = "turn it into one with `mixer convert --from FILE --model NAME --out model.ckpt`"
    require(isinstance(checkpoint, dict) and "state_dict" in checkpoint, field, f"{str(path)!r} is no checkpoint", fix)
    problem = schema_problem(checkpoint)
    require(problem is None, field, f"{str(path)!r} is damaged: {problem}", "give a checkpoint written by `mixer fit`")
    checkpoint["hyper_parameters"] = upgrade_hparams(checkpoint.get("hyper_parameters") or {})
    check_finite(checkpoint["state_dict"], path, field)
    return checkpoint


# The types of a checkpoint's entries that the commands read (the data facts: `data.predict.data_facts`).
NUMBER, NUMBERS = (int, float), (list, tuple)
FACT_TYPES = {
    "dataset": str,
    "num_classes": int,
    "class_names": NUMBERS,
    "image_size": int,
    "in_chans": int,
    "mean": NUMBERS,
    "std": NUMBERS,
    "eval_crop": str,
    "eval_crop_pct": NUMBER,
    "interpolation": str,
    "input_permutation": str,
    "permutation_patch_size": int,
    "permutation_seed": int,
}


def schema_problem(checkpoint: dict[str, Any]) -> str | None:
    """What in `checkpoint` is not of the form every command reads (None: all is): the state dict tensors by
    name, the hyper-parameters and the data facts mappings of plain values, the epoch and step numbers."""
    state = checkpoint["state_dict"]
    if not isinstance(state, dict):
        return f"its state_dict is a {type(state).__name__}, not tensors by name"
    wrong = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if wrong is not None:
        return f"its state_dict entry {wrong!r} is a {type(state[wrong]).__name__}, not a tensor"
    for key, kind in (("hyper_parameters", dict), ("data", dict), ("epoch", int), ("global_step", int)):
        if checkpoint.get(key) is not None and not isinstance(checkpoint[key], kind):
            return f"its {key} is a {type(checkpoint[key]).__name__}, not a {kind.__name__}"
    facts = checkpoint.get("data") or {}
    for key, kind in FACT_TYPES.items():
        value = facts.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"its data fact {key} is {value!r}"
        if kind is NUMBERS and key != "class_names" and value is not None:
            if not all(isinstance(v, NUMBER) for v in value):
                return f"its data fact {key} is {value!r}"
    return None


def check_finite(state_dict: Any, path: str | Path, field: str) -> None:
    """A `ConfigError` if a tensor of the network holds NaN or inf (a diverged run's: NaN figures only)."""
    for name, tensor in state_dict.items() if isinstance(state_dict, dict) else ():
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or torch.isfinite(tensor).all():
            continue
        if not str(name).startswith(NON_NETWORK_PREFIXES):
            nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
            problem = f"{str(path)!r} holds non-finite weights ({name}: {nan:,} NaN, {inf:,} inf)"
            raise ConfigError(field, problem, "use a checkpoint from before the run diverged, e.g. its best.ckpt")


def describe_mismatch(
    model: torch.nn.Module, state_dict: dict[str, torch.Tensor], limit: int = 4, ignore: tuple[str, ...] = ()
) -> str | None:
    """How `state_dict` fails to fit `model`, in one line (None if it fits), keys starting with `ignore` left out."""
    from mixer_lightning.models.sparse import SparseLinear

    own = {k: v for k, v in model.state_dict().items() if not k.startswith(ignore)}
    state_dict = {k: v for k, v in state_dict.items() if not k.startswith(ignore)}
    # A SparseLinear takes the number of non-zeros of the file's pattern (another seed): those may differ.
    resizable = {
        f"{name}.{key}" if name else key
        for name, module in model.named_modules()
        if isinstance(module, SparseLinear)
        for key in ("values", "col", "perm")
    }
    kinds = {
        "missing": [k for k in own if k not in state_dict],
        "unexpected": [k for k in state_dict if k not in own],
        "misshaped": [
            f"{k} {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}"
            for k in own
            if k in state_dict and k not in resizable and tuple(state_dict[k].shape) != tuple(own[k].shape)
        ],
    }
    parts = [
        f"{label}: {', '.join(keys[:limit])}{f' and {len(keys) - limit} more' if len(keys) > limit else ''}"
        for label, keys in kinds.items()
        if keys
    ]
    return "; ".join(parts) or None


def check_checkpoint(path: str, model: torch.nn.Module, field: str = "ckpt_path") -> None:
    """A `ConfigError` naming what is wrong if the checkpoint at `path` cannot load into `model` (a head for
    other classes: fine-tune with model.init_from, which starts a new head)."""
    problem = describe_mismatch(model, read_checkpoint(path, field)["state_dict"], ignore=NON_NETWORK_PREFIXES)
    fix = "use its run's config.yaml, or for other classes fine-tune it with model.init_from (a new head)"
    require(problem is None, field, f"{path!r} does not fit the configured model ({problem})", fix)


def load_classifier(path: str | Path, field: str = "ckpt_path") -> ClassifierModule:
    """The `ClassifierModule` saved at `path` (any family, any checkpoint format), in eval mode on the CPU."""
    checkpoint = read_checkpoint(path, field)
    hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    spec = hparams.pop("net", None)
    if not isinstance(spec, dict) or not isinstance(spec.get("class_path"), str):
        raise ConfigError(field, f"{str(path)!r} does not say which network it holds", "give a `mixer fit` checkpoint")
    cls = import_network(spec["class_path"], field, repr(str(path)))
    hparams.update(init_from=None, optimizer=None, lr_scheduler=None)  # the weights are here; nothing is trained
    module = ClassifierModule(functools.partial(cls, **(spec.get("init_args") or {})), **hparams)
    module.on_load_checkpoint(checkpoint)  # what Lightning's loading does first (fills absent metric states)
    problem = describe_mismatch(module, checkpoint["state_dict"])
    require(problem is None, field, f"{str(path)!r} does not fit its {cls.__name__} ({problem})", "check the file")
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()
