"""Reading checkpoints safely: ``torch.load(weights_only=True)`` (tensors and plain containers, never
pickled code), in this release's layout, and any family rebuilt without a config, its network class imported only from a trusted package (`mixer_lightning.safety.trust`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.trust import load_torch_file
from mixer_lightning.tasks.classifier import NON_NETWORK_PREFIXES, ClassifierModule
from mixer_lightning.tasks.initialise import import_network
from mixer_lightning.weights.file import layout_problem, schema_problem


def read_checkpoint(path: str | Path, field: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint dict at `path`, or a `ConfigError` saying what is wrong with the file (not a checkpoint,
    another layout, untrusted names, NaN weights)."""
    checkpoint = load_torch_file(path, field, "give the path of a checkpoint written by `mixer fit` or `mixer convert`")
    fix = "turn it into one with `mixer convert --from FILE --model NAME --out model.ckpt`"
    require(isinstance(checkpoint, dict) and "state_dict" in checkpoint, field, f"{str(path)!r} is no checkpoint", fix)
    problem = schema_problem(checkpoint)
    require(problem is None, field, f"{str(path)!r} is damaged: {problem}", "give a checkpoint written by `mixer fit`")
    problem = layout_problem(checkpoint)
    require(
        problem is None, field, f"{str(path)!r}: {problem}", "give a checkpoint written by this release's `mixer fit`"
    )
    checkpoint["hyper_parameters"] = checkpoint.get("hyper_parameters") or {}
    check_finite(checkpoint["state_dict"], path, field)
    return checkpoint


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
