"""Average the weights of several checkpoints of one model into one checkpoint (timm's
``avg_checkpoints.py``: post-training weight averaging, akin to SWA or a model soup of fine-tunes).

Every floating tensor of the network is summed in float64, divided by the number of checkpoints and
cast back to its dtype; integer and boolean buffers (an RP Mixer's permutations, an SW-MLP's sparsity
pattern) must be equal in every checkpoint. The checkpoints must hold the same network (class,
architecture, data facts, tensors); training settings (lr, optimiser, dropout) may differ.

The output is a weights-only checkpoint, as ``mixer convert`` writes: ``mixer test``, ``mixer predict``
and ``model.init_from`` take it. It carries the first checkpoint's hyper-parameters, the data facts
when all carry the same, and under ``mixer_average`` the path, sha256, epoch and step of each input.

Examples:
    mixer average --ckpt_path runs/x/version_0/checkpoints/epoch=*.ckpt --out runs/x/version_0/checkpoints/avg.ckpt
    mixer average --ckpt_path a.ckpt b.ckpt c.ckpt --out avg.ckpt --json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import ConfigError, require

# Network arguments that change how it is trained, not which function it computes.
TRAINING_ONLY = {"drop_rate", "drop_path", "init"}
DATA_HPARAMS = ("num_classes", "image_size", "in_chans", "upscale")


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt_path", nargs="+", required=True, help="two or more checkpoints of one model")
    parser.add_argument("--out", required=True, help="the averaged checkpoint to write (.ckpt)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists (atomically)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def network(checkpoint: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What fixes a checkpoint's function (its network class and architecture, the data facts), and the
    network's tensors (the training metrics' states left out)."""
    from mixer_lightning.tasks.classifier import NON_NETWORK_PREFIXES

    hparams = checkpoint["hyper_parameters"]
    net = hparams.get("net") or {}
    init_args = {k: v for k, v in (net.get("init_args") or {}).items() if k not in TRAINING_ONLY}
    identity = {"network": net.get("class_path"), **init_args, **{k: hparams.get(k) for k in DATA_HPARAMS}}
    state = {k: v for k, v in checkpoint["state_dict"].items() if not str(k).startswith(NON_NETWORK_PREFIXES)}
    return identity, state


def check_same_model(first: tuple[str, dict], other: tuple[str, dict]) -> None:
    """A `ConfigError` naming `other`'s file unless it holds the same network as `first`."""
    (path_a, a), (path_b, b) = first, other
    common = os.path.commonpath([os.path.abspath(path_a), os.path.abspath(path_b)])
    if common != os.path.dirname(common):  # name them below the folder they share: what tells them apart
        path_a, path_b = os.path.relpath(path_a, common), os.path.relpath(path_b, common)
    (identity_a, state_a), (identity_b, state_b) = network(a), network(b)
    fix = "average checkpoints of one run, or fine-tunes of one pretrained model"
    for key in sorted(set(identity_a) | set(identity_b)):
        value_a, value_b = identity_a.get(key), identity_b.get(key)
        require(value_a == value_b, "--ckpt_path", f"{path_b} has {key}={value_b!r}, {path_a} {key}={value_a!r}", fix)
    layout_a = {k: (tuple(v.shape), v.dtype) for k, v in state_a.items()}
    layout_b = {k: (tuple(v.shape), v.dtype) for k, v in state_b.items()}
    if layout_a != layout_b:
        key = next(k for k in sorted(set(layout_a) | set(layout_b)) if layout_a.get(k) != layout_b.get(k))
        problem = f"{key} is {layout_b.get(key)} in {path_b}, {layout_a.get(key)} in {path_a}"
        raise ConfigError("--ckpt_path", problem, fix)
    for key, tensor in state_a.items():
        if not tensor.is_floating_point() and not bool((tensor == state_b[key]).all()):
            problem = f"{key} differs: {path_b} and {path_a} drew other permutations or sparsity patterns"
            raise ConfigError("--ckpt_path", problem, "average checkpoints of one run")


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether checkpoints `a` and `b` hold the same network tensors, bit for bit."""
    import torch

    (_, state_a), (_, state_b) = network(a), network(b)
    return state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def average_state(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of every floating tensor over `states` (summed in float64, clamped to the dtype's range
    as timm does, cast back); every other tensor from the first (`check_same_model` found them equal)."""
    import torch

    averaged = {}
    for key, first in states[0].items():
        if not first.is_floating_point():
            averaged[key] = first.clone()
            continue
        total = sum(state[key].detach().to("cpu", torch.float64) for state in states)
        info = torch.finfo(first.dtype)
        averaged[key] = (total / len(states)).clamp(info.min, info.max).to(first.dtype)
    return averaged


def run(args: Namespace) -> None:
    import lightning
    import torch

    from mixer_lightning.safety.atomic import atomic_write, check_output_file, sha256_file
    from mixer_lightning.tasks.loading import read_checkpoint

    paths = [str(path) for path in args.ckpt_path]
    require(len(paths) >= 2, "--ckpt_path", f"averaging needs two or more checkpoints, got {len(paths)}")
    out = Path(args.out)
    require(out.suffix == ".ckpt", "--out", f"unknown output type {out.suffix!r}", "end it in .ckpt")
    check_output_file(out, "--out", args.overwrite)  # before reading anything: nothing written
    checkpoints, records = [], []
    for path in paths:
        checkpoint = read_checkpoint(path, "--ckpt_path")  # trusted names only, finite weights
        # The same weights twice would weigh them double: last.ckpt and the top-k file of the last epoch differ
        # in bytes (loop and callback state), not in the network's tensors.
        twice = [r["path"] for r, c in zip(records, checkpoints, strict=True) if same_tensors(c, checkpoint)]
        fix = "give each checkpoint once (last.ckpt holds the last epoch's weights: leave it or that epoch's file out)"
        require(not twice, "--ckpt_path", f"{path} holds the same weights as {twice[0] if twice else ''}", fix)
        if checkpoints:
            check_same_model((paths[0], checkpoints[0]), (path, checkpoint))
        checkpoints.append(checkpoint)
        records.append(
            {"path": path, "sha256": sha256_file(path)} | {k: checkpoint.get(k) for k in ("epoch", "global_step")}
        )
    state = average_state([network(checkpoint)[1] for checkpoint in checkpoints])
    facts = [checkpoint.get("data") for checkpoint in checkpoints]
    same_facts = facts[0] if facts[0] and all(fact == facts[0] for fact in facts) else None
    latest = {k: max((r[k] for r in records if isinstance(r[k], int)), default=0) for k in ("epoch", "global_step")}
    averaged = (
        latest
        | {  # the latest epoch and step averaged: what `mixer test` records with its results
            "pytorch-lightning_version": checkpoints[0].get("pytorch-lightning_version", lightning.__version__),
            "state_dict": state,
            "hparams_name": "kwargs",
            "hyper_parameters": {**checkpoints[0]["hyper_parameters"], "init_from": None},  # the weights are here
            "mixer_average": {"method": "mean (float64) of the floating tensors", "checkpoints": records},
        }
        | ({"data": same_facts} if same_facts else {})
    )
    with atomic_write(out, "wb", field="--out") as f:  # a kill or a full disk leaves an existing --out as it was
        torch.save(averaged, f)
    name = (checkpoints[0]["hyper_parameters"].get("net") or {}).get("class_path", "?").rsplit(".", 1)[-1]
    report = {"out": str(out), "sha256": sha256_file(out), "family": name, "checkpoints": records}
    report |= {"tensors": len(state), "data_facts": same_facts is not None}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        epochs = ", ".join(str(record["epoch"]) for record in records)
        print(f"Wrote {out}: the mean of {len(paths)} {name} checkpoints (epochs {epochs}); sha256 {report['sha256']}")
    if same_facts is None:
        print(f"mixer average: note: no common data facts: `mixer predict` of {out} needs --config", file=sys.stderr)
