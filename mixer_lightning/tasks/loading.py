"""Loading trained models from checkpoints, safely and with errors a user can act on.

Every checkpoint is read with ``torch.load(weights_only=True)``: tensors and plain containers only,
never pickled code. A `mixer fit` (or `mixer convert`) checkpoint names its LightningModule class in
its hyper-parameters (``_class_path``), so any family is rebuilt without a config.
"""

from __future__ import annotations

import importlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from mixer_lightning.errors import ConfigError


def read_checkpoint(path: str | Path, field: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint dict at `path`, or a `ConfigError` saying what is wrong with the file."""
    path = Path(path)
    fix = "give the path of a checkpoint written by `mixer fit` or `mixer convert`"
    if not path.is_file():
        raise ConfigError(field, f"no checkpoint file {str(path)!r}", fix)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "Unsupported global" in str(error):  # a class or function the file would have to import
            raise ConfigError(
                field,
                f"{str(path)!r} needs pickled Python code to load, which is refused for safety (weights_only=True)",
                "re-save it as a plain state dict or safetensors, or convert it with `mixer convert`",
            ) from None
        raise ConfigError(
            field, f"{str(path)!r} is truncated or not a PyTorch checkpoint (it does not unpickle)", fix
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(field, f"{str(path)!r} is truncated or not a PyTorch checkpoint ({message})", fix) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(
            field,
            f"{str(path)!r} is a bare weights file, not a mixer checkpoint",
            "turn it into one with `mixer convert --from FILE --model NAME --out model.ckpt`",
        )
    return checkpoint


def module_class(checkpoint: dict[str, Any], path: str | Path, field: str = "ckpt_path") -> type:
    """The LightningModule class a checkpoint was trained with."""
    class_path = (checkpoint.get("hyper_parameters") or {}).get("_class_path")
    if not class_path:
        raise ConfigError(field, f"{str(path)!r} does not say which model it holds (no _class_path)", "pass --config")
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ConfigError(
            field, f"{str(path)!r} holds an unknown model class {class_path}", "update mixer-lightning"
        ) from None


def describe_mismatch(
    model: torch.nn.Module, state_dict: dict[str, torch.Tensor], limit: int = 4, ignore: tuple[str, ...] = ()
) -> str | None:
    """A one-line account of how `state_dict` fails to fit `model` (None if it fits); keys starting
    with one of `ignore` are left out on both sides."""
    from mixer_lightning.models.sparse import SparseLinear

    own = {k: v for k, v in model.state_dict().items() if not k.startswith(ignore)}
    state_dict = {k: v for k, v in state_dict.items() if not k.startswith(ignore)}
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    # A SparseLinear takes the number of non-zeros of the checkpoint's pattern (another seed drew another
    # mask) in its _load_from_state_dict: those shapes may differ.
    resizable = {
        f"{name}.{key}" if name else key
        for name, module in model.named_modules()
        if isinstance(module, SparseLinear)
        for key in ("values", "col", "perm")
    }
    misshaped = [
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}"
        for k in own
        if k in state_dict and k not in resizable and tuple(state_dict[k].shape) != tuple(own[k].shape)
    ]
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("misshaped", misshaped)):
        if keys:
            more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
            parts.append(f"{label}: {', '.join(keys[:limit])}{more}")
    return "; ".join(parts) or None


def load_classifier(path: str | Path, field: str = "ckpt_path"):
    """The `ClassifierModule` saved at `path` (any family), in eval mode on the CPU."""
    checkpoint = read_checkpoint(path, field)
    cls = module_class(checkpoint, path, field)
    hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    hparams.pop("init_from", None)  # the checkpoint holds the weights already
    module = cls(**hparams)
    module.on_load_checkpoint(checkpoint)  # what Lightning's loading does first (fills absent metric states)
    problem = describe_mismatch(module, checkpoint["state_dict"])
    if problem:
        raise ConfigError(field, f"{str(path)!r} does not fit {cls.__name__} ({problem})", "check the file")
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()
