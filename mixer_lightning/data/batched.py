"""The batched form of a per-image transform, for the tensor path (`mixer_lightning.data.tensor_path`):
a deterministic prefix (done once, at decoding), then zero-padded random crops and flips, then the
normalisation, drawn and applied to whole batches on the device, the same numbers as the PIL path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torchvision import transforms as T

from mixer_lightning.data.transforms import ToNormalizedTensor

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
    """A transform split into what is done once at decoding and what is done per batch."""

    prefix: tuple[Callable, ...]  # deterministic PIL steps (Resize, CenterCrop), applied when decoding
    crop_size: tuple[int, int] | None  # of torchvision's RandomCrop, or None (no random crop)
    padding: int  # its zero padding on every side
    flip: float | None  # probability of the horizontal flip, or None (no flip step: nothing drawn)
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
        elif isinstance(step, T.RandomCrop) and crop_size is None and flip is None:  # (zero padding: ours)
            crop_size, padding = tuple(step.size), step.padding
        elif isinstance(step, T.RandomHorizontalFlip) and flip is None:
            flip = float(step.p)
        elif isinstance(step, ToNormalizedTensor):
            normalize = step
        else:
            raise NoBatchedForm(*_FIELDS.get(name, ("data.pipeline", name)))
    if normalize is None:
        raise NoBatchedForm("data.pipeline", "a transform without the normalisation")
    scale, shift = torch.from_numpy(normalize.scale.copy()), torch.from_numpy(normalize.shift.copy())
    return BatchedPlan(tuple(prefix), crop_size, padding, flip, normalize.mean, normalize.std, scale, shift)
