"""MLP-Mixer weights from timm and from the official JAX checkpoints, and back to JAX.

- `from_timm(timm_model)`: an `MLPMixer` computing the same function as a timm ``MlpMixer`` built of
  plain Mixer blocks (every registered ``mixer_*`` variant, or a custom one).
- `read_weights(path)`: a weights file in this project's key layout, whatever it was written by:
  a Lightning checkpoint of this project (``mixer fit`` or ``mixer convert``), timm weights
  (``.pth``/``.safetensors``, a plain state dict read with ``torch.load(weights_only=True)``), or an
  official JAX checkpoint (``.npz``, github.com/google-research/vision_transformer).
- `load_weights(model, weights)`: copy them into a model, naming any missing or misshaped key in
  the file's own spelling, and re-initialising the head when the number of classes differs.
- `to_jax_npz(model, path)`: write a model in the official JAX layout.

Layouts. The JAX model (Mixer supplementary, Listing 1; ``vit_jax/models_mixer.py``) is flax:
``stem`` is an ``nn.Conv`` with an HWIO kernel (P, P, in, C), every ``nn.Dense`` has an (in, out)
kernel (PyTorch's ``nn.Linear`` stores (out, in)), LayerNorms have ``scale`` and ``bias``; block i
is ``MixerBlock_{i}`` with ``LayerNorm_0`` → ``token_mixing/Dense_{0,1}`` → ``LayerNorm_1`` →
``channel_mixing/Dense_{0,1}``, then ``pre_head_layer_norm`` and ``head``. timm's ``MlpMixer``
names block i's parts ``norm1``, ``mlp_tokens``, ``norm2``, ``mlp_channels``.

Activation. flax's ``nn.gelu`` is the tanh approximation of GELU (``approximate=True`` by default),
and the official models were trained with it, so weights read from a JAX file imply
``act="gelu_tanh"`` (`WeightsFile.architecture`); timm's Mixer uses the exact erf GELU.
"""

from __future__ import annotations

import math
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.mlp_mixer import MLPMixer
from mixer_lightning.trust import check_class_paths, load_torch_file

Format = Literal["lightning", "timm", "jax", "mixer"]

FORMAT_NAMES = {
    "lightning": "a mixer-lightning checkpoint",
    "mixer": "a mixer-lightning state dict",
    "timm": "timm MlpMixer weights",
    "jax": "an official JAX (flax) checkpoint",
}

# ---------------------------------------------------------------------------------------------
# Key layouts: each maps this project's parameter names to the file's, in both directions.

_OUR_BLOCK = re.compile(r"blocks\.(\d+)\.(token_mixing|channel_mixing)\.(norm|mlp\.fc1|mlp\.fc2)\.(weight|bias)")
_TOP_LEVEL = ("stem.proj.weight", "stem.proj.bias", "norm.weight", "norm.bias", "head.weight", "head.bias")

_TIMM_PART = {"norm1": "token_mixing.norm", "mlp_tokens": "token_mixing.mlp", "norm2": "channel_mixing.norm",
              "mlp_channels": "channel_mixing.mlp"}  # fmt: skip
_TIMM_PART_INV = {ours: timm for timm, ours in _TIMM_PART.items()}
_TIMM_BLOCK = re.compile(r"blocks\.(\d+)\.(norm1|norm2|mlp_tokens|mlp_channels)\.(fc1\.|fc2\.)?(weight|bias)")

# Keys of timm's other MlpMixer block types, and what in them a plain Mixer lacks.
_TIMM_UNSUPPORTED = [
    (re.compile(r"\.(linear_tokens|ls1|ls2)\b|\.(alpha|beta)$"),
     "ResMLP blocks (affine 'norm', layer scale, a single linear token-mixing layer)"),
    (re.compile(r"\.gate\.|^blocks\.\d+\.norm\.|mlp_channels\.gate"),
     "gMLP blocks (spatial gating unit instead of token mixing)"),
    (re.compile(r"^stem\.norm\."), "a LayerNorm after the stem (stem_norm=True)"),
]  # fmt: skip


# Names only timm's MlpMixer family uses (Mixer, GLU-Mixer, ResMLP, gMLP blocks): a file with them is timm's.
_TIMM_NAMES = re.compile(r"^blocks\.\d+\.(norm1|norm2|mlp_tokens|mlp_channels|linear_tokens|ls1|ls2)\b")


def timm_key(key: str) -> str:
    """This project's parameter name → timm's."""
    m = _OUR_BLOCK.fullmatch(key)
    if m is None:
        return key
    block, axis, part, kind = m.groups()
    sub, _, fc = part.partition(".")
    name = _TIMM_PART_INV[f"{axis}.{sub}"]
    return f"blocks.{block}.{name}.{fc + '.' if fc else ''}{kind}"


def from_timm_key(key: str) -> str:
    """timm's parameter name → this project's (`ConfigError` for what a plain Mixer does not have)."""
    for pattern, what in _TIMM_UNSUPPORTED:
        if pattern.search(key):
            raise ConfigError(
                "weights", f"{key!r} belongs to {what}, which an MLP-Mixer does not have", "convert a plain MLP-Mixer"
            )
    m = _TIMM_BLOCK.fullmatch(key)
    if m is not None:
        block, part, fc, kind = m.groups()
        return f"blocks.{block}.{_TIMM_PART[part]}.{fc or ''}{kind}"
    return key


def jax_key(key: str) -> str:
    """This project's parameter name → the official JAX checkpoint's."""
    m = _OUR_BLOCK.fullmatch(key)
    if m is not None:
        block, axis, part, kind = m.groups()
        if part == "norm":
            norm = "LayerNorm_0" if axis == "token_mixing" else "LayerNorm_1"
            return f"MixerBlock_{block}/{norm}/{'scale' if kind == 'weight' else 'bias'}"
        dense = "Dense_0" if part == "mlp.fc1" else "Dense_1"
        return f"MixerBlock_{block}/{axis}/{dense}/{'kernel' if kind == 'weight' else 'bias'}"
    top = {"stem.proj.weight": "stem/kernel", "stem.proj.bias": "stem/bias",
           "norm.weight": "pre_head_layer_norm/scale", "norm.bias": "pre_head_layer_norm/bias",
           "head.weight": "head/kernel", "head.bias": "head/bias"}  # fmt: skip
    return top.get(key, key)


_JAX_BLOCK = re.compile(
    r"MixerBlock_(\d+)/(?:(LayerNorm_[01])/(scale|bias)|(token_mixing|channel_mixing)/(Dense_[01])/(kernel|bias))"
)
_JAX_TOP = {"stem/kernel": "stem.proj.weight", "stem/bias": "stem.proj.bias",
            "pre_head_layer_norm/scale": "norm.weight", "pre_head_layer_norm/bias": "norm.bias",
            "head/kernel": "head.weight", "head/bias": "head.bias"}  # fmt: skip


def from_jax_key(key: str) -> str | None:
    """The official JAX checkpoint's parameter name → this project's (None if it is not a Mixer's)."""
    if key in _JAX_TOP:
        return _JAX_TOP[key]
    m = _JAX_BLOCK.fullmatch(key)
    if m is None:
        return None
    block, norm, norm_kind, axis, dense, dense_kind = m.groups()
    if norm is not None:
        axis = "token_mixing" if norm == "LayerNorm_0" else "channel_mixing"
        return f"blocks.{block}.{axis}.norm.{'weight' if norm_kind == 'scale' else 'bias'}"
    fc = "fc1" if dense == "Dense_0" else "fc2"
    return f"blocks.{block}.{axis}.mlp.{fc}.{'weight' if dense_kind == 'kernel' else 'bias'}"


def _jax_to_torch(key: str, array: np.ndarray) -> torch.Tensor:
    """A flax array as the PyTorch tensor: HWIO conv kernel → OIHW, (in, out) dense kernel → (out, in)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if key == "stem/kernel":
        require(tensor.ndim == 4, "weights", f"{key} must be a 4-D HWIO kernel, got shape {tuple(tensor.shape)}")
        return tensor.permute(3, 2, 0, 1).contiguous()
    if key.endswith("/kernel"):
        require(tensor.ndim == 2, "weights", f"{key} must be a 2-D (in, out) kernel, got shape {tuple(tensor.shape)}")
        return tensor.t().contiguous()
    return tensor


def _torch_to_jax(key: str, tensor: torch.Tensor) -> np.ndarray:
    """Inverse of `_jax_to_torch` (``key`` is this project's name)."""
    tensor = tensor.detach().cpu()
    if key == "stem.proj.weight":
        tensor = tensor.permute(2, 3, 1, 0)
    elif key.endswith(".weight") and tensor.ndim == 2:
        tensor = tensor.t()
    return np.ascontiguousarray(tensor.numpy())


def _jax_shape(key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A PyTorch shape in the JAX layout, for error messages."""
    if key == "stem.proj.weight" and len(shape) == 4:
        return (shape[2], shape[3], shape[1], shape[0])
    if key.endswith(".weight") and len(shape) == 2:
        return (shape[1], shape[0])
    return shape


# ---------------------------------------------------------------------------------------------
# Reading files.


@dataclass
class WeightsFile:
    """Weights read from a file, in this project's key layout.

    Attributes:
        path: the file.
        format: what wrote it (see `FORMAT_NAMES`).
        state_dict: parameter name → tensor, this project's names and PyTorch layouts.
        architecture: architecture arguments the file implies (a mixer-lightning checkpoint's saved
            hyper-parameters; ``act="gelu_tanh"`` for a JAX file), to use where the user gives none.
        class_path: the LightningModule class of a mixer-lightning checkpoint.
        preprocessing: what the weights were trained on, from timm's ``pretrained_cfg`` (``mean``,
            ``std``, ``crop_pct``, ``interpolation``, ``input_size``), for weights named on a hub.
    """

    path: str
    format: Format
    state_dict: dict[str, torch.Tensor]
    architecture: dict[str, Any] = field(default_factory=dict)
    class_path: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)

    def file_key(self, key: str) -> str:
        """This project's parameter name as the file spells it."""
        return {"timm": timm_key, "jax": jax_key}.get(self.format, lambda k: k)(key)

    def file_shape(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return _jax_shape(key, tuple(shape)) if self.format == "jax" else tuple(shape)

    def num_blocks(self) -> int:
        blocks = {int(m.group(1)) for k in self.state_dict if (m := re.match(r"blocks\.(\d+)\.", k))}
        return max(blocks) + 1 if blocks else 0


def _torch_load(path: Path, field: str) -> Any:
    return load_torch_file(path, field, "give a .pth/.ckpt file")


def _strip_prefix(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop a wrapper prefix every key shares: ``net.`` (our LightningModule), ``module.`` (DDP),
    ``model.``; a Lightning checkpoint's other entries (metrics) are not weights."""
    for prefix in ("net.", "module.", "model."):
        if state_dict and all(k.startswith(prefix) for k in state_dict):
            return {k[len(prefix) :]: v for k, v in state_dict.items()}
    if any(k.startswith("net.") for k in state_dict):  # a LightningModule with other stateful children
        return {k[4:]: v for k, v in state_dict.items() if k.startswith("net.")}
    return state_dict


def read_weights(path: str | Path, field: str = "init_from") -> WeightsFile:
    """Read a weights file into this project's key layout (see the module docstring for the formats).

    ``field`` names the setting the path came from, in errors (``model.init_from``, ``--from``).
    Everything is read without executing code: ``torch.load(weights_only=True)``, safetensors, or
    ``numpy.load(allow_pickle=False)``; a file that needs pickled objects is refused with the fix.
    """
    if str(path).startswith(HUB_PREFIXES):
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
        raw = _torch_load(path, field)
    require(isinstance(raw, Mapping), field, f"{path} holds a {type(raw).__name__}, not a state dict")
    hparams, class_path, fmt = {}, None, "mixer"
    if "state_dict" in raw and isinstance(raw["state_dict"], Mapping):
        if "pytorch-lightning_version" in raw:
            fmt = "lightning"
            hparams = dict(raw.get("hyper_parameters") or {})
            check_class_paths(hparams, field, str(path))  # names are compared, never imported; still refused
            class_path = hparams.pop("_class_path", None)
        raw = raw["state_dict"]
    elif "model" in raw and isinstance(raw["model"], Mapping):  # {"model": state_dict}, as DeiT/ResMLP files
        raw = raw["model"]
    state_dict = _strip_prefix({k: v for k, v in raw.items() if isinstance(v, torch.Tensor)})
    require(bool(state_dict), field, f"{path} contains no tensors")
    if fmt != "lightning" and any(_TIMM_NAMES.search(k) for k in state_dict):
        fmt = "timm"
        with _field(field, path):
            state_dict = {from_timm_key(k): v for k, v in state_dict.items()}
            _refuse_glu(state_dict, timm_key)
    architecture = {k: v for k, v in hparams.items() if not k.startswith("_")}
    return WeightsFile(str(path), fmt, state_dict, architecture, class_path)


HUB_PREFIXES = ("timm:", "hf-hub:")
PREPROCESSING_KEYS = ("mean", "std", "crop_pct", "interpolation", "input_size")


def read_hub_weights(name: str, field: str = "init_from") -> WeightsFile:
    """Weights named on a hub, through timm and huggingface_hub (their cache, ``HF_HUB_CACHE``, and
    ``HF_HUB_OFFLINE=1`` apply): ``timm:mixer_b16_224.goog_in21k_ft_in1k`` (a timm model name with its
    pretrained tag) or ``hf-hub:ORG/REPO`` (a timm-format hub repository: config.json + weights). The
    architecture is the timm model's (so no preset is needed) and ``preprocessing`` its
    ``pretrained_cfg``."""
    import timm

    model_name = name.removeprefix("timm:")
    try:
        timm_model = timm.create_model(model_name, pretrained=True)
    except RuntimeError as error:
        if "Unknown model" in str(error) or "Invalid pretrained tag" in str(error):
            raise ConfigError(field, f"timm knows no model {model_name!r}", "see timm.list_pretrained('mixer*')") from None
        raise
    except Exception as error:  # huggingface_hub: LocalEntryNotFoundError, OfflineModeIsEnabled, connection errors
        cause = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise ConfigError(
            field,
            f"cannot fetch {name!r} from the hub or its cache ({type(error).__name__}: {cause})",
            "download it once where the hub is reachable (it is then cached; HF_HUB_OFFLINE=1 uses the cache), "
            "or give a local weights file",
        ) from None
    try:
        architecture = timm_architecture(timm_model)
    except ConfigError as error:
        raise ConfigError(field, f"{name}: {error.problem}", error.fix) from None
    for fact in ("num_classes", "image_size", "in_chans"):  # facts of the data, not of the architecture
        architecture.pop(fact)
    architecture.pop("drop_rate"), architecture.pop("drop_path")  # training settings, not the function
    cfg = getattr(timm_model, "pretrained_cfg", None) or {}
    preprocessing = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items() if k in PREPROCESSING_KEYS}
    return WeightsFile(name, "timm", _timm_state_dict(timm_model), architecture, None, preprocessing)


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
    with _field(field, path):
        for key, array in arrays.items():
            ours = from_jax_key(key)
            if ours is None:
                raise ConfigError(
                    "weights", f"{key!r} is not a parameter of the official MLP-Mixer",
                    "give a Mixer checkpoint (keys stem/kernel, MixerBlock_0/..., pre_head_layer_norm/..., head/...)",
                )  # fmt: skip
            state_dict[ours] = _jax_to_torch(key, array)
    # flax nn.gelu defaults to the tanh approximation: the official models compute that function.
    return WeightsFile(str(path), "jax", state_dict, {"act": "gelu_tanh"})


class _field:
    """Re-raise a `ConfigError` from inside as one on ``field``, naming the file."""

    def __init__(self, field: str, path: Path | str):
        self.field, self.path = field, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if isinstance(error, ConfigError) and error.field == "weights":
            raise ConfigError(self.field, f"{self.path}: {error.problem}", error.fix) from None
        return False


def _refuse_glu(state_dict: Mapping[str, torch.Tensor], spell: Callable[[str], str]) -> None:
    """A gated (GLU) MLP's fc1 is twice as wide as its fc2's input (timm ``gmixer_*``): refuse it."""
    for key, weight in state_dict.items():
        if key.endswith("mlp.fc1.weight"):
            fc2 = state_dict.get(key.replace("fc1", "fc2"))
            if fc2 is not None and weight.ndim == 2 and fc2.ndim == 2 and weight.shape[0] == 2 * fc2.shape[1]:
                raise ConfigError(
                    "weights",
                    f"{spell(key)} is twice as wide as {spell(key.replace('fc1', 'fc2'))}'s input: a gated (GLU, "
                    "gmixer) MLP, which an MLP-Mixer does not have",
                    "convert a plain MLP-Mixer",
                )


# ---------------------------------------------------------------------------------------------
# Loading into a model.


def load_weights(
    model: nn.Module,
    weights: WeightsFile | str | Path,
    *,
    field: str = "init_from",
    new_head: bool = True,
) -> list[str]:
    """Copy ``weights`` into ``model`` and return messages for the user.

    With ``new_head``, a head of another size than the model's (or none in the file) is not loaded:
    the model's head is re-initialised to zero, as the Mixer paper initialises the head for
    fine-tuning, and a message says so. Any other missing, unexpected or misshaped parameter is a
    `ConfigError` on ``field`` naming the key as the file spells it.
    """
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
    for key, tensor in given.items():
        if key not in expected:
            raise ConfigError(
                field,
                f"{weights.file_key(key)} in {weights.path} ({name}) is not a parameter of the model",
                "build the architecture the weights were trained with (model.preset and architecture arguments)",
            )
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise ConfigError(
                field,
                f"{weights.file_key(key)} in {weights.path} has shape {weights.file_shape(key, tensor.shape)}, "
                f"the model needs {weights.file_shape(key, expected[key].shape)}",
                "build the architecture the weights were trained with (model.preset, architecture arguments, "
                "data.image_size; use model.upscale to fine-tune at a larger image size)",
            )
    missing = [k for k in expected if k not in given]
    if missing:
        raise ConfigError(
            field,
            f"{weights.file_key(missing[0])} is missing from {weights.path} ({name}, {weights.num_blocks()} blocks)"
            + (f" and {len(missing) - 1} more parameters" if len(missing) > 1 else ""),
            "build the architecture the weights were trained with (model.preset and architecture arguments)",
        )
    model.load_state_dict(given, strict=False)
    messages.insert(0, f"{field}: loaded {len(given)} tensors from {weights.path} ({name})")
    return messages


def infer_architecture(state_dict: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """`MLPMixer` arguments that reproduce the shapes of a state dict in this project's layout: patch
    size, input channels and C from the stem, S0 (so the image size), S and D_S from the token-mixing
    MLPs, D_C, the depth and the classes. (LayerNorm ε and the activation are not in the weights.)"""
    require("stem.proj.weight" in state_dict, "weights", "no stem.proj.weight: not an MLP-Mixer")
    channels, in_chans, patch, _ = state_dict["stem.proj.weight"].shape
    first = state_dict.get("blocks.0.token_mixing.mlp.fc1.weight")
    require(first is not None, "weights", "no blocks.0.token_mixing.mlp.fc1.weight: not an MLP-Mixer")
    token_hidden, tokens_in = first.shape
    grid = math.isqrt(tokens_in)
    require(grid * grid == tokens_in, "weights", f"{tokens_in} input tokens are not a square patch grid")
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
        permute=[f"blocks.{i}.token_mixing.permute_in.index" in state_dict for i in range(max(blocks) + 1)],
    )


# ---------------------------------------------------------------------------------------------
# timm models.


def _timm_activation(act: nn.Module) -> str | None:
    from timm.layers.activations import GELU, GELUTanh

    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    if type(act) is GELU:
        return "gelu"
    if type(act) is GELUTanh:
        return "gelu_tanh"
    return None


def timm_architecture(timm_model: nn.Module) -> dict[str, Any]:
    """`MLPMixer` arguments of a timm ``MlpMixer`` built of plain Mixer blocks; a `ConfigError`
    naming what is not a plain MLP-Mixer (gmixer's GLU MLPs, ResMLP's affine blocks, gMLP's spatial
    gating, a stem norm, another activation ...)."""
    from timm.layers import Mlp
    from timm.models.mlp_mixer import MixerBlock, MlpMixer

    def refuse(what: str) -> ConfigError:
        return ConfigError("timm_model", f"{what}, which an MLP-Mixer does not have", "convert a plain MLP-Mixer")

    if not isinstance(timm_model, MlpMixer):
        raise refuse(f"a {type(timm_model).__name__} is not a timm MlpMixer")
    stem = timm_model.stem
    if not isinstance(stem.norm, nn.Identity):
        raise refuse("a normalisation after the stem (stem_norm=True)")
    require(getattr(stem, "flatten", True), "timm_model", "the stem does not flatten its output to tokens")
    require(
        stem.img_size is not None and stem.img_size[0] == stem.img_size[1] and stem.patch_size[0] == stem.patch_size[1],
        "timm_model",
        f"image size {stem.img_size} / patch {stem.patch_size} are not square",
        "MLPMixer takes square images and patches",
    )
    require(timm_model.global_pool == "avg", "timm_model", "global_pool='' (no pooling) is not a classifier Mixer")
    blocks = list(timm_model.blocks)
    require(len(blocks) > 0, "timm_model", "has no blocks")
    norms, acts, hidden = set(), set(), set()
    for i, block in enumerate(blocks):
        if type(block) is not MixerBlock:
            kind = type(block).__name__
            what = {"ResBlock": "ResMLP blocks (affine 'norm', layer scale, a single linear token-mixing layer)",
                    "SpatialGatingBlock": "gMLP blocks (spatial gating unit instead of token mixing)"}.get(kind)  # fmt: skip
            raise refuse(f"blocks[{i}] is {what or f'a {kind}, not a plain MixerBlock'}")
        for name in ("mlp_tokens", "mlp_channels"):
            mlp = getattr(block, name)
            if type(mlp) is not Mlp:
                what = {"GluMlp": "a gated (GLU) MLP as gmixer", "GatedMlp": "a gated MLP as gMLP"}.get(
                    type(mlp).__name__, f"a {type(mlp).__name__}"
                )
                raise refuse(f"blocks[{i}].{name} is {what}")
            if not isinstance(mlp.norm, nn.Identity):
                raise refuse(f"blocks[{i}].{name} normalises its hidden units")
            if not (isinstance(mlp.fc1, nn.Linear) and isinstance(mlp.fc2, nn.Linear)):
                raise refuse(f"blocks[{i}].{name} uses 1×1 convolutions")
            act = _timm_activation(mlp.act)
            if act is None:
                raise refuse(f"blocks[{i}].{name} uses the activation {type(mlp.act).__name__} (not GELU)")
            acts.add(act)
            hidden.add((name, mlp.fc1.out_features))
        for name in ("norm1", "norm2"):
            norm = getattr(block, name)
            if not isinstance(norm, nn.LayerNorm):
                raise refuse(f"blocks[{i}].{name} is a {type(norm).__name__}, not a LayerNorm")
            norms.add(norm.eps)
    if not isinstance(timm_model.norm, nn.LayerNorm):
        raise refuse(f"the final norm is a {type(timm_model.norm).__name__}, not a LayerNorm")
    norms.add(timm_model.norm.eps)
    require(len(norms) == 1, "timm_model", f"LayerNorms with different eps {sorted(norms)}")
    require(len(acts) == 1, "timm_model", f"different activations {sorted(acts)} in different MLPs")
    require(len(hidden) == 2, "timm_model", "hidden widths differ between blocks")
    head = timm_model.head
    first = blocks[0]
    drop = first.mlp_tokens.drop1.p
    drop_path = getattr(first.drop_path, "drop_prob", 0.0)
    if timm_model.head_drop.p > 0:
        warnings.warn(
            f"timm's dropout before the head (p={timm_model.head_drop.p}) has no MLPMixer counterpart and is "
            "not carried over (eval outputs are identical)",
            stacklevel=3,
        )
    return dict(
        num_classes=head.out_features if isinstance(head, nn.Linear) else 0,
        image_size=stem.img_size[0],
        in_chans=stem.proj.in_channels,
        patch_size=stem.patch_size[0],
        channels=timm_model.embed_dim,
        token_hidden=first.mlp_tokens.fc1.out_features,
        channel_hidden=first.mlp_channels.fc1.out_features,
        num_blocks=len(blocks),
        norm_eps=norms.pop(),
        act=acts.pop(),
        drop_rate=drop,
        # timm drops every MLP with one constant rate; ours rises linearly to this rate at the last MLP
        # (Mixer supplementary B). Eval outputs do not depend on it.
        drop_path=drop_path,
    )


def _timm_state_dict(timm_model: nn.Module) -> dict[str, torch.Tensor]:
    """timm's parameters under this project's names; absent biases / affine LayerNorm parameters
    (bias=False, elementwise_affine=False) become zeros / ones."""
    out = {}
    for name, module in timm_model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.LayerNorm)):
            if isinstance(module, nn.LayerNorm) and module.weight is None:
                shape = module.normalized_shape
                ref = next(timm_model.parameters())
                weight, bias = torch.ones(shape, dtype=ref.dtype, device=ref.device), None
            else:
                weight, bias = module.weight, module.bias
            if bias is None:
                bias = torch.zeros(weight.shape[0] if weight.ndim > 1 else weight.shape, dtype=weight.dtype,
                                   device=weight.device)  # fmt: skip
            for kind, tensor in (("weight", weight), ("bias", bias)):
                out[from_timm_key(f"{name}.{kind}")] = tensor.detach().clone()
    return out


def from_timm(timm_model: nn.Module) -> MLPMixer:
    """An `MLPMixer` with the architecture and a copy of the weights of a timm ``MlpMixer`` built of
    plain Mixer blocks: every registered ``mixer_*`` variant and custom ones (any image, patch and
    width, LayerNorm ε, exact or tanh GELU, no biases ...). It computes the same function; its
    training-time stochastic depth rises linearly to timm's rate (timm uses that rate everywhere).

    A timm MlpMixer with other blocks (``gmixer_*``: GLU MLPs; ``resmlp_*``: affine norms and layer
    scale; ``gmlp_*``: spatial gating) or a stem norm is refused with a `ConfigError` naming it.
    """
    architecture = timm_architecture(timm_model)
    state_dict = _timm_state_dict(timm_model)
    with torch.device("meta"):  # shapes only; the tensors are then taken over from the copy
        model = MLPMixer(**architecture)
    model.load_state_dict(state_dict, strict=True, assign=True)
    return model.train(timm_model.training)


# ---------------------------------------------------------------------------------------------
# Writing JAX checkpoints.


def to_jax_npz(model: MLPMixer, path: str | Path) -> dict[str, np.ndarray]:
    """Write ``model`` as an official JAX checkpoint (``.npz``, the layout of the module docstring)
    and return the arrays. The JAX Mixer has neither SkipLayer nor permutations, so models with
    them are refused. A K-upscaled model (region-ordered tokens) is written with its token-mixing
    weights permuted to the raster token order of the JAX code: the same function, since a
    permutation of the tokens commutes with everything but token mixing."""
    require(isinstance(model, MLPMixer), "model", f"cannot write a {type(model).__name__} as a JAX Mixer")
    require(
        not any(model.permute) and model.blocks[0].token_mixing.skip is None,
        "model",
        "the JAX Mixer has no random permutations and no SkipLayer",
        "export a normal MLP-Mixer with S = S0",
    )
    state = model.state_dict()
    regions = model.stem.regions
    if regions > 1:
        # order[j] = raster index of the j-th region-ordered token; W1' = W1[:, order⁻¹], W2' = W2[order⁻¹].
        grid = torch.arange(model.stem.num_patches).view(model.stem.grid, model.stem.grid)
        g = model.stem.grid // regions
        order = grid.view(regions, g, regions, g).permute(0, 2, 1, 3).reshape(-1)
        inverse = torch.argsort(order)
        for i in range(len(model.blocks)):
            prefix = f"blocks.{i}.token_mixing.mlp."
            state[prefix + "fc1.weight"] = state[prefix + "fc1.weight"][:, inverse]
            state[prefix + "fc2.weight"] = state[prefix + "fc2.weight"][inverse]
            state[prefix + "fc2.bias"] = state[prefix + "fc2.bias"][inverse]
    arrays = {jax_key(k): _torch_to_jax(k, v) for k, v in state.items()}
    np.savez(path, **arrays)
    return arrays


# ---------------------------------------------------------------------------------------------
# Networks initialised from a file, optionally upscaled (what `model.init_from` / `model.upscale` do).


def implied_arguments(weights: WeightsFile, module_name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments among ``given``'s names that are None there but that ``weights`` implies: the
    saved hyper-parameters of a checkpoint of the LightningModule ``module_name`` (another module's
    are not comparable), or ``act`` for a JAX file."""
    if weights.class_path is not None and weights.class_path.rsplit(".", 1)[-1] != module_name:
        return {}
    return {
        name: value
        for name, value in weights.architecture.items()
        if name in given and given[name] is None and value is not None
    }


def build_initialised(
    build: Callable[[int], nn.Module],
    image_size: int,
    weights: WeightsFile | None,
    upscale: int | None,
    field: str = "init_from",
) -> tuple[nn.Module, list[str]]:
    """``build(image_size)``, with the weights of ``weights`` (`load_weights`, a new zero head if the
    number of classes differs) and, with ``upscale`` = K, upscaled K× (`upscale_tokens`): the network
    is built at image_size / K, loaded, then upscaled; or, when the file already holds the upscaled
    network (a checkpoint of such a fine-tuning run), built, upscaled, then loaded. Returns the
    network and messages for the user."""
    from mixer_lightning.models.upscale import upscale_tokens

    factor = 1 if upscale is None else upscale
    require(
        isinstance(factor, int) and factor >= 1,
        "upscale",
        f"must be a positive integer, got {upscale!r}",
        "give the ratio of the fine-tuning image side to the pre-training one (2 for 224 → 448)",
    )
    require(
        image_size % factor == 0,
        "upscale",
        f"{factor} does not divide the image size {image_size}",
        f"choose data.image_size = {factor} × the pre-training image size",
    )
    net = build(image_size // factor)
    if factor == 1:
        return net, load_weights(net, weights, field=field) if weights is not None else []
    messages = []
    upscaled = upscale_tokens(net, factor)
    if weights is not None:
        token_keys = [k for k in weights.state_dict if ".token_mixing." in k and k in upscaled.state_dict()]
        holds_upscaled = bool(token_keys) and all(
            weights.state_dict[k].shape == upscaled.state_dict()[k].shape for k in token_keys
        )
        if holds_upscaled:
            return upscaled, load_weights(upscaled, weights, field=field)
        messages = load_weights(net, weights, field=field)
        upscaled = upscale_tokens(net, factor)
        messages.append(
            f"upscale: {image_size // factor} px → {image_size} px: token mixing initialised with "
            f"{factor * factor} block-diagonal copies, tokens ordered region by region (Mixer supplementary C)"
        )
    return upscaled, messages
