"""What a file may make us import: nothing but the classes of trusted packages.

A config names classes by design (``class_path: lightning.pytorch.callbacks.EarlyStopping``), and so do a
checkpoint's hyper-parameters (the network's ``class_path``). Importing a module runs its code, so every
name jsonargparse would import, from any config, flag or checkpoint, is checked against the trusted
packages first: jsonargparse's import-path policy (`enforce_import_policy`, set before `mixer` parses
anything). A user trusts their own packages with ``MIXER_TRUSTED_MODULES=my_lab.callbacks`` (comma-separated).
Checkpoints and weights files are data: read with ``torch.load(weights_only=True)`` (`load_torch_file`).
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mixer_lightning.errors import ConfigError

TRUSTED_PACKAGES = ("mixer_lightning", "torch", "torchvision", "lightning", "pytorch_lightning", "torchmetrics", "timm")
TRUSTED_ENV = "MIXER_TRUSTED_MODULES"
# The keys under which Lightning, jsonargparse and this project write class names into files.
CLASS_KEYS = ("class_path", "_class_path", "_instantiator")
# Inside the trusted packages, what loads code or pickles by name stays denied. jsonargparse checks a name as
# written and as the real location of the object it resolves to (``__module__.__qualname__``), and its most
# specific entry wins: so each object is listed where it is defined, which denies it under every alias
# (`timm.models.load_checkpoint` is defined in timm.models._helpers and also reached as
# timm.models._factory.load_checkpoint). tests/test_hub_trust.py resolves every entry and checks that its
# real location is denied, so a library moving one fails there, not silently.
DENIED_INSIDE_TRUSTED = (
    "torch.hub",
    "torch.package",
    "torch.load",
    "torch.serialization",
    "torch.utils.cpp_extension",
    "torch.jit.load",
    "torch.jit._serialization",
    "torch.export.load",
    "timm.models.load_checkpoint",
    "timm.models._helpers",  # load_checkpoint, load_state_dict, resume_checkpoint: torch.load of a named file
    "lightning.fabric.utilities.cloud_io",
)


def trusted_prefixes() -> tuple[str, ...]:
    extra = [name.strip() for name in os.environ.get(TRUSTED_ENV, "").split(",") if name.strip()]
    return (*TRUSTED_PACKAGES, *extra)


def enforce_import_policy() -> None:
    """From now on jsonargparse imports nothing a parsed value names outside `trusted_prefixes`."""
    from jsonargparse import set_parsing_settings

    allowed = trusted_prefixes()
    # jsonargparse's lists only grow: a package trusted by an earlier call in this process is denied again.
    withdrawn = sorted(_allowed_before.difference(allowed))
    set_parsing_settings(
        import_path_denylist=["*", *DENIED_INSIDE_TRUSTED, *withdrawn], import_path_allowlist=list(allowed)
    )
    _allowed_before.update(allowed)


_allowed_before: set[str] = set()


def is_trusted(class_path: Any) -> bool:
    """Whether `class_path` (``package.module.Name``) lies in a trusted package."""
    if not isinstance(class_path, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", class_path):
        return False
    return any(class_path == p or class_path.startswith(p + ".") for p in trusted_prefixes())


def class_paths(obj: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every (location, value) of a class-naming key (`CLASS_KEYS`) in the nested dicts/lists `obj`."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            location = f"{where}.{key}" if where else str(key)
            yield from [(location, value)] if key in CLASS_KEYS else class_paths(value, location)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from class_paths(value, f"{where}[{i}]")


def check_class_paths(obj: Any, field: str, source: str) -> None:
    """A `ConfigError` on `field` if `obj` (read from `source`) names a class outside the trusted packages."""
    for location, value in class_paths(obj):
        if not is_trusted(value):
            raise ConfigError(
                field,
                f"{source} names {value!r} at {location}, outside the trusted packages (importing it would run its code)",
                f"if you trust it, add its package to {TRUSTED_ENV} (comma-separated)",
            )


def load_torch_file(path: str | Path, field: str, fix: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, the one reader of checkpoints and weights files:
    a file that needs pickled code is refused, a missing or damaged one named, each as a `ConfigError`;
    hyper-parameters must name trusted classes only."""
    import torch

    if not os.path.isfile(path):
        raise ConfigError(field, f"no such file {str(path)!r}", fix)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # what weights_only refuses, named by torch (>= 2.5), or no pickle at all
        unsafe = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
        try:
            needs = ", ".join(unsafe(path)) if unsafe is not None else ""
        except Exception:  # not a zip-format file: no globals to name
            needs = ""
        if needs:
            raise ConfigError(
                field,
                f"{str(path)!r} needs pickled Python code ({needs}) to load; refused (weights_only=True)",
                "if you trust it, re-save its tensors: torch.save(torch.load(FILE, weights_only=False)['state_dict'], 'w.pth')",
            ) from None
        raise ConfigError(field, f"{str(path)!r} is not a PyTorch file", fix) from None
    except Exception as error:  # torch's readers raise many types for a damaged file
        raise ConfigError(
            field, f"{str(path)!r} is truncated or not a PyTorch file ({type(error).__name__})", fix
        ) from None
    hparams = loaded.get("hyper_parameters") if isinstance(loaded, dict) else None
    if isinstance(hparams, dict):
        check_class_paths(hparams, field, repr(str(path)))
    return loaded
