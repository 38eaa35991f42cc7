"""What the project turns from a file into code: nothing but the classes of trusted packages.

A checkpoint is data. It is read with ``torch.load(weights_only=True)`` (tensors and plain containers,
never pickled code; `load_torch_file` is the one place that reads one), and the names it carries are
looked up, never imported: the LightningModule class (``_class_path``) must be one of this project's
registered families (`mixer_lightning.tasks.loading.family_module`), and any other ``class_path`` in
its hyper-parameters must lie in a trusted package.

A YAML config names classes by design (``class_path: lightning.pytorch.callbacks.EarlyStopping``).
Every config the ``mixer`` command reads (``--config`` files, a run's saved config.yaml, sweep
manifests) is checked, before anything is imported, by `check_class_paths`: each class path must lie
in a trusted package (`TRUSTED_PACKAGES`), or in one the user names in ``MIXER_TRUSTED_MODULES``
(comma-separated, e.g. ``MIXER_TRUSTED_MODULES=my_lab.callbacks``) for their own extensions.
Importing a module runs its code, so a name outside these is refused before import, in one line.

That file check gives the friendly early error; the guarantee is jsonargparse's own import-path policy
(`enforce_import_policy`, set by ``mixer`` before it parses anything): every string jsonargparse would
import (a ``class_path``, a bare dotted name such as ``callbacks: [this.Zen]``, a callable or type,
from any config file of any name, a file named inside a config, the command line, a run's saved
config.yaml, a sweep manifest's config) is checked against the same trusted packages before the import,
and after it against where the object really lives (``torch.os.system`` is ``posix.system``: denied).
Functions of trusted packages that load code or pickles by name (`DENIED_INSIDE_TRUSTED`) stay denied.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mixer_lightning.errors import ConfigError

TRUSTED_PACKAGES = ("mixer_lightning", "torch", "torchvision", "lightning", "pytorch_lightning", "torchmetrics", "timm")
TRUSTED_ENV = "MIXER_TRUSTED_MODULES"
# The keys under which Lightning, jsonargparse and this project write class names into files.
CLASS_KEYS = ("class_path", "_class_path", "_instantiator")
# Inside the trusted packages, what loads code or pickled objects by name: denied even so (the most
# specific entry of jsonargparse's policy decides, so these win over their trusted package).
DENIED_INSIDE_TRUSTED = (
    "torch.hub",
    "torch.package",
    "torch.load",
    "torch.serialization",
    "torch.utils.cpp_extension",
    "torch.jit.load",
    "torch.export.load",
    "timm.models.load_checkpoint",
    "lightning.fabric.utilities.cloud_io",
)
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def trusted_prefixes() -> tuple[str, ...]:
    """The trusted packages, with those named in ``MIXER_TRUSTED_MODULES`` (each a dotted module path;
    anything else is a `ConfigError`, as is jsonargparse itself, whose settings decide what is allowed)."""
    extra = [name.strip() for name in os.environ.get(TRUSTED_ENV, "").split(",") if name.strip()]
    for name in extra:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", name):
            raise ConfigError(
                TRUSTED_ENV, f"{name!r} is not a module path", "give e.g. my_lab.callbacks (comma-separated)"
            )
        if name == "jsonargparse" or name.startswith("jsonargparse."):
            raise ConfigError(
                TRUSTED_ENV, f"{name!r} cannot be trusted (it decides what a config may import)", "remove it"
            )
    return (*TRUSTED_PACKAGES, *extra)


def enforce_import_policy() -> None:
    """From now on, jsonargparse imports nothing a parsed value names outside `trusted_prefixes` (and
    nothing in `DENIED_INSIDE_TRUSTED`): its ``import_path_denylist: ['*']`` with the trusted packages
    as the allowlist (jsonargparse >= 4.52). Checked at every import it would make, whatever file,
    flag or checkpoint the name came from; a refusal is jsonargparse's ``ImportDenied``, reported by
    `mixer_lightning.errors.translate_library_error` as one line."""
    from jsonargparse import set_parsing_settings

    allowed = trusted_prefixes()
    # jsonargparse's settings are global and only ever add entries: a package trusted by an earlier call
    # in this process (``main`` called again with another MIXER_TRUSTED_MODULES) is denied again.
    withdrawn = sorted(_allowed_before.difference(allowed))
    set_parsing_settings(
        import_path_denylist=["*", *DENIED_INSIDE_TRUSTED, *withdrawn],
        import_path_allowlist=list(allowed),
    )
    _allowed_before.update(allowed)


_allowed_before: set[str] = set()


def is_trusted(class_path: str) -> bool:
    """Whether `class_path` (``package.module.Name``) lies in a trusted package."""
    if not isinstance(class_path, str) or not _DOTTED.match(class_path):
        return False
    return any(class_path == prefix or class_path.startswith(prefix + ".") for prefix in trusted_prefixes())


def class_paths(obj: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every (location, value) of a class-naming key (`CLASS_KEYS`) in the nested dicts/lists `obj`."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            location = f"{where}.{key}" if where else str(key)
            if key in CLASS_KEYS:
                yield location, value
            else:
                yield from class_paths(value, location)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from class_paths(value, f"{where}[{i}]")


def check_class_paths(obj: Any, field: str, source: str) -> None:
    """A `ConfigError` on `field` if `obj` (a parsed config or hyper-parameters read from `source`)
    names a class outside the trusted packages; checked before anything is imported."""
    for location, value in class_paths(obj):
        if not is_trusted(value):
            raise ConfigError(
                field,
                f"{source} names {value!r} at {location}, outside the trusted packages; refused, since importing it "
                "would run its code",
                f"if you trust it, add its package to {TRUSTED_ENV} (comma-separated)",
            )


def load_torch_file(path: str | Path, field: str, fix: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, the one reader of every checkpoint and
    weights file; any failure is one `ConfigError` on `field`: a file that needs pickled code is
    refused for safety (whatever torch's message), a damaged or foreign file is named as such, with
    `fix`. A checkpoint's ``hyper_parameters`` must be a mapping naming only trusted classes
    (`check_class_paths`); which LightningModule it names (``_class_path``) is the caller's to look up
    (`mixer_lightning.tasks.loading.check_family`)."""
    import torch

    path = Path(path)
    if not os.path.isfile(path):  # os.path: a name over 255 bytes is no file (pathlib raises ENAMETOOLONG)
        if os.path.exists(path):  # a FIFO would block torch.load until something writes into it
            raise ConfigError(field, f"{str(path)!r} is not a regular file", fix)
        raise ConfigError(field, f"no such file {str(path)!r}", fix)
    check_stored_archive(path, field, fix)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # The file names a class or function to import ("Unsupported global: GLOBAL argparse.Namespace";
        # torch 2.14 says "unsupported GLOBAL posix.system whose module posix is blocked" for os.system):
        # refused for safety. Other unpickling errors ("Unsupported operand 110") mean it is no pickle.
        found = re.search(r"GLOBAL\s+([\w.]+)", str(error), re.IGNORECASE)
        if found:
            raise ConfigError(
                field,
                f"{str(path)!r} needs pickled Python code ({found.group(1)}) to load, refused for safety "
                "(weights_only=True)",
                "if you trust it, `mixer convert` it or re-save its tensors: "
                "torch.save(torch.load(FILE, weights_only=False)['state_dict'], 'w.pth')",
            ) from None
        what = "it does not unpickle" if _looks_like_torch(path) else "neither a zip archive nor a pickle"
        raise ConfigError(field, f"{str(path)!r} is truncated or not a PyTorch file ({what})", fix) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, KeyError, IndexError, TypeError) as error:
        # A text file read as a legacy pickle raises KeyError(101) or similar from the unpickler: say what
        # the file is not, rather than the unpickler's key.
        if isinstance(error, (KeyError, IndexError)) or not _looks_like_torch(path):
            message = "neither a zip archive nor a pickle"
        else:
            # torch's first sentence says what failed; the rest ("This is an internal miniz error. If you
            # are seeing this error, ...") would push the line past its bound (errors.LINE_LIMIT).
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            message = re.split(r"(?<=\w)\. ", first, maxsplit=1)[0][:120]
        raise ConfigError(field, f"{str(path)!r} is truncated or not a PyTorch file ({message})", fix) from None
    hparams = loaded.get("hyper_parameters") if isinstance(loaded, dict) else None
    if hparams is not None:
        if not isinstance(hparams, dict):
            raise ConfigError(field, f"{str(path)!r} has malformed hyper_parameters ({type(hparams).__name__})", fix)
        check_class_paths(hparams, field, repr(str(path)))
    return loaded


def check_stored_archive(path: Path, field: str, fix: str) -> None:
    """A zip-format torch file must hold its records stored, inside the file: torch.save never
    compresses, while torch.load inflates each record to the size it declares before comparing it
    with the tensor's, so a 2 MB file of deflated zeros would take ~2 GB of memory before its error
    (issue 25, RC8). Checked from the zip's directory alone, before anything is inflated."""
    if not zipfile.is_zipfile(path):
        return  # a legacy pickle, or no torch file: torch.load says which
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # damaged: torch.load's own message names it
    declared = 0
    for entry in entries:
        declared += entry.file_size
        if entry.compress_type != zipfile.ZIP_STORED or entry.header_offset + entry.compress_size > size:
            raise ConfigError(
                field,
                f"{str(path)!r} declares {declared / 1e6:,.0f} MB in a {size / 1e6:,.1f} MB file (its record "
                f"{entry.filename!r} is compressed or lies past the end, which torch.save never writes); "
                "refused before loading",
                fix,
            )


def _looks_like_torch(path: Path) -> bool:
    """Whether `path` starts as torch.save's files do: a zip archive, or a pickle (protocol 2+)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(b"PK") or head[:1] == b"\x80"
