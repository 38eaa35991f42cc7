"""MFU's two terms (``mixer bench``, the fit's throughput monitor): a network's FLOPs per image (torch's FLOP
counter) and a GPU's peak dense FLOP/s (vendor datasheets, no sparsity; a device matches the first key its
name contains, so the longer keys come first).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# name fragment: (bf16/fp16 tensor, tf32 tensor, fp32), FLOP/s, dense
PEAKS: dict[str, tuple[float | None, float | None, float]] = {
    "GH200": (989.4e12, 494.7e12, 66.9e12),
    "H100 PCIe": (756.0e12, 378.0e12, 51.2e12),
    "H100 NVL": (835.0e12, 417.5e12, 60.0e12),
    "H100": (989.4e12, 494.7e12, 66.9e12),  # SXM
    "H200": (989.4e12, 494.7e12, 66.9e12),
    "A100": (312.0e12, 156.0e12, 19.5e12),
    "L40S": (362.1e12, 183.0e12, 91.6e12),
    "L4": (121.0e12, 60.0e12, 30.3e12),
    "A10G": (70.0e12, 35.0e12, 31.2e12),
    "A10": (125.0e12, 62.5e12, 31.2e12),
    "V100": (125.0e12, None, 15.7e12),  # fp16 tensor cores only (no bf16)
}
# Lightning's precision settings computed in the tensor cores' half precision.
HALF_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "16-true", "bf16", "16")


def peak_flops(device_name: str | None, precision: str = "bf16-mixed", tf32: bool = False) -> float | None:
    """The peak FLOP/s of the device named `device_name` at `precision` (a Lightning precision string;
    ``tf32``: float32 matmuls run as TF32), or None where the table does not know it."""
    if not device_name:
        return None
    for key, (half, tf32_peak, fp32) in PEAKS.items():
        if key in device_name:
            if str(precision) in HALF_PRECISIONS:
                return half
            if str(precision) in ("32-true", "32"):
                return (tf32_peak or fp32) if tf32 else fp32
            return None  # float64 and others: no tensor-core peak to compare with
    return None


def autocast(device: torch.device, precision: str):
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def flops_per_image(model: nn.Module, image_size: int, in_chans: int, device: torch.device, precision: str) -> dict:
    """Forward FLOPs per image, and a training step's (forward + backward) per image (counted on a batch
    of 2, divided by 2: a batch of one would hide layers that mix images, if any)."""
    batch = 2
    x = torch.randn(batch, in_chans, image_size, image_size, device=device)
    counter = FlopCounterMode(display=False)
    with counter, autocast(device, precision):
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    total = counter.get_total_flops()
    with FlopCounterMode(display=False) as forward_counter, torch.no_grad(), autocast(device, precision):
        model(x)
    return {"forward": forward_counter.get_total_flops() // batch, "train": total // batch}
