"""Loading trained models from checkpoints, safely and with errors a user can act on.

Every checkpoint is read with ``torch.load(weights_only=True)``: tensors and plain containers only,
never pickled code. A `mixer fit` (or `mixer convert`) checkpoint names its LightningModule class in
its hyper-parameters (``_class_path``), so any family is rebuilt without a config; that name is looked
up among the registered families (`family_module`), never imported (`mixer_lightning.safety.trust`), and a
checkpoint of one family never initialises another (`check_family`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.trust import load_torch_file

NON_NETWORK_PREFIXES = ("train_metrics.", "train_loss.")  # TEMPORARY (house-h1): H2 defines it in tasks

# The families a checkpoint may name as its module class (`family_module`), in the order they join
# (`family`, on each family's LightningModule class); any other name in a checkpoint is refused.
_FAMILIES: list[type] = []


def family(cls: type) -> type:
    """Register the LightningModule class `cls` as a family: its checkpoints may be read (`family_module`)."""
    _FAMILIES.append(cls)
    return cls


def families() -> tuple[type, ...]:
    """The registered families (`mixer_lightning.tasks` imports every family's module, so all are here)."""
    return tuple(_FAMILIES)


def read_checkpoint(path: str | Path, field: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint dict at `path`, or a `ConfigError` saying what is wrong with the file.

    The names it carries are checked before anything could import them: any class path must be
    trusted (`mixer_lightning.safety.trust.load_torch_file`), its module class a registered family
    (`family_module`)."""
    fix = "give the path of a checkpoint written by `mixer fit` or `mixer convert`"
    checkpoint = load_torch_file(path, field, fix)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(
            field,
            f"{str(path)!r} is a bare weights file, not a mixer checkpoint",
            "turn it into one with `mixer convert --from FILE --model NAME --out model.ckpt`",
        )
    hparams = checkpoint.get("hyper_parameters") or {}
    if "_class_path" in hparams:
        cls = family_module(hparams["_class_path"], field, repr(str(path)))
        unknown = unknown_hparams(cls, hparams)
        if unknown:  # before Lightning hands them to jsonargparse (a 70-line Union traceback otherwise)
            raise ConfigError(
                field,
                f"{str(path)!r} names the model class {cls.__name__} but has hyper-parameters it does not take: "
                f"{', '.join(unknown)}",
                "use the checkpoint as `mixer fit` or `mixer convert` wrote it",
            )
    check_finite(checkpoint["state_dict"], path, field)
    return checkpoint


def unknown_hparams(cls: type, hparams: dict[str, Any]) -> list[str]:
    """The saved hyper-parameters that family `cls`'s __init__ (with ClassifierModule's, to which a
    family passes its **kwargs) does not take; `_`-prefixed keys are jsonargparse's own."""
    accepted = {
        name
        for klass in cls.__mro__
        if "__init__" in vars(klass)
        for name, parameter in inspect.signature(klass.__init__).parameters.items()
        if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
    }
    return sorted(k for k in hparams if not k.startswith("_") and k != "init_from" and k not in accepted)


def check_finite(state_dict: Any, path: str | Path, field: str) -> None:
    """A `ConfigError` if a floating tensor of the network holds NaN or inf: testing, exporting or
    resuming a diverged checkpoint only gives NaN figures with exit 0 (issue 25, RC8). The training
    metrics' states are not the network's and are skipped."""
    if not isinstance(state_dict, dict):
        return
    for name, tensor in state_dict.items():
        if (
            not isinstance(tensor, torch.Tensor)
            or not tensor.is_floating_point()
            or str(name).startswith(NON_NETWORK_PREFIXES)
        ):
            continue
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            nan = int(torch.isnan(tensor).sum())
            inf = int((~finite).sum()) - nan
            found = ", ".join(part for part in (f"{nan:,} NaN" if nan else "", f"{inf:,} inf" if inf else "") if part)
            raise ConfigError(
                field,
                f"{str(path)!r} holds non-finite weights ({name}: {found})",
                "use a checkpoint from before the run diverged, e.g. its best.ckpt or an earlier top-k file",
            )


def family_module(class_path: Any, field: str, source: str) -> type:
    """The registered family's LightningModule class named `class_path` (as Lightning writes it,
    ``mixer_lightning.tasks.mixer.MLPMixerModule``, or re-exported, ``mixer_lightning.tasks.MLPMixerModule``).
    Looked up, never imported: any other name is a one-line refusal."""
    known = {}
    for cls in _FAMILIES:
        known[f"{cls.__module__}.{cls.__qualname__}"] = cls
        known[f"mixer_lightning.tasks.{cls.__name__}"] = cls
    if isinstance(class_path, str) and class_path in known:
        return known[class_path]
    names = ", ".join(cls.__name__ for cls in _FAMILIES)
    raise ConfigError(
        field,
        f"{source} names the model class {class_path!r}, which is not one of this project's families ({names}); "
        "refused, since building it could run code",
        "use a checkpoint written by `mixer fit` or `mixer convert`",
    )


def module_class(checkpoint: dict[str, Any], path: str | Path, field: str = "ckpt_path") -> type:
    """The LightningModule class a checkpoint was trained with (a registered family)."""
    class_path = (checkpoint.get("hyper_parameters") or {}).get("_class_path")
    if not class_path:
        raise ConfigError(field, f"{str(path)!r} does not say which model it holds (no _class_path)", "pass --config")
    return family_module(class_path, field, repr(str(path)))


def check_family(class_path: str | None, module: Any, field: str, source: str, fix: str) -> None:
    """A `ConfigError` on `field` unless the module class a checkpoint names (`class_path`, None for
    files that name none) is a registered family (`family_module`) and `module`'s own class: weights
    are only comparable within a family."""
    if not class_path:
        return
    saved = family_module(class_path, field, source).__name__
    if saved != type(module).__name__:
        raise ConfigError(field, f"{source} holds a {saved}, but this model is a {type(module).__name__}", fix)


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


def check_checkpoint(path: str, model: torch.nn.Module, field: str = "ckpt_path") -> None:
    """A `ConfigError` naming what is wrong if the checkpoint at `path` cannot load into `model`."""
    checkpoint = read_checkpoint(path, field)
    check_family(
        (checkpoint.get("hyper_parameters") or {}).get("_class_path"),
        model,
        field,
        repr(path),
        "use the run's own config.yaml (or set model.class_path to match)",
    )
    state = checkpoint["state_dict"]
    own = model.state_dict()
    head = [k for k in own if k.startswith("net.head.")]
    if head and all(k in state for k in head) and any(state[k].shape != own[k].shape for k in head):
        if describe_mismatch(model, state, ignore=(*NON_NETWORK_PREFIXES, "net.head.")) is None:
            trained, wanted = state["net.head.weight"].shape[0], own["net.head.weight"].shape[0]
            raise ConfigError(
                field,
                f"{path!r} was trained for {trained} classes, the data has {wanted}",
                "evaluate it on its own dataset, or fine-tune it here with model.init_from (a new head)",
            )
    problem = describe_mismatch(model, state, ignore=NON_NETWORK_PREFIXES)
    if problem:
        raise ConfigError(
            field,
            f"{path!r} does not fit the configured {type(model).__name__} ({problem})",
            "use the config.yaml of the run that wrote it",
        )


def load_classifier(path: str | Path, field: str = "ckpt_path"):
    """The `ClassifierModule` saved at `path` (any family), in eval mode on the CPU."""
    checkpoint = read_checkpoint(path, field)
    cls = module_class(checkpoint, path, field)
    hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    hparams.pop("init_from", None)  # the checkpoint holds the weights already (read_checkpoint checked the rest)
    module = cls(**hparams)
    module.on_load_checkpoint(checkpoint)  # what Lightning's loading does first (fills absent metric states)
    problem = describe_mismatch(module, checkpoint["state_dict"])
    if problem:
        raise ConfigError(field, f"{str(path)!r} does not fit {cls.__name__} ({problem})", "check the file")
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()
