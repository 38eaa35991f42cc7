"""Weights files into this project's key layout, whatever wrote them (`read_weights`): a Lightning
checkpoint of this project, timm weights (``.pth``/``.safetensors``), an official JAX ``.npz``
(github.com/google-research/vision_transformer), a hub-layout folder or a hub name (``timm:``,
``hf-hub:``). No code runs from a file: `mixer_lightning.safety.trust.load_torch_file`
(``weights_only=True``), safetensors, ``numpy.load(allow_pickle=False)``.

flax's ``nn.gelu`` is the tanh approximation, with which the official models were trained, so a JAX
file implies ``act="gelu_tanh"``; timm's Mixer uses the exact GELU.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.trust import load_torch_file
from mixer_lightning.weights.file import WeightsFile, layout_problem, schema_problem
from mixer_lightning.weights.hub_folder import read_hub_folder
from mixer_lightning.weights.keys import TIMM_NAMES, about, from_jax_key, from_timm_key, jax_to_torch

FIX = "give a checkpoint (.ckpt), timm weights (.pth/.safetensors), an official JAX .npz or a hub name"


def read_weights(path: str | Path, field: str = "init_from") -> WeightsFile:
    """The weights of `path` in this project's key layout; errors name `field` (``model.init_from``), and
    a NaN or infinite value is one (it would train or convert into NaN figures)."""
    weights = _read(path, field)
    for key, tensor in weights.state_dict.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
            problem = f"{weights.file_key(key)} in {weights.path} holds non-finite values ({nan:,} NaN, {inf:,} inf)"
            raise ConfigError(field, problem, "give weights of a run that did not diverge")
    return weights


def _read(path: str | Path, field: str) -> WeightsFile:
    text = str(path)
    if text.startswith("hf-hub:") or Path(text).is_dir():
        return read_hub_folder(text, field)
    if text.startswith("timm:"):
        from mixer_lightning.weights.timm import read_hub_weights  # imports timm: only for hub names

        return read_hub_weights(text, field)
    path = Path(path)
    require(path.is_file(), field, f"no such file: {path}", FIX)
    if path.suffix == ".npz":
        return _read_jax(path, field)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        raw: Any = load_file(str(path))
    else:
        raw = load_torch_file(path, field, FIX)
    require(isinstance(raw, Mapping), field, f"{path} holds a {type(raw).__name__}, not a state dict", FIX)
    hparams, fmt, data = {}, "mixer", None
    if isinstance(raw.get("state_dict"), Mapping):
        if "pytorch-lightning_version" in raw:
            problem = schema_problem(dict(raw))
            require(problem is None, field, f"{str(path)!r} is damaged: {problem}", "give a `mixer fit` checkpoint")
            problem = layout_problem(dict(raw))
            require(
                problem is None, field, f"{str(path)!r}: {problem}", "give a checkpoint of this release's `mixer fit`"
            )
            fmt, hparams, data = "lightning", dict(raw.get("hyper_parameters") or {}), raw.get("data")
        raw = raw["state_dict"]
    elif isinstance(raw.get("model"), Mapping):  # {"model": state_dict}, as DeiT/ResMLP files
        raw = raw["model"]
    state_dict = _strip_prefix({k: v for k, v in raw.items() if isinstance(v, torch.Tensor)})
    require(bool(state_dict), field, f"{path} contains no tensors", FIX)
    if fmt != "lightning" and any(TIMM_NAMES.search(k) for k in state_dict):
        fmt = "timm"
        state_dict = {from_timm_key(k): v for k, v in state_dict.items()}
    class_path = hparams.pop("_class_path", None)
    architecture = {k: v for k, v in hparams.items() if not k.startswith("_")}
    return WeightsFile(str(path), fmt, state_dict, architecture, class_path, data=data)


def _strip_prefix(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop a wrapper prefix every key shares (``net.``: our LightningModule, ``module.``: DDP,
    ``model.``); of a LightningModule with other stateful children (metrics), the network's only."""
    for prefix in ("net.", "module.", "model."):
        if all(k.startswith(prefix) for k in state_dict):
            return {k[len(prefix) :]: v for k, v in state_dict.items()}
    if any(k.startswith("net.") for k in state_dict):
        return {k[4:]: v for k, v in state_dict.items() if k.startswith("net.")}
    return state_dict


def _read_jax(path: Path, field: str) -> WeightsFile:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for prefix in ("opt/target/", "params/", "target/"):  # the training code's checkpoints nest them
        if arrays and all(k.startswith(prefix) for k in arrays):
            arrays = {k[len(prefix) :]: v for k, v in arrays.items()}
    state_dict = {}
    for key, array in arrays.items():
        ours = from_jax_key(key)
        if ours is None:
            problem = about(str(path), f"{key!r} is not a parameter of the official MLP-Mixer")
            raise ConfigError(field, problem, "give a Mixer checkpoint (stem/kernel, MixerBlock_0/..., head/...)")
        state_dict[ours] = jax_to_torch(key, array)
    return WeightsFile(str(path), "jax", state_dict, {"act": "gelu_tanh"})
