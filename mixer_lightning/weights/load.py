"""Copying weights into a model (`load_weights`), and the architecture a state dict's shapes imply
(`infer_architecture`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.weights.file import FORMAT_NAMES, WeightsFile
from mixer_lightning.weights.io import read_weights


def load_weights(
    model: nn.Module,
    weights: WeightsFile | str | Path,
    *,
    field: str = "init_from",
    new_head: bool = True,
) -> list[str]:
    """Copy `weights` into `model`; messages for the user. With `new_head`, a head of another size (or
    none in the file) is not loaded but zeroed, as the Mixer paper starts fine-tuning (App. C); any other
    missing, unexpected or misshaped parameter is a `ConfigError` on `field` in the file's spelling."""
    if not isinstance(weights, WeightsFile):
        weights = read_weights(weights, field)
    expected = model.state_dict()
    given = dict(weights.state_dict)
    messages: list[str] = []
    head_keys = [k for k in expected if k.startswith("head.")]
    file_head = [k for k in given if k.startswith("head.")]
    if new_head and (head_keys or file_head):
        fits = set(head_keys) == set(file_head) and all(given[k].shape == expected[k].shape for k in head_keys)
        if not fits:
            file_classes = given["head.weight"].shape[0] if "head.weight" in given else 0
            model_classes = expected["head.weight"].shape[0] if "head.weight" in expected else 0
            for key in file_head:
                del given[key]
            head = getattr(model, "head", None)
            if isinstance(head, nn.Linear):
                with torch.no_grad():
                    head.weight.zero_()
                    if head.bias is not None:
                        head.bias.zero_()
            messages.append(
                f"{field}: the file's head has {file_classes} classes, the model {model_classes}: "
                + ("head re-initialised to zero (as the Mixer paper for fine-tuning)" if model_classes else "no head")
            )
            expected = {k: v for k, v in expected.items() if not k.startswith("head.")}

    name = FORMAT_NAMES[weights.format]
    fix = "build the architecture the weights were trained with (model.upscale: fine-tune at a larger image size)"
    for key, tensor in given.items():
        require(key in expected, field, f"{weights.file_key(key)} in {weights.path} ({name}) is not in the model", fix)
        if tuple(tensor.shape) != tuple(expected[key].shape):
            shapes = weights.file_shape(key, tensor.shape), weights.file_shape(key, expected[key].shape)
            problem = f"{weights.file_key(key)} in {weights.path} has shape {shapes[0]}, the model needs {shapes[1]}"
            raise ConfigError(field, problem, fix)
    missing = [k for k in expected if k not in given]
    more = f" and {len(missing) - 1} more parameters" if len(missing) > 1 else ""
    if missing:
        problem = (
            f"{weights.file_key(missing[0])} is missing from {weights.path} ({name}, {weights.num_blocks()} blocks)"
        )
        raise ConfigError(field, problem + more, fix)
    model.load_state_dict(given, strict=False)
    messages.insert(0, f"{field}: loaded {len(given)} tensors from {weights.path} ({name})")
    return messages


def infer_architecture(state_dict: Mapping[str, torch.Tensor], field: str = "weights") -> dict[str, Any]:
    """`MLPMixer` arguments that reproduce the shapes of a state dict in this project's layout: patch
    size, input channels and C from the stem, S0 (so the image size), S and D_S from the token-mixing
    MLPs, D_C, the depth and the classes. (LayerNorm ε and the activation are not in the weights.)"""
    require("stem.proj.weight" in state_dict, field, "no stem.proj.weight: not an MLP-Mixer")
    channels, in_chans, patch, _ = state_dict["stem.proj.weight"].shape
    first = state_dict.get("blocks.0.token_mixing.mlp.fc1.weight")
    require(first is not None, field, "no blocks.0.token_mixing.mlp.fc1.weight: not an MLP-Mixer")
    token_hidden, tokens_in = first.shape
    grid = math.isqrt(tokens_in)
    require(grid * grid == tokens_in, field, f"{tokens_in} input tokens are not a square patch grid")
    blocks = {int(m.group(1)) for k in state_dict if (m := re.match(r"blocks\.(\d+)\.", k))}
    head = state_dict.get("head.weight")
    return dict(
        num_classes=head.shape[0] if head is not None else 0,
        image_size=grid * patch,
        in_chans=in_chans,
        patch_size=patch,
        tokens=state_dict["blocks.0.token_mixing.mlp.fc2.weight"].shape[0],
        channels=channels,
        token_hidden=token_hidden,
        channel_hidden=state_dict["blocks.0.channel_mixing.mlp.fc1.weight"].shape[0],
        num_blocks=max(blocks) + 1,
        skip_layer="blocks.0.token_mixing.skip.proj.weight" in state_dict,
        permute=[f"blocks.{i}.token_mixing.permute_out.index" in state_dict for i in range(max(blocks) + 1)],
        # output-only RP: J2 without J1
        permute_j1=not any(k.endswith("permute_out.index") for k in state_dict)
        or any(k.endswith("permute_in.index") for k in state_dict),
    )
