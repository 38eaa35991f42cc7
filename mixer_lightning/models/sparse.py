"""Static sparse-weight linear layers y = s·(M ⊙ W) x + b of the SW-MLP (Hayase & Karakida 2024,
App. A.2.5; Golubeva, Neyshabur & Gur-Ari 2021), in two interchangeable implementations:

- `MaskedLinear` (``impl: dense``): the paper's dense W times a frozen boolean mask M (memory ∝ out·in);
- `SparseLinear` (``impl: sparse``): only M ⊙ W's non-zeros, as CSR values with frozen int32 indices
  (memory ∝ connections p·out·in); forward and input gradient are sparse × dense products, the value
  gradient a sampled dense-dense product (SDDMM). No out×in dense tensor is formed.

Both draw the same mask and initial values from the global generator, in the same order: a seed gives
the same function and gradients (``values.grad`` = ``weight.grad[mask]``) in either.

``init``: ``masked`` (M ∈ {0, 1}, trainable W ~ N(0, 1/(pm)) on the pattern, what a Mixer's N(0, 1/n)
weights are in its effective m×m weight: I_C ⊗ W has p = 1/C and entries N(0, 1/S)); ``spectral``
(Sec. 4.3, App. D.1: M's ones are 1/√p, A ~ N(0, 1/m), λ_max(M ⊙ A)² ≈ c² + 3c²√γ(1−p)/q², eq. 17).
Both start from the same M ⊙ W; they differ in what the optimiser moves (W, or A = √p·W).
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
from torch import nn

SparseInit = Literal["masked", "spectral"]

# CSR kernels exist for float32/float64 only on CPU; half types are computed in float32.
_HALF = (torch.float16, torch.bfloat16)


def bernoulli_pattern(out_features: int, in_features: int, density: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and columns of the ones of an out×in Bernoulli(p) mask, row-major, in O(p·out·in) without forming
    it: the gaps between ones are i.i.d. Geometric(p). From the global generator, on the CPU (so the mask
    is the seed's whatever the device)."""
    total = out_features * in_features
    if density == 1.0:
        flat = torch.arange(total, device="cpu")
    else:
        chunks, last = [], -1.0  # flat position of the last one drawn
        while True:
            left = total - 1 - last
            expected = left * density
            draws = int(min(max(1024.0, expected + 6.0 * math.sqrt(expected) + 16.0), 2**22))
            gaps = torch.empty(draws, dtype=torch.float64, device="cpu").geometric_(density)
            positions = gaps.cumsum_(0).add_(last)  # exact integers in float64 below 2**53
            inside = positions < total
            chunks.append(positions[inside].long())
            if not bool(inside[-1]):
                break
            last = float(positions[-1])
        flat = torch.cat(chunks)
    return flat.div(in_features, rounding_mode="floor"), flat.remainder(in_features)


def _index_dtype(count: int) -> torch.dtype:
    return torch.int32 if count < 2**31 else torch.int64


class _StaticSparseLinear(nn.Module):
    """What both implementations share: the pattern and the initial values (drawn here, in this order,
    so that a seed gives both the same function), the bias and the scale; `_store` keeps them."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        density: float,
        bias: bool = True,
        init: SparseInit = "masked",
        init_width: int | None = None,
    ):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.density = float(density)
        self.init = init
        # m in N(0, 1/m): the SW-MLP's width (Sec. 4.3 draws both γm×m and m×γm weights with 1/m).
        self.init_width = init_width or in_features
        # The frozen factor of M's ones: 1/√p for the spectral form, 1 for the masked form.
        self.scale = 1.0 / math.sqrt(self.density) if init == "spectral" else 1.0
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        rows, cols = bernoulli_pattern(out_features, in_features, self.density)
        std = 1.0 / math.sqrt(self.init_width * (1.0 if init == "spectral" else self.density))
        self._store(rows, cols, torch.randn(rows.numel(), device="cpu") * std)  # one draw per non-zero, row-major

    def _store(self, rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor) -> None:
        raise NotImplementedError

    @property
    def connections(self) -> int:
        """The number of non-zero weights (connections) actually drawn."""
        raise NotImplementedError

    def effective_weight(self) -> torch.Tensor:
        """The dense s·(M ⊙ W) ∈ R^{out×in} (for analysis at small sizes; never used in training)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, density={self.density:.6g}, "
            f"init={self.init}, bias={self.bias is not None}"
        )


class MaskedLinear(_StaticSparseLinear):
    """``impl: dense``: y = s·(M ⊙ W) x + b with a dense W and a frozen boolean mask M (the paper's form).

    Parameters ``weight`` (out×in) and ``bias``; buffer ``mask`` (out×in, bool), saved in the state dict.
    W is zero off the mask and stays zero: its gradient there is zero, and so is weight decay's pull.
    """

    def _store(self, rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor) -> None:
        self.weight = nn.Parameter(torch.zeros(self.out_features, self.in_features))
        self.register_buffer("mask", torch.zeros(self.out_features, self.in_features, dtype=torch.bool))
        if self.weight.device.type != "meta":
            with torch.no_grad():
                self.mask[rows, cols] = True
                self.weight[rows, cols] = values.to(self.weight.dtype)

    @property
    def connections(self) -> int:
        return int(self.mask.sum())

    def effective_weight(self) -> torch.Tensor:
        weight = self.weight * self.mask
        return weight * self.scale if self.scale != 1.0 else weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.effective_weight(), self.bias)


class _CsrMatmul(torch.autograd.Function):
    """y = x Wᵀ for W = csr(crow, col, values) ∈ R^{out×in}, with sparse gradients.

    Backward: dL/dx = g W, a CSR product with Wᵀ (its pattern: the transposition permutation
    ``perm`` and row pointers ``crow_t``, stored; its column indices, rebuilt from ``crow`` in O(nnz));
    dL/dvalues = (gᵀ x) sampled on W's pattern (SDDMM, `torch.sparse.sampled_addmm`).
    """

    @staticmethod
    def forward(ctx, x, values, crow, col, perm, crow_t, in_features: int, out_features: int):
        compute = (
            torch.float32 if (x.dtype in _HALF or values.dtype in _HALF) else torch.promote_types(x.dtype, values.dtype)
        )
        out_dtype = torch.promote_types(x.dtype, values.dtype)
        xc, vc = x.to(compute), values.to(compute)
        weight = _csr(crow, col, vc, (out_features, in_features))
        y = torch.mm(weight, xc.t().contiguous()).t().contiguous()  # MKL/cuSPARSE want a dense row-major operand
        ctx.save_for_backward(xc, vc, crow, col, perm, crow_t)
        ctx.shape = (out_features, in_features)
        ctx.dtypes = (x.dtype, values.dtype)
        return y.to(out_dtype)

    @staticmethod
    def backward(ctx, grad):
        xc, vc, crow, col, perm, crow_t = ctx.saved_tensors
        out_features, in_features = ctx.shape
        grad_t = grad.to(vc.dtype).t().contiguous()  # (out, batch)
        grad_x = grad_values = None
        if ctx.needs_input_grad[0]:
            rows = torch.repeat_interleave(crow.diff()).to(crow.dtype)  # row of each non-zero, row-major
            weight_t = _csr(crow_t, rows.index_select(0, perm), vc.index_select(0, perm), (in_features, out_features))
            grad_x = torch.mm(weight_t, grad_t).t().contiguous().to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            pattern = _csr(crow, col, vc, (out_features, in_features))
            sampled = torch.sparse.sampled_addmm(pattern, grad_t, xc, beta=0.0, alpha=1.0)
            grad_values = sampled.values().to(ctx.dtypes[1])
        return grad_x, grad_values, None, None, None, None, None, None


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


class SparseLinear(_StaticSparseLinear):
    """``impl: sparse``: y = s·(M ⊙ W) x + b storing only M ⊙ W's non-zeros (CSR): ``values`` (1×nnz, row-major;
    2-D so that weight decay treats it as a weight), frozen buffers ``crow``, ``col`` (M) and ``perm``,
    ``crow_t`` (Wᵀ, for the backward). 12 bytes per connection against 5/p for the dense form. Loading a
    checkpoint restores its exact pattern, even one of another size (another seed)."""

    def _store(self, rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor) -> None:
        in_features, out_features = self.in_features, self.out_features
        index = _index_dtype(max(rows.numel(), in_features, out_features) + 1)
        counts = torch.bincount(rows, minlength=out_features)
        crow = torch.zeros(out_features + 1, dtype=torch.long, device="cpu")
        torch.cumsum(counts, 0, out=crow[1:])
        perm = torch.argsort(cols.to(torch.int32), stable=True)  # row-major -> column-major order (int32 sorts faster)
        crow_t = torch.zeros(in_features + 1, dtype=torch.long, device="cpu")
        torch.cumsum(torch.bincount(cols, minlength=in_features), 0, out=crow_t[1:])
        self.values = nn.Parameter(torch.empty(1, rows.numel()))
        if self.values.device.type != "meta":
            with torch.no_grad():
                self.values.copy_(values.view(1, -1))
        for name, tensor in (("crow", crow), ("col", cols), ("perm", perm), ("crow_t", crow_t)):
            self.register_buffer(name, tensor.to(index).to(self.values.device))

    @property
    def connections(self) -> int:
        return self.values.numel()

    def sparse_weight(self) -> torch.Tensor:
        """s·(M ⊙ W) as a CSR tensor (shares the values' storage when s = 1)."""
        values = self.values.view(-1) * self.scale if self.scale != 1.0 else self.values.view(-1)
        return _csr(self.crow, self.col, values, (self.out_features, self.in_features))

    def effective_weight(self) -> torch.Tensor:
        return self.sparse_weight().to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = _CsrMatmul.apply(
            x.reshape(-1, self.in_features),
            self.values.view(-1),
            self.crow,
            self.col,
            self.perm,
            self.crow_t,
            self.in_features,
            self.out_features,
        )
        if self.scale != 1.0:
            y = y * self.scale
        if self.bias is not None:
            y = y + self.bias
        return y.view(*shape[:-1], self.out_features)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        # A checkpoint made from another seed has another number of non-zeros: take its sizes, so
        # that the copy below restores its exact pattern and values.
        values = state_dict.get(prefix + "values")
        if values is not None and values.shape != self.values.shape and values.dim() == 2 and values.shape[0] == 1:
            self.values.data = torch.empty(values.shape, dtype=self.values.dtype, device=self.values.device)
            for name in ("col", "perm"):
                buffer = getattr(self, name)
                self._buffers[name] = torch.empty(values.shape[1], dtype=buffer.dtype, device=buffer.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)


SparseImpl = Literal["dense", "sparse"]

IMPLEMENTATIONS: dict[str, type[_StaticSparseLinear]] = {"dense": MaskedLinear, "sparse": SparseLinear}


def static_sparse_linear(
    impl: SparseImpl,
    in_features: int,
    out_features: int,
    density: float,
    bias: bool = True,
    init: SparseInit = "masked",
    init_width: int | None = None,
) -> _StaticSparseLinear:
    """A static sparse linear layer in implementation `impl` (``dense`` or ``sparse``)."""
    return IMPLEMENTATIONS[impl](in_features, out_features, density, bias=bias, init=init, init_width=init_width)
