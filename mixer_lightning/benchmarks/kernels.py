"""Where an RP block and a compiled step lose time: the memory-bound kernels, side by side (``mixer bench
--kernels``), at the CIFAR-size Mixer of the standard suite (batch 128, S = 64, C = 128, D_C = 512):

- **permutation**: ways to apply one frozen permutation J of the m = S·C entries of a (B, m) activation
  (an RP Mixer's J1/J2, Hayase & Karakida Def. 5.1), ÷ a plain contiguous copy of the same bytes (the floor
  of a memory-bound kernel); beside them the transposing copy (B, S, C) → (B, C, S) that timm's token
  mixing pays (ours applies W from the left, `models.layers.linear_columns`), and the permutation on the
  (m, B) layout (contiguous rows: fast, but LayerNorm over C is then not over the last axis);
- **elementwise**: the non-GEMM ops of a Mixer step, ATen's eager kernels ÷ Inductor's (``torch.compile``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from mixer_lightning.benchmarks.timing import compare
from mixer_lightning.models import Permutation


def _compiled(fn: Callable) -> Callable:
    return torch.compile(fn, dynamic=False)


def permutation_table(batch: int = 128, tokens: int = 64, channels: int = 128, repeats: int = 20) -> dict:
    """Milliseconds per call and time ÷ contiguous copy for each way of permuting (B, S·C) entries."""
    m = tokens * channels
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, m, generator=generator)
    index = torch.randperm(m, generator=generator)
    permutation = Permutation(m)  # the shipped J (its forward); loading the index derives its inverse
    permutation.load_state_dict({"index": index})
    x_batch_last = x.t().contiguous()  # (m, B)
    unsafe_index = _compiled(lambda t, i: torch.ops.aten._unsafe_index(t, [None, i]))
    candidates = {
        "copy": lambda: x.clone(),
        "copy_twin": lambda: x.clone(),  # the same kernel again: how far two identical timings differ
        "transpose_token_mixing": lambda: x.view(batch, tokens, channels).transpose(1, 2).contiguous(),
        "ours": lambda: permutation(x),
        "gather_broadcast_index": lambda: torch.gather(x, -1, index.expand(x.shape)),
        "index_select_last": lambda: x.index_select(-1, index),
        "indexing": lambda: x[:, index],
        "compiled_indexing": lambda: unsafe_index(x, index),
        "row_gather_batch_last": lambda: x_batch_last.index_select(0, index),
    }
    reference = x[:, index]
    for name, fn in candidates.items():
        if name not in ("copy", "copy_twin", "transpose_token_mixing", "row_gather_batch_last"):
            assert torch.equal(fn(), reference), name
    assert torch.equal(candidates["row_gather_batch_last"]().t(), reference)
    times = compare(candidates, repeats=repeats, warmup=2)
    return {
        "shape": [batch, m],
        "ms": {name: 1e3 * t for name, t in times.items()},
        "over_copy": {name: t / times["copy"] for name, t in times.items()},
        "noise": abs(1 - times["copy_twin"] / times["copy"]),
    }


def elementwise_table(
    batch: int = 128, tokens: int = 64, channels: int = 128, hidden: int = 512, repeats: int = 20
) -> dict:
    """Milliseconds per call, eager and compiled, of the element-wise ops of a Mixer step."""
    generator = torch.Generator().manual_seed(0)
    rows = batch * tokens
    h = torch.randn(rows, hidden, generator=generator)  # the channel MLP's hidden pre-activations
    grad = torch.randn(rows, hidden, generator=generator)
    x = torch.randn(rows, channels, generator=generator)
    weight, bias = torch.ones(channels), torch.zeros(channels)

    ops = {
        "gelu": (lambda t: F.gelu(t), (h,)),
        "gelu_backward": (lambda g, t: torch.ops.aten.gelu_backward(g, t), (grad, h)),
        "layer_norm": (lambda t: F.layer_norm(t, (channels,), weight, bias, 1e-6), (x,)),
    }
    candidates = {}
    for name, (fn, args) in ops.items():
        compiled = _compiled(fn)
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-4, atol=1e-5)
        candidates[f"{name}_eager"] = lambda fn=fn, args=args: fn(*args)
        candidates[f"{name}_compiled"] = lambda fn=compiled, args=args: fn(*args)
    candidates["gelu_eager_twin"] = lambda: F.gelu(h)  # an identical twin of one op: the noise of the ratios
    times = compare(candidates, repeats=repeats, warmup=2)
    return {
        "shapes": {"gelu": [rows, hidden], "gelu_backward": [rows, hidden], "layer_norm": [rows, channels]},
        "ms": {name: 1e3 * t for name, t in times.items()},
        "compiled_over_eager": {name: times[f"{name}_compiled"] / times[f"{name}_eager"] for name in ops},
        "noise": abs(1 - times["gelu_eager_twin"] / times["gelu_eager"]),
    }


def kernel_suite(repeats: int = 20) -> dict:
    return {"permutation": permutation_table(repeats=repeats), "elementwise": elementwise_table(repeats=repeats)}


def format_report(report: dict) -> str:
    perm, elem = report["permutation"], report["elementwise"]
    lines = [
        f"permuting a {perm['shape'][0]} x {perm['shape'][1]} float32 tensor",
        f"{'kernel':<24} {'ms':>8} {'÷ copy':>8}",
    ]
    lines += [f"{name:<24} {ms:>8.3f} {perm['over_copy'][name]:>8.2f}" for name, ms in perm["ms"].items()]
    lines.append(f"noise |1 − copy_twin ÷ copy| (the same kernel measured twice): {perm['noise']:.3f}")
    lines += ["", f"{'op':<24} {'eager ms':>9} {'compiled ms':>12} {'compiled ÷ eager':>17}"]
    for name, ratio in elem["compiled_over_eager"].items():
        eager, compiled = elem["ms"][name + "_eager"], elem["ms"][name + "_compiled"]
        lines.append(f"{name:<24} {eager:>9.3f} {compiled:>12.3f} {ratio:>17.2f}")
    lines.append(f"noise |1 − twin ÷ gelu eager| (the same op measured twice): {elem['noise']:.3f}")
    return "\n".join(lines)
