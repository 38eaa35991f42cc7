"""Average the weights of several checkpoints of one model into one checkpoint (timm's
``avg_checkpoints.py``; "checkpoint averaging", post-training weight averaging akin to SWA or a model
soup of fine-tunes of one pretrained model).

Every floating tensor of the network is summed in float64 and divided by the number of checkpoints,
then cast back to its own dtype (clamped to that dtype's range, as timm does); integer and boolean
buffers (an RP Mixer's permutations, an SW-MLP's sparsity pattern) must be equal in every checkpoint
and are kept. The checkpoints must hold the same model: the same family, the same architecture
hyper-parameters and the same tensors; anything else is refused in one line naming the file.
Training settings (learning rate, optimiser, dropout, ...) may differ. The training metrics' states
are not the network's and are left out.

The output is a checkpoint as ``mixer convert`` writes one (weights only): ``mixer test --ckpt_path``,
``mixer predict --ckpt_path`` and ``model.init_from`` take it. It carries the first checkpoint's
hyper-parameters, the data facts when every input carries the same ones (what ``mixer predict
--data.predict_root`` reads), and under ``mixer_average`` the path, sha256, epoch and step of each
checkpoint averaged. Written atomically; an existing --out is replaced only with --overwrite.

Examples:
    mixer average --ckpt_path runs/x/version_0/checkpoints/epoch=*.ckpt --out runs/x/version_0/checkpoints/avg.ckpt
    mixer average --ckpt_path a.ckpt b.ckpt c.ckpt --out avg.ckpt --json
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

# Hyper-parameters that change how a network is trained, not which function it computes: checkpoints
# that differ in these are still averaged (a model soup of fine-tunes with other learning rates).
TRAINING_ONLY = {"drop_rate", "drop_path", "init"}
# The data facts every family's network is built for (ClassifierModule's, not the family's own).
DATA_HPARAMS = ("num_classes", "image_size", "in_chans", "upscale")


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt_path",
        nargs="+",
        required=True,
        help="two or more checkpoints of one model (`mixer fit` top-k files, fine-tunes of one pretrained model)",
    )
    parser.add_argument("--out", required=True, help="the averaged checkpoint to write (.ckpt)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists (atomically)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def sha256_of(path: str | Path) -> str:
    """The sha256 of a file's bytes (read in 1 MiB blocks), as timm prints for its average."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def architecture_keys(cls: type) -> set[str]:
    """The hyper-parameters that fix the network of family `cls`: the arguments of the family's own
    __init__ (those below ClassifierModule's, which are training settings) and the data's, less
    `TRAINING_ONLY`."""
    import inspect

    from mixer_lightning.tasks.classifier import ClassifierModule

    keys = set(DATA_HPARAMS)
    for klass in cls.__mro__:
        if klass is ClassifierModule or not issubclass(klass, ClassifierModule):
            break
        if "__init__" in vars(klass):
            keys |= {
                name
                for name, parameter in inspect.signature(klass.__init__).parameters.items()
                if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
            }
    return keys - TRAINING_ONLY


def network_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The network's tensors of a checkpoint: its state dict less the training metrics' states."""
    from mixer_lightning.tasks.loading import NON_NETWORK_PREFIXES

    return {k: v for k, v in checkpoint["state_dict"].items() if not str(k).startswith(NON_NETWORK_PREFIXES)}


def _distinct_names(path_a: str, path_b: str) -> tuple[str, str]:
    """The two paths below the folder they share (``run/version_0/…/last.ckpt`` and ``…/best.ckpt``),
    or as given where they share nothing but the root."""
    import os

    a, b = os.path.abspath(path_a), os.path.abspath(path_b)
    common = os.path.commonpath([a, b])
    if common == os.path.dirname(common):  # only the root (or a drive) in common
        return path_a, path_b
    return os.path.relpath(a, common), os.path.relpath(b, common)


def check_same_model(first: tuple[str, dict], other: tuple[str, dict], field: str) -> None:
    """A `ConfigError` naming `other`'s file unless it holds the same model as `first` (family,
    architecture hyper-parameters, tensor names, shapes and dtypes)."""
    from mixer_lightning.errors import ConfigError
    from mixer_lightning.tasks.loading import module_class

    (path_a, a), (path_b, b) = first, other
    fix = "average checkpoints of one run, or fine-tunes of one pretrained model"
    cls_a, cls_b = module_class(a, path_a, field), module_class(b, path_b, field)
    path_a, path_b = _distinct_names(path_a, path_b)  # the error line is bounded: what tells them apart
    if cls_a is not cls_b:
        raise ConfigError(field, f"{path_b} holds a {cls_b.__name__}, {path_a} a {cls_a.__name__}", fix)
    hparams_a, hparams_b = a.get("hyper_parameters") or {}, b.get("hyper_parameters") or {}
    for key in sorted(architecture_keys(cls_a)):
        if hparams_a.get(key) != hparams_b.get(key):
            raise ConfigError(
                field,
                f"{path_b} was built with {key}={hparams_b.get(key)!r}, {path_a} with {key}={hparams_a.get(key)!r}",
                fix,
            )
    state_a, state_b = network_state(a), network_state(b)
    missing = [k for k in state_a if k not in state_b]
    unexpected = [k for k in state_b if k not in state_a]
    misshaped = [
        f"{k} {tuple(state_b[k].shape)} {state_b[k].dtype} vs {tuple(state_a[k].shape)} {state_a[k].dtype}"
        for k in state_a
        if k in state_b and (state_a[k].shape != state_b[k].shape or state_a[k].dtype != state_b[k].dtype)
    ]
    for label, keys in (("lacks", missing), ("has other tensors", unexpected), ("has other shapes", misshaped)):
        if keys:
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            raise ConfigError(field, f"{path_b} {label} than {path_a}: {', '.join(keys[:3])}{more}", fix)
    for key, tensor in state_a.items():
        if not tensor.is_floating_point() and not bool((tensor == state_b[key]).all()):
            raise ConfigError(
                field,
                f"{key} differs: {path_b} and {path_a} drew other permutations or sparsity patterns (other seeds)",
                "average checkpoints of one run",
            )


def average_state(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of every floating tensor over `states` (summed in float64, clamped to the dtype's range,
    cast back); every other tensor from the first (`check_same_model` found them equal)."""
    import torch

    averaged = {}
    for key, first in states[0].items():
        if not first.is_floating_point():
            averaged[key] = first.clone()
            continue
        total = torch.zeros(first.shape, dtype=torch.float64)
        for state in states:
            total += state[key].detach().to("cpu", torch.float64)
        info = torch.finfo(first.dtype)
        averaged[key] = (total / len(states)).clamp(info.min, info.max).to(first.dtype)
    return averaged


def common_data_facts(checkpoints: list[dict[str, Any]]) -> tuple[dict | None, str | None]:
    """The data facts (``data``) every checkpoint carries alike, or None and why not."""
    facts = [checkpoint.get("data") for checkpoint in checkpoints]
    if any(not isinstance(fact, dict) or not fact for fact in facts):
        return None, "not every checkpoint carries data facts"
    differing = sorted(
        {key for fact in facts[1:] for key in set(fact) | set(facts[0]) if fact.get(key) != facts[0].get(key)}
    )
    if differing:
        return None, f"the checkpoints' data facts differ ({', '.join(differing)})"
    return dict(facts[0]), None


def run(args: Namespace) -> None:
    import sys

    import lightning
    import torch

    from mixer_lightning.errors import ConfigError, require
    from mixer_lightning.safety.atomic import atomic_write, check_output_file
    from mixer_lightning.tasks.loading import module_class, read_checkpoint

    field = "--ckpt_path"
    paths = [str(path) for path in args.ckpt_path]
    require(
        len(paths) >= 2,
        field,
        f"averaging needs two or more checkpoints, got {len(paths)}",
        "give them all after --ckpt_path: --ckpt_path A.ckpt B.ckpt ...",
    )
    out = Path(args.out)
    require(out.suffix == ".ckpt", "--out", f"unknown output type {out.suffix!r}", "end it in .ckpt")
    check_output_file(out, "--out", args.overwrite)  # before reading anything: one line, nothing written
    checkpoints, records, seen = [], [], {}
    for path in paths:
        checkpoint = read_checkpoint(path, field)  # trusted names only, finite weights
        digest = sha256_of(path)
        if digest in seen:
            raise ConfigError(
                field,
                f"the same checkpoint twice (sha256 {digest[:12]}…, which would count twice): {path}",
                "give each checkpoint once",
            )
        seen[digest] = path
        if checkpoints:
            check_same_model((paths[0], checkpoints[0]), (path, checkpoint), field)
        checkpoints.append(checkpoint)
        records.append(
            {
                "path": path,
                "sha256": digest,
                "epoch": checkpoint.get("epoch"),
                "global_step": checkpoint.get("global_step"),
            }
        )
    cls = module_class(checkpoints[0], paths[0], field)
    state = average_state([network_state(checkpoint) for checkpoint in checkpoints])
    hparams = dict(checkpoints[0]["hyper_parameters"])
    hparams["init_from"] = None  # the weights are here: rebuilt without the file a fine-tune started from
    facts, no_facts = common_data_facts(checkpoints)
    epochs = [record["epoch"] for record in records if isinstance(record["epoch"], int)]
    steps = [record["global_step"] for record in records if isinstance(record["global_step"], int)]
    averaged = {
        # The latest epoch and step averaged, which `mixer test` records with its results.
        "epoch": max(epochs, default=0),
        "global_step": max(steps, default=0),
        # The first input's version: Lightning's checkpoint migration reads the state dict by it.
        "pytorch-lightning_version": checkpoints[0].get("pytorch-lightning_version", lightning.__version__),
        "state_dict": state,
        "hparams_name": checkpoints[0].get("hparams_name", "kwargs"),
        "hyper_parameters": hparams,
        "mixer_average": {"method": "mean (float64) of the floating tensors", "checkpoints": records},
    }
    if facts is not None:
        averaged["data"] = facts
    # Atomic: a full disk or a kill mid-write leaves an existing --out as it was (--overwrite included).
    with atomic_write(out, "wb", field="--out") as f:
        torch.save(averaged, f)
    report = {
        "out": str(out),
        "sha256": sha256_of(out),
        "family": cls.__name__,
        "checkpoints": records,
        "tensors": len(state),
        "data_facts": facts is not None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        parameters = sum(t.numel() for t in state.values() if t.is_floating_point())
        print(
            f"Wrote {out}: the mean of {len(paths)} {cls.__name__} checkpoints "
            f"(epochs {', '.join(str(record['epoch']) for record in records)}), {parameters:,} averaged values; "
            f"sha256 {report['sha256']}"
        )
    if no_facts:
        print(
            f"mixer average: note: {no_facts}: {out} carries none, so `mixer predict` needs --config",
            file=sys.stderr,
        )
