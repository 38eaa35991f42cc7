"""Reading weights files into this project's key layout, whatever wrote them (`read_weights`).

- a Lightning checkpoint of this project (``mixer fit`` or ``mixer convert``);
- timm weights (``.pth``/``.safetensors``, a plain state dict);
- an official JAX checkpoint (``.npz``, github.com/google-research/vision_transformer);
- a name on a hub (``timm:...``, ``hf-hub:...``; `mixer_lightning.weights.timm.read_hub_weights`).

Everything is read without executing code: ``torch.load(weights_only=True)`` through
`mixer_lightning.safety.trust.load_torch_file` (which also checks the class names a checkpoint carries),
safetensors, or ``numpy.load(allow_pickle=False)``.

Activation. flax's ``nn.gelu`` is the tanh approximation of GELU (``approximate=True`` by default),
and the official models were trained with it, so weights read from a JAX file imply
``act="gelu_tanh"`` (`WeightsFile.architecture`); timm's Mixer uses the exact erf GELU.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.trust import load_torch_file
from mixer_lightning.weights.file import HUB_PREFIXES, WeightsFile
from mixer_lightning.weights.hub_folder import is_hub_folder, read_hub_folder
from mixer_lightning.weights.keys import TIMM_NAMES, about, from_jax_key, from_timm_key, jax_to_torch, timm_key


def read_weights(path: str | Path, field: str = "init_from") -> WeightsFile:
    """Read a weights file into this project's key layout (see the module docstring for the formats).

    ``field`` names the setting the path came from, in errors (``model.init_from``, ``--from``).
    A file that needs pickled objects is refused with the fix.
    """
    if is_hub_folder(path):  # `mixer push`'s layout: a folder, or an hf-hub: repo of a mixer-lightning model
        return read_hub_folder(path, field)
    if str(path).startswith(HUB_PREFIXES):
        from mixer_lightning.weights.timm import read_hub_weights  # imports timm: only for hub names

        return read_hub_weights(str(path), field)
    path = Path(path)
    require(
        path.is_file(),
        field,
        f"no such file: {path}",
        "give a checkpoint (.ckpt), timm weights (.pth/.safetensors) or an official JAX .npz",
    )
    if path.suffix == ".npz":
        return _read_jax(path, field)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            raw: Any = load_file(str(path))
        except Exception as error:  # safetensors raises its own SafetensorError
            raise ConfigError(field, f"{path} is not a safetensors file ({error})") from None
    else:
        raw = load_torch_file(path, field, "give a .pth/.ckpt file")  # class names checked there
    require(isinstance(raw, Mapping), field, f"{path} holds a {type(raw).__name__}, not a state dict")
    hparams, class_path, fmt, data = {}, None, "mixer", None
    if "state_dict" in raw and isinstance(raw["state_dict"], Mapping):
        if "pytorch-lightning_version" in raw:
            fmt = "lightning"
            hparams = dict(raw.get("hyper_parameters") or {})
            class_path = hparams.pop("_class_path", None)
            data = dict(raw["data"]) if isinstance(raw.get("data"), Mapping) else None
        raw = raw["state_dict"]
    elif "model" in raw and isinstance(raw["model"], Mapping):  # {"model": state_dict}, as DeiT/ResMLP files
        raw = raw["model"]
    state_dict = _strip_prefix({k: v for k, v in raw.items() if isinstance(v, torch.Tensor)})
    require(bool(state_dict), field, f"{path} contains no tensors")
    if fmt != "lightning" and any(TIMM_NAMES.search(k) for k in state_dict):
        fmt = "timm"
        state_dict = {from_timm_key(k, field, str(path)): v for k, v in state_dict.items()}
        _refuse_glu(state_dict, timm_key, field, str(path))
    architecture = {k: v for k, v in hparams.items() if not k.startswith("_")}
    return WeightsFile(str(path), fmt, state_dict, architecture, class_path, data=data)


def _strip_prefix(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop a wrapper prefix every key shares: ``net.`` (our LightningModule), ``module.`` (DDP),
    ``model.``; a Lightning checkpoint's other entries (metrics) are not weights."""
    for prefix in ("net.", "module.", "model."):
        if state_dict and all(k.startswith(prefix) for k in state_dict):
            return {k[len(prefix) :]: v for k, v in state_dict.items()}
    if any(k.startswith("net.") for k in state_dict):  # a LightningModule with other stateful children
        return {k[4:]: v for k, v in state_dict.items() if k.startswith("net.")}
    return state_dict


def _read_jax(path: Path, field: str) -> WeightsFile:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as error:
        raise ConfigError(field, f"{path} needs pickled Python objects ({error})", "save plain arrays") from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(field, f"{path} is not an .npz archive ({error})") from None
    # Checkpoints saved by the training code nest the parameters under a common prefix.
    for prefix in ("opt/target/", "params/", "target/"):
        if arrays and all(k.startswith(prefix) for k in arrays):
            arrays = {k[len(prefix) :]: v for k, v in arrays.items()}
    state_dict = {}
    for key, array in arrays.items():
        ours = from_jax_key(key)
        if ours is None:
            raise ConfigError(
                field,
                about(str(path), f"{key!r} is not a parameter of the official MLP-Mixer"),
                "give a Mixer checkpoint (keys stem/kernel, MixerBlock_0/..., pre_head_layer_norm/..., head/...)",
            )
        state_dict[ours] = jax_to_torch(key, array, field, str(path))
    # flax nn.gelu defaults to the tanh approximation: the official models compute that function.
    return WeightsFile(str(path), "jax", state_dict, {"act": "gelu_tanh"})


def _refuse_glu(
    state_dict: Mapping[str, torch.Tensor], spell: Callable[[str], str], field: str = "weights", source: str = ""
) -> None:
    """A gated (GLU) MLP's fc1 is twice as wide as its fc2's input (timm ``gmixer_*``): refuse it."""
    for key, weight in state_dict.items():
        if key.endswith("mlp.fc1.weight"):
            fc2 = state_dict.get(key.replace("fc1", "fc2"))
            if fc2 is not None and weight.ndim == 2 and fc2.ndim == 2 and weight.shape[0] == 2 * fc2.shape[1]:
                raise ConfigError(
                    field,
                    about(
                        source,
                        f"{spell(key)} is twice as wide as {spell(key.replace('fc1', 'fc2'))}'s input: a "
                        "gated (GLU, gmixer) MLP, which an MLP-Mixer does not have",
                    ),
                    "convert a plain MLP-Mixer",
                )
