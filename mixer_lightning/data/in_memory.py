"""The tensor data path: each split decoded once into a uint8 tensor, whole batches augmented on the
training device.

For CIFAR/STL-size data the model's training step is cheap, and the per-image PIL pipeline (decode,
crop, flip, to-tensor, normalise, one image at a time, through worker processes) costs a large share
of it on a CPU and would starve a GPU. Here:

1. `batched_plan` reads the very transform the PIL path would run (`transforms.train_transform` /
   `eval_transform`) and splits it into a deterministic prefix (resizes, centre crops: applied once,
   when decoding) and the random steps that have a batched form: torchvision's ``RandomCrop`` with
   zero padding and ``RandomHorizontalFlip``, then the fused normalisation. Any other step
   (RandAugment, AutoAugment, AugMix, colour jitter, random erasing, the random-resized crop) has no
   batched form: the data module keeps the PIL path for it (`NoBatchedForm` names the field).
2. `decode_split` runs the prefix over a split once, through the same reads as the PIL path, into an
   (N, C, H, W) uint8 tensor, and caches it on disk (`cache_file`): keyed by the source files' names,
   sizes and modification times (or a Hugging Face dataset's fingerprint), the prefix and
   `LOADER_VERSION`, so a changed source or prefix decodes again. Loaded memory-mapped: parallel runs
   on one machine share the page cache.
3. Loaders yield small key batches: base indices, and for training the crop offsets and flips of each
   image, drawn exactly as the PIL path draws them (torch's generator seeded by the sample seed
   (seed, epoch, index) of `sampling.KeyedBatchSampler`, the calls of torchvision's ``RandomCrop`` and
   ``RandomHorizontalFlip`` in their order). The data module's ``on_after_batch_transfer`` turns them
   into images on the device (`DecodedImages.materialize`): gather, pad, crop, flip, normalise, in a
   few tensor operations. The result equals the PIL path's batch bit for bit (tests/test_data_tensor.py),
   so resuming, worker counts and DDP shards behave exactly as there.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from torchvision import transforms as T

from mixer_lightning.data.transforms import InputPermutation, ToNormalizedTensor

Pipeline = Literal["auto", "tensor", "pil"]
PIPELINES = ("auto", "tensor", "pil")
# Bump when decoding changes what a cache file holds: every cache file of an older version is ignored.
LOADER_VERSION = 1
CACHE_FOLDER = ".mixer_cache"
DECODE_CHUNK = 1000

# Steps of timm's / torchvision's training transforms without a batched form, and the field that adds them.
_FIELDS = {
    "RandomResizedCropAndInterpolation": ("data.train_crop", "the random-resized crop"),
    "RandomResizedCrop": ("data.train_crop", "the random-resized crop"),
    "RandAugment": ("data.auto_augment", "RandAugment"),
    "AutoAugment": ("data.auto_augment", "AutoAugment"),
    "AugMixAugment": ("data.auto_augment", "AugMix"),
    "ColorJitter": ("data.color_jitter", "colour jitter"),
    "RandomErasing": ("data.random_erasing", "random erasing"),
}


class NoBatchedForm(Exception):
    """A transform step that the tensor path cannot run on whole batches (`field` adds it)."""

    def __init__(self, field: str, what: str):
        super().__init__(f"{what} ({field})")
        self.field, self.what = field, what


@dataclass(frozen=True)
class BatchedPlan:
    """A transform split into what is done once at decoding and what is done per batch.

    Attributes:
        prefix: deterministic PIL steps (Resize, CenterCrop), applied when decoding.
        crop_size: (height, width) of torchvision's RandomCrop, or None (no random crop).
        padding: its zero padding on every side.
        flip: probability of the horizontal flip, or None (no flip step: nothing drawn).
        mean, std: the normalisation (`transforms.ToNormalizedTensor`).
    """

    prefix: tuple[Callable, ...]
    crop_size: tuple[int, int] | None
    padding: int
    flip: float | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: torch.Tensor = field(compare=False, repr=False)
    shift: torch.Tensor = field(compare=False, repr=False)
    _on: dict = field(default_factory=dict, compare=False, repr=False)  # (scale, shift) per device

    def __getstate__(self) -> dict:  # worker processes: CPU tensors only
        return {**self.__dict__, "_on": {}}

    @property
    def random(self) -> bool:
        return self.crop_size is not None or self.flip is not None

    def prefix_key(self) -> str:
        """What the decoded tensor depends on besides the source (cache key and in-process sharing)."""
        return repr([repr(step) for step in self.prefix])

    def draw(self, seeds: Sequence[int], height: int, width: int) -> dict[str, torch.Tensor]:
        """Crop offsets and flips of images of (height, width), as the PIL path draws them under
        ``sampling.seeded(seed)``: RandomCrop pads, then (unless the padded image is the crop's size)
        draws ``randint`` for the top then the left offset; RandomHorizontalFlip draws ``rand(1) < p``."""
        n = len(seeds)
        offsets = torch.zeros(n, 2, dtype=torch.long)
        uniforms = torch.zeros(n, 1, dtype=torch.float32)
        crop_draws = False
        if self.crop_size is not None:
            h, w = height + 2 * self.padding, width + 2 * self.padding
            crop_draws = (h, w) != self.crop_size
            span_h, span_w = h - self.crop_size[0] + 1, w - self.crop_size[1] + 1
        generator = torch.Generator()
        reseed, randint, rand = generator.manual_seed, torch.randint, torch.rand
        rows, cells = offsets.unbind(0), uniforms.unbind(0)  # written in place: no tensor per draw
        for k, seed in enumerate(seeds):
            reseed(int(seed))
            if crop_draws:
                if span_h == span_w:  # two draws of one call: the same numbers as two calls (tested)
                    randint(0, span_h, (2,), generator=generator, out=rows[k])
                else:
                    randint(0, span_h, (1,), generator=generator, out=rows[k][:1])
                    randint(0, span_w, (1,), generator=generator, out=rows[k][1:])
            if self.flip is not None:
                rand(1, generator=generator, out=cells[k])
        top, left = offsets[:, 0], offsets[:, 1]
        # `torch.rand(1) < p` compares in float32, as here (p is a Python number beside a float32 tensor).
        flip = uniforms[:, 0] < (self.flip if self.flip is not None else 0.0)
        return {"top": top, "left": left, "flip": flip}

    def augment(self, images: torch.Tensor, top: torch.Tensor, left: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) uint8 → (B, C, h, w) uint8: zero padding, the crops at (top, left), then the flips.

        One gather of each output pixel from its flat position in the padded image (10× faster here than
        indexing with four broadcast index tensors)."""
        if not self.random:
            return images
        if self.padding:
            images = F.pad(images, (self.padding,) * 4)
        batch, channels, height, width = images.shape
        h, w = self.crop_size if self.crop_size is not None else (height, width)
        device = images.device
        rows = top.view(-1, 1) + torch.arange(h, device=device)  # (B, h)
        cols = left.view(-1, 1) + torch.arange(w, device=device)  # (B, w)
        cols = torch.where(flip.view(-1, 1), cols.flip(1), cols)  # a flipped crop reads its columns backwards
        flat = (rows.view(batch, h, 1) * width + cols.view(batch, 1, w)).view(batch, 1, h * w)
        pixels = images.reshape(batch, channels, height * width).gather(2, flat.expand(batch, channels, h * w))
        return pixels.view(batch, channels, h, w)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 → float32 ``x · scale + shift`` per channel: the operations of `ToNormalizedTensor`, so
        the same float32 values (a multiply, then an add, each rounded)."""
        device = images.device
        if device not in self._on:  # copied once: a copy per batch would make the host wait for the GPU
            self._on[device] = (self.scale.to(device).view(-1, 1, 1), self.shift.to(device).view(-1, 1, 1))
        scale, shift = self._on[device]
        return images.float().mul_(scale).add_(shift)


def batched_plan(transform: Callable) -> BatchedPlan:
    """The `BatchedPlan` of a PIL → tensor transform built by `transforms.train_transform` or
    `eval_transform` (a Compose ending with `ToNormalizedTensor`); `NoBatchedForm` if a step has none."""
    steps = list(transform.transforms) if isinstance(transform, T.Compose) else [transform]
    prefix: list[Callable] = []
    crop_size, padding, flip, normalize = None, 0, None, None
    for step in steps:
        name = type(step).__name__
        if normalize is not None:
            raise NoBatchedForm(*_FIELDS.get(name, ("data.pipeline", f"{name} after the normalisation")))
        if isinstance(step, (T.Resize, T.CenterCrop)) and crop_size is None and flip is None:
            prefix.append(step)
        elif isinstance(step, T.RandomCrop) and crop_size is None and flip is None:
            if (
                step.padding_mode != "constant"
                or step.fill != 0
                or step.pad_if_needed
                or not isinstance(step.padding, int)
            ):
                raise NoBatchedForm("data.crop_padding", f"{step!r}")
            crop_size, padding = tuple(step.size), step.padding
        elif isinstance(step, T.RandomHorizontalFlip) and flip is None:
            flip = float(step.p)
        elif isinstance(step, ToNormalizedTensor):
            normalize = step
        else:
            raise NoBatchedForm(*_FIELDS.get(name, ("data.pipeline", name)))
    if normalize is None:
        raise NoBatchedForm("data.pipeline", "a transform without the normalisation")
    return BatchedPlan(
        prefix=tuple(prefix),
        crop_size=crop_size,
        padding=padding,
        flip=flip,
        mean=normalize.mean,
        std=normalize.std,
        scale=torch.from_numpy(normalize.scale.copy()),
        shift=torch.from_numpy(normalize.shift.copy()),
    )


# ------------------------------------------------------------------------------------- decoding


class NotDecodable(Exception):
    """A split the tensor path cannot hold: images of several shapes after the prefix (no single tensor
    holds them), images that are not 8-bit, or a dataset type it cannot fingerprint."""


def _to_array(prefix: Sequence[Callable]) -> Callable[[Any], np.ndarray]:
    def convert(image: Any) -> np.ndarray:
        for step in prefix:
            image = step(image)
        array = np.array(image)  # a writable copy (torch.from_numpy warns on read-only arrays)
        if array.dtype != np.uint8:
            raise NotDecodable(f"a {array.dtype} image (mode {getattr(image, 'mode', '?')}), not 8-bit")
        return array[:, :, None] if array.ndim == 2 else array

    return convert


def decode(base: Dataset, prefix: Sequence[Callable]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of `base` through `prefix` into an (N, C, H, W) uint8 tensor, and the (N,) labels.

    Read as the PIL path reads (`datamodule.TransformedDataset`: whole chunks through the base
    dataset's ``__getitems__``, a `ConfigError` naming an undecodable file)."""
    from mixer_lightning.data.datamodule import TransformedDataset

    reader = TransformedDataset(base, _to_array(prefix))
    n = len(reader)
    images: torch.Tensor | None = None
    labels = torch.empty(n, dtype=torch.long)
    for start in range(0, n, DECODE_CHUNK):
        chunk = reader.__getitems__(list(range(start, min(n, start + DECODE_CHUNK))))
        for offset, (array, label) in enumerate(chunk):
            if images is None:
                images = torch.empty((n, array.shape[2], array.shape[0], array.shape[1]), dtype=torch.uint8)
            if tuple(array.shape) != (images.shape[2], images.shape[3], images.shape[1]):
                h, w, c = array.shape
                raise NotDecodable(
                    f"image {start + offset} is {w}×{h}×{c} where the first is "
                    f"{images.shape[3]}×{images.shape[2]}×{images.shape[1]}"
                )
            images[start + offset] = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
            labels[start + offset] = int(label)
    if images is None:
        images = torch.empty((0, 1, 1, 1), dtype=torch.uint8)
    return images, labels


def _files(folder: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime in ns) of every file under `folder`, our cache folder left out."""
    found = []
    for directory, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if d != CACHE_FOLDER)
        for name in sorted(names):
            path = Path(directory, name)
            stat = path.stat()
            found.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return found


def source_fingerprint(base: Dataset, root: str) -> dict[str, Any]:
    """What identifies the data a split is read from: its files (names, sizes, modification times; for
    a Hugging Face dataset, every file of its local folder `root`), or a hub dataset's fingerprint."""
    from mixer_lightning.data.datasets import HFImages, RGBImageFolder

    if isinstance(base, HFImages):
        columns = [base.image_column, base.label_column, base.mode]
        if Path(root).is_dir():
            return {"folder": str(Path(root).resolve()), "files": _files(Path(root)), "columns": columns}
        return {"hub": root, "fingerprint": base.dataset._fingerprint, "columns": columns}
    if isinstance(base, RGBImageFolder):
        return {"folder": str(Path(base.root).resolve()), "files": _files(Path(base.root))}
    folder = getattr(base, "raw_folder", None)  # torchvision MNIST
    if folder is None and hasattr(base, "base_folder"):  # torchvision CIFAR-10/100, STL-10
        folder = os.path.join(base.root, base.base_folder)
    if folder is None:
        raise NotDecodable(f"cannot fingerprint a {type(base).__name__}")
    split = getattr(base, "train", getattr(base, "split", None))
    return {"folder": str(Path(folder).resolve()), "split": split, "files": _files(Path(folder))}


def cache_key(base: Dataset, root: str, split: str, plan: BatchedPlan) -> str:
    content = {
        "version": LOADER_VERSION,
        "split": split,
        "prefix": plan.prefix_key(),
        "source": source_fingerprint(base, root),
        "type": type(base).__name__,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:24]


def default_cache_dir(root: str) -> Path:
    """``$MIXER_CACHE_DIR``; else beside the data (``<data.root>/.mixer_cache``) when that folder is
    writable; else ``~/.cache/mixer_lightning``."""
    env = os.environ.get("MIXER_CACHE_DIR")
    if env:
        return Path(env)
    if Path(root).is_dir() and os.access(root, os.W_OK) and os.stat(root).st_mode & 0o222:
        # (a folder without write bits is read-only data, also for root, whom os.access lets write anywhere)
        return Path(root) / CACHE_FOLDER
    return Path.home() / ".cache" / "mixer_lightning"


def cache_file(cache_dir: Path, dataset: str, split: str, key: str) -> Path:
    return cache_dir / f"{dataset}-{split}-{key}.pt"


def load_or_decode(base: Dataset, prefix: Sequence[Callable], path: Path | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoded split from `path` when it is there, else decoded and written there (atomically:
    a temporary file renamed, so concurrent runs never read half a file). Loaded memory-mapped."""
    if path is not None and path.is_file():
        try:
            saved = torch.load(path, weights_only=True, mmap=True)
            if saved.get("version") == LOADER_VERSION and len(saved["labels"]) == len(base):
                return saved["images"], saved["labels"]
        except (OSError, RuntimeError, KeyError, AttributeError):
            pass  # unreadable (another torch, a truncated copy): decode again and replace it
    images, labels = decode(base, prefix)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(handle)
            try:
                torch.save({"version": LOADER_VERSION, "images": images, "labels": labels}, temporary)
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide it from other users' runs
                os.replace(temporary, path)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        except OSError:
            pass  # a read-only place: keep the decoded split in memory only
    return images, labels


class DecodedSplit:
    """A decoded split (uint8 images, labels) and its copies on the devices that asked for it."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device.type == "cpu":
            return self.images, self.labels
        if device not in self._on:  # copied once per device, kept there for the whole run
            self._on[device] = (self.images.to(device), self.labels.to(device))
        return self._on[device]

    def __getstate__(self) -> dict:  # worker processes get the CPU tensors only
        return {"images": self.images, "labels": self.labels, "_on": {}}


# --------------------------------------------------------------------------------------- datasets


class DecodedImages(Dataset):
    """(image, label) pairs of a decoded split (optionally restricted to `indices`), augmented by a
    `BatchedPlan` (training) and permuted (`InputPermutation`), like `datamodule.TransformedDataset`.

    Keys are positions, or ``(sample_seed, position)`` pairs from `KeyedBatchSampler` (training). As a
    dataset it answers normalised CPU tensors (what ``mixer cka`` / ``mixer fewshot`` read); its
    loaders read `key_view` instead, whose batches `materialize` turns into images on the device.
    """

    def __init__(
        self,
        decoded: DecodedSplit,
        plan: BatchedPlan,
        indices: Sequence[int] | None,
        permutation: InputPermutation | None,
        split: str,
    ):
        self.decoded, self.plan, self.permutation, self.split = decoded, plan, permutation, split
        self.indices = None if indices is None else list(indices)
        self._index = None if indices is None else torch.as_tensor(self.indices, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.decoded.labels) if self.indices is None else len(self.indices)

    def keys(self, keys: Sequence[int | tuple[int, int]]) -> dict[str, Any]:
        """The key batch of `keys`: base indices, and the draws of each image when the plan has any."""
        pairs = [key if isinstance(key, tuple) else (None, key) for key in keys]
        positions = torch.as_tensor([int(position) for _, position in pairs], dtype=torch.long)
        index = positions if self._index is None else self._index[positions]
        batch: dict[str, Any] = {"split": self.split, "index": index}
        if self.plan.random:
            if any(seed is None for seed, _ in pairs):
                raise ValueError("training keys are (sample_seed, index) pairs from KeyedBatchSampler")
            _, _, height, width = self.decoded.images.shape
            batch.update(self.plan.draw([seed for seed, _ in pairs], height, width))
        return batch

    def materialize(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """A key batch → (normalised images (B, C, h, w) float32, labels (B,)) on the key batch's device."""
        index = batch["index"]
        images, labels = self.decoded.on(index.device)
        x = images.index_select(0, index)
        if self.plan.random:
            x = self.plan.augment(x, batch["top"], batch["left"], batch["flip"])
        x = self.plan.normalize(x)
        if self.permutation is not None:
            x = self.permutation(x)
        return x, labels[index]

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        x, y = self.materialize(self.keys([key]))
        return x[0], int(y[0])

    @property
    def targets(self) -> torch.Tensor:
        """The labels, in dataset order, without making any image (as torchvision datasets have them)."""
        labels = self.decoded.labels
        return labels if self._index is None else labels[self._index]

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        x, y = self.materialize(self.keys(keys))
        return list(zip(x, y.tolist(), strict=True))

    def key_view(self) -> KeyView:
        return KeyView(self)


class KeyView(Dataset):
    """A `DecodedImages` as its loaders read it: a batch of keys gives one key batch (a dict of small
    tensors), collated by `KeyCollate`."""

    def __init__(self, images: DecodedImages):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> dict[str, Any]:
        return self.images.keys(keys)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        return self.images.keys([key])


class KeyCollate:
    """Collate of `KeyView` batches: the key batch as it is (the trainer moves it to the device, where
    the data module materialises it), or, outside a trainer, materialised on the CPU as (x, y)."""

    def __init__(self, materialize: DecodedImages | None = None):
        self.images = materialize

    def __call__(self, batch: dict[str, Any]) -> Any:
        return batch if self.images is None else self.images.materialize(batch)


def is_key_batch(batch: Any) -> bool:
    return isinstance(batch, dict) and "split" in batch and "index" in batch
