"""Exporting a trained network for inference: ONNX, ``torch.export`` (``.pt2``) and TorchScript, each
checked against the eager network on a batch. Tracers follow neither a `Permutation` (a custom autograd
function; for inference the gather ``x[..., index]``) nor a `SparseLinear` (CSR; for inference an
``nn.Linear`` holding the dense s·(M ⊙ W), refused past `MAX_DENSE_ENTRIES`): `exportable` swaps them.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.pk import Permutation
from mixer_lightning.models.sparse import SparseLinear
from mixer_lightning.safety.atomic import atomic_write

Format = Literal["onnx", "pt2", "torchscript"]
FORMATS: tuple[str, ...] = ("onnx", "pt2", "torchscript")
SUFFIXES = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}
MAX_DENSE_ENTRIES = 2**28  # 1 GiB of float32 per SW-MLP layer
METADATA_FILE = "mixer.json"  # the metadata among a TorchScript / .pt2 file's extra files


class GatherPermutation(nn.Module):
    """y = x[..., index]: a frozen permutation as a plain gather (inference only)."""

    def __init__(self, index: torch.Tensor):
        super().__init__()
        self.register_buffer("index", index.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, -1, self.index)


def _dense_linear(layer: SparseLinear) -> nn.Linear:
    entries = layer.out_features * layer.in_features
    require(
        entries <= MAX_DENSE_ENTRIES,
        "ckpt_path",
        f"an SW-MLP layer of {layer.out_features}×{layer.in_features} would need a dense weight of {entries:,} "
        "entries to export",
        "export a narrower SW-MLP (the exported form is dense)",
    )
    dense = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    with torch.no_grad():
        dense.weight.copy_(layer.effective_weight())
        if layer.bias is not None:
            dense.bias.copy_(layer.bias)
    return dense


def exportable(net: nn.Module) -> nn.Module:
    """A copy of `net` in eval mode, in float32 on the CPU, with every `Permutation` and `SparseLinear`
    replaced by an equivalent traceable module (see the module docstring). `net` is not changed."""
    net = copy.deepcopy(net).float().cpu().eval()
    for name, module in list(net.named_modules()):
        if isinstance(module, Permutation):
            replacement: nn.Module = GatherPermutation(module.index)
        elif isinstance(module, SparseLinear):
            replacement = _dense_linear(module)
        else:
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(net.get_submodule(parent_name) if parent_name else net, child, replacement)
    return net


# Protobuf cannot serialise a message over 2 GiB: larger ONNX models need external data files.
ONNX_MAX_BYTES = 2**31 - 1


def inference_metadata(facts: dict[str, Any] | None, **more: Any) -> dict[str, Any]:
    """What a runtime needs besides the network to reproduce ``mixer predict``: a checkpoint's data facts
    (class names, image size, mean, std, crop, ...) and `more` (family, version, checkpoint hash)."""
    return {**(facts or {}), **more}


def _onnx_bytes(net: nn.Module, example: torch.Tensor, metadata: dict[str, Any]) -> bytes:
    """The ONNX model of `net` (input ``image``, output ``logits``, batch dynamic), `metadata` as JSON text
    in its ``metadata_props`` (onnxruntime: ``session.get_modelmeta().custom_metadata_map``)."""
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch.onnx's exporter needs it)
    except ImportError:
        raise ConfigError(
            "format", "ONNX export needs the packages onnx and onnxscript", "pip install 'mixer-lightning[export]'"
        ) from None
    size = sum(p.numel() * p.element_size() for p in net.parameters())
    require(
        size < ONNX_MAX_BYTES,
        "format",
        f"the network's weights take {size / 2**30:.1f} GiB, over the 2 GiB an ONNX file holds without external data",
        "export it with --format pt2 or torchscript",
    )
    batch = torch.export.Dim("batch", min=1)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter prints its progress on stdout
        program = torch.onnx.export(
            net,
            (example,),
            dynamo=True,
            dynamic_shapes=({0: batch},),
            input_names=["image"],
            output_names=["logits"],
            verbose=False,
        )
    model = program.model_proto
    onnx.helper.set_model_props(model, {key: json.dumps(value) for key, value in metadata.items()})
    return model.SerializeToString()


@contextlib.contextmanager
def _torchscript_quiet():
    """No TorchScript deprecation warnings (trace, save, load) for a format the user asked for by name."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
        yield


def _serialise(net: nn.Module, fmt: str, example: torch.Tensor, metadata: dict[str, Any]) -> bytes:
    """`net` exported in `fmt`, as bytes: in memory, then `atomic_write` (torch.export's own writer aborts
    the process on a full disk)."""
    if fmt == "onnx":
        return _onnx_bytes(net, example, metadata)
    buffer = io.BytesIO()
    extra = {METADATA_FILE: json.dumps(metadata)}
    if fmt == "pt2":
        batch = torch.export.Dim("batch", min=1)
        program = torch.export.export(net, (example,), dynamic_shapes=({0: batch},))
        torch.export.save(program, buffer, extra_files=extra)
    else:
        with _torchscript_quiet():
            torch.jit.save(torch.jit.trace(net, example), buffer, _extra_files=extra)
    return buffer.getvalue()


def _run_onnx(path: Path, x: torch.Tensor) -> torch.Tensor:
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError(
            "format", "checking an ONNX export needs onnxruntime", "pip install 'mixer-lightning[export]'"
        ) from None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


def export_network(
    net: nn.Module,
    fmt: str,
    path: str | Path,
    image_size: int,
    in_chans: int,
    batch_size: int = 2,
    seed: int = 0,
    metadata: dict[str, Any] | None = None,
    field: str = "out",
) -> float:
    """Export `net` to `path` in `fmt` (atomically; `metadata` in the file: ONNX ``metadata_props``, else
    ``mixer.json`` among the extra files) and return the largest difference between the file's logits and
    the eager network's on `batch_size` + 1 random images (one more than traced: the batch is dynamic)."""
    path = Path(path)
    generator = torch.Generator().manual_seed(seed)
    example = torch.randn(batch_size, in_chans, image_size, image_size, generator=generator)
    check = torch.randn(batch_size + 1, in_chans, image_size, image_size, generator=generator)
    eager = copy.deepcopy(net).float().cpu().eval()
    traced = exportable(net)
    with torch.no_grad():
        data = _serialise(traced, fmt, example, metadata or {})
    with atomic_write(path, "wb", field=field) as f:
        f.write(data)
    with torch.no_grad():
        expected = eager(check)
        if fmt == "onnx":
            got = _run_onnx(path, check)
        elif fmt == "pt2":
            got = torch.export.load(path).module()(check)
        else:
            with _torchscript_quiet():
                got = torch.jit.load(str(path))(check)
    return float((got - expected).abs().max())
