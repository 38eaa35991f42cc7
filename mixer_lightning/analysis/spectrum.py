"""Singular values of a layer's weight as the effective wide MLP sees it (Hayase & Karakida 2024,
Sec. 4.3, App. D.1, Fig. 4 right, Fig. S.1), float64, descending.

`singular_values(layer)`: an ``nn.Linear``'s W (a Mixer's I ⊗ W, or a permutation of it, has W's
singular values); a `KronLinear`'s from its structure, σ(V ⊗ W) = {σ_i(V)·σ_j(W)}; any layer with an
``effective_weight()`` (the SW-MLP's s·(M ⊙ W), `MonarchLinear`) by a dense svd up to ``max_entries``;
a Mixer's single-FC `MixingLayer` (S-Mixer) W's, each repeated n1 times, no m×m matrix formed
(`mixing_layer_spectra` gives both FC layers of an MLP-Mixer layer). For monitoring, `spectral_norm`
gives σ_max cheaply and `weight_layers` lists the FC layers of the effective wide MLP of a network.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mixer_lightning.errors import require
from mixer_lightning.models.pk import MixingLayer
from mixer_lightning.models.protocols import EffectiveWeight, MixingNetwork, SparseNetwork, StructuredNetwork
from mixer_lightning.models.shallow import KronLinear
from mixer_lightning.models.sparse import MaskedLinear, SparseLinear

DEFAULT_MAX_ENTRIES = 2**26  # a 8192×8192 matrix: 512 MB in float64


def _svdvals(matrix: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(matrix.detach().to(torch.float64))


def _check_size(rows: int, cols: int, max_entries: int, what: str) -> None:
    fix = "analyse a smaller model or raise max_entries"
    require(rows * cols <= max_entries, "max_entries", f"the {rows}×{cols} matrix of this {what} is larger", fix)


def singular_values(layer: nn.Module, max_entries: int = DEFAULT_MAX_ENTRIES) -> torch.Tensor:
    """The singular values (float64, descending) of `layer`'s effective weight matrix."""
    if isinstance(layer, MixingLayer):
        spectra = mixing_layer_spectra(layer)
        if len(spectra) != 1:
            raise TypeError(f"a {layer.axis}-mixing layer has one spectrum per FC layer: use mixing_layer_spectra")
        return next(iter(spectra.values()))
    if isinstance(layer, KronLinear):
        return layer.singular_values()
    if isinstance(layer, nn.Linear):
        return _svdvals(layer.weight)
    if not isinstance(layer, EffectiveWeight):
        raise TypeError(f"no singular values for a {type(layer).__name__} (no effective_weight())")
    rows, cols = getattr(layer, "out_features", 0), getattr(layer, "in_features", 0)
    _check_size(rows, cols, max_entries, type(layer).__name__)  # before the dense weight is formed
    weight = layer.effective_weight()
    _check_size(weight.shape[-2], weight.shape[-1], max_entries, type(layer).__name__)
    return _svdvals(weight)


# ----------------------------------------------------------------------------------- Mixer mixing layers


def mixing_blocks(layer: MixingLayer) -> int:
    """n1, the number of diagonal blocks of I_{n1} ⊗ W: C for token mixing, S for channel mixing."""
    return layer.channels if layer.axis == "token" else layer.tokens


def mixing_weights(layer: MixingLayer) -> list[tuple[str, nn.Module]]:
    """The FC layers of a mixing layer's function f, input to output: its children holding weights, as
    `MixingLayer.connections` counts them (``fc`` of the S-Mixer, ``fc1``, ``fc2`` of the MLP-Mixer)."""
    return [(name, m) for name, m in layer.mlp.named_children() if any(p.ndim > 1 for p in m.parameters())]


def fc_weight(fc: nn.Module) -> torch.Tensor:
    """The matrix W an FC layer applies: an ``nn.Linear``'s weight, or the ``effective_weight()`` a structured
    layer offers (`models.protocols.EffectiveWeight`: a low-rank A·B, an SW-MLP's M ⊙ W); a `ConfigError`
    naming the network for a layer with neither (an analysis cannot read its weights)."""
    if isinstance(fc, nn.Linear):
        return fc.weight
    fix = "give the layer an effective_weight() method returning its (out, in) matrix (CONTRIBUTING.md)"
    require(isinstance(fc, EffectiveWeight), "model.net", f"a {type(fc).__name__} layer has no weight matrix", fix)
    return fc.effective_weight()


def mixing_layer_spectra(layer: MixingLayer, repeat: bool = True) -> dict[str, torch.Tensor]:
    """The singular values of each FC layer of a mixing layer in the effective wide MLP (I ⊗ W between
    permutations): W's, each repeated n1 times (``repeat: false`` gives W's once)."""
    blocks = mixing_blocks(layer) if repeat else 1
    return {name: _svdvals(fc_weight(fc)).repeat_interleave(blocks) for name, fc in mixing_weights(layer)}


# --------------------------------------------------------------------------------- monitoring helpers

EXACT_MAX_ENTRIES = 2**22  # above this, σ_max by power iteration (e.g. the SW-MLP's γm×m weights)


def weight_layers(model: nn.Module) -> list[tuple[str, nn.Module, float]]:
    """(name, layer, density) for every FC layer of the effective wide MLP of `model`, input to output: a
    Mixer's ``block{i}.{token|channel}.{fc|fc1|fc2}`` (the `nn.Linear` holding W; density 1/n1, the non-zero
    ratio of I ⊗ W, Sec. 3.1), an SW-MLP's ``block{i}.{fc|fc1|fc2}`` (density p), a shallow structured
    MLP's ``b{i}`` (non-zeros / entries); none for another network (`models.protocols`)."""
    layers: list[tuple[str, nn.Module, float]] = []
    if isinstance(model, MixingNetwork):
        for i, layer in enumerate(model.mixing_layers()):
            for name, fc in mixing_weights(layer):
                layers.append((f"block{i // 2 + 1}.{layer.axis}.{name}", fc, 1.0 / mixing_blocks(layer)))
    elif isinstance(model, SparseNetwork):
        for i, block in enumerate(model.blocks):
            names = ["fc"] if len(block.sparse_layers()) == 1 else ["fc1", "fc2"]
            for name, fc in zip(names, block.sparse_layers(), strict=True):
                layers.append((f"block{i + 1}.{name}", fc, fc.connections / (fc.out_features * fc.in_features)))
    elif isinstance(model, StructuredNetwork):
        for i, layer in enumerate(model.structured_layers()):
            weight = layer.effective_weight()
            layers.append((f"b{i + 1}", layer, float(torch.count_nonzero(weight)) / weight.numel()))
    return layers


def trainable_weight(layer: nn.Module) -> torch.Tensor:
    """The trainable weights of a layer as a flat tensor (a sparse layer's non-zeros only)."""
    if isinstance(layer, SparseLinear):
        return layer.values.detach().reshape(-1)
    if isinstance(layer, MaskedLinear):
        return layer.weight.detach()[layer.mask]
    if isinstance(layer, nn.Linear):
        return layer.weight.detach().reshape(-1)
    return torch.cat([p.detach().reshape(-1) for name, p in layer.named_parameters() if name != "bias"])


def _power_iteration(
    matvec, rmatvec, size: int, start: torch.Tensor | None, iterations: int, like: torch.Tensor
) -> tuple[float, torch.Tensor]:
    """σ_max by power iteration on AᵀA from `start` (warm start: the previous right singular vector)."""
    v = start if start is not None and start.shape == (size,) else torch.randn(size, dtype=like.dtype)
    v = v.to(device=like.device, dtype=like.dtype)
    v = v / v.norm()
    sigma = 0.0
    for _ in range(iterations):
        u = matvec(v)
        u = u / u.norm().clamp_min(torch.finfo(u.dtype).tiny)
        v = rmatvec(u)
        sigma = float(v.norm())
        v = v / max(sigma, torch.finfo(v.dtype).tiny)
    return sigma, v


@torch.no_grad()
def spectral_norm(
    layer: nn.Module, state: dict | None = None, exact_max_entries: int = EXACT_MAX_ENTRIES, iterations: int = 20
) -> float:
    """σ_max of a layer's weight as the effective wide MLP sees it (W's for a Mixer's I ⊗ W): exact up to
    `exact_max_entries` entries, else `iterations` steps of power iteration warm-started from ``state["v"]``
    (updated: it converges over calls as the weights drift, as `torch.nn.utils.spectral_norm`), on a sparse
    layer in its sparse form (O(connections) per step)."""
    state = {} if state is None else state
    if isinstance(layer, SparseLinear):
        rows, cols = layer.out_features, layer.in_features
        if rows * cols <= exact_max_entries:
            return float(torch.linalg.matrix_norm(layer.effective_weight().float(), ord=2))
        weight = layer.sparse_weight().detach().float()
        weight_t = weight.t().to_sparse_csr()
        # torch.mm with a one-column dense matrix: the CSR kernels of torch.mv are ~100× slower on CPU.
        products = lambda v: torch.mm(weight, v[:, None])[:, 0], lambda u: torch.mm(weight_t, u[:, None])[:, 0]  # noqa: E731
        sigma, state["v"] = _power_iteration(*products, cols, state.get("v"), iterations, layer.values.detach().float())
        return sigma
    if isinstance(layer, (nn.Linear, MaskedLinear)):
        weight = (layer.weight if isinstance(layer, nn.Linear) else layer.effective_weight()).detach().float()
        if weight.numel() <= exact_max_entries:
            return float(torch.linalg.matrix_norm(weight, ord=2))
        sigma, state["v"] = _power_iteration(
            lambda v: weight @ v, lambda u: weight.t() @ u, weight.shape[1], state.get("v"), iterations, weight
        )
        return sigma
    return float(singular_values(layer)[0])


# ------------------------------------------------------------ random weights at fixed Ω (Fig. 4 right)


def mp_edge(gamma: float) -> float:
    """c_γ = 1 + √γ: the largest singular value of a γn×n matrix of i.i.d. N(0, 1/n) entries as n → ∞,
    the square root of the right edge of the Marchenko–Pastur law (Sec. 4.3)."""
    return 1.0 + math.sqrt(gamma)


def eq17_sigma_max(width: int, density: float, gamma: float) -> float:
    """√L₊ with L₊ = c² + 3c²√γ(1−p)/q², c = 1 + √γ, q = √(pm): eq. (17)'s prediction of σ_max(M ⊙ A)
    (Hwang et al. 2019, Thm. 2.9; the O(1/q⁴) term dropped)."""
    c = mp_edge(gamma)
    return math.sqrt(c * c + 3 * c * c * math.sqrt(gamma) * (1 - density) / (density * width))


def mp_singular_value_density(s: torch.Tensor, gamma: float) -> torch.Tensor:
    """Density of the singular values of a γn×n matrix with N(0, 1/n) entries (n → ∞, γ ≥ 1): WᵀW/γ
    follows the Marchenko–Pastur law of ratio y = 1/γ on [(1 − √y)², (1 + √y)²], so s lies in
    [√γ − 1, √γ + 1]."""
    y = 1.0 / gamma
    a, b = (1 - math.sqrt(y)) ** 2, (1 + math.sqrt(y)) ** 2
    x = s.double() ** 2 / gamma
    inside = (x > a) & (x < b)
    density = torch.zeros_like(x)
    xi = x[inside]
    density[inside] = torch.sqrt((b - xi) * (xi - a)) / (2 * math.pi * y * xi)
    return density * 2 * s.double() / gamma  # ds: x = s²/γ


def sw_mlp_weight(width: int, density: float, gamma: float) -> torch.Tensor:
    """The first FC layer of an SW-MLP MLP block at width m, M ⊙ A ∈ R^{γm×m}, as a CSR tensor, drawn
    exactly as `SparseLinear` with ``init: spectral`` draws it (the same pattern and values from
    torch's global generator; Sec. 4.3: M's ones are 1/√p, A ~ N(0, 1/m)), without the layer's
    backward bookkeeping. It holds p·γm·m connections on average: Ω = γpm² (App. D.1)."""
    from mixer_lightning.models.layers import hidden_width
    from mixer_lightning.models.sparse import _csr, bernoulli_pattern

    rows = hidden_width(gamma, width)
    row, col = bernoulli_pattern(rows, width, density)
    values = torch.randn(row.numel()) / math.sqrt(width) / math.sqrt(density)  # A on the pattern, times 1/√p
    crow = torch.zeros(rows + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(row, minlength=rows), 0, out=crow[1:])
    return _csr(crow, col, values, (rows, width))


def sparse_singular_values(weight: torch.Tensor, k: int = 1) -> torch.Tensor:
    """The `k` largest singular values of a sparse CSR matrix, by scipy's ``svds`` (ARPACK's Lanczos on
    the sparse matrix, O(non-zeros) per step, no dense array); exact svdvals for tiny matrices."""
    rows, cols = weight.shape
    if min(rows, cols) <= k + 1 or rows * cols <= 4096:
        return _svdvals(weight.to_dense())[:k]
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.linalg import svds

    weight = weight.detach()
    matrix = csr_matrix((weight.values().double(), weight.col_indices(), weight.crow_indices()), shape=(rows, cols))
    start = np.random.default_rng(0).standard_normal(min(rows, cols))
    # tol is relative: 1e-7 leaves σ_max exact to the digits reported.
    values = svds(matrix, k=k, tol=1e-7, v0=start, return_singular_vectors=False)
    return torch.from_numpy(np.sort(values)[::-1].copy())


def mixer_pair(omega: float, width: float, gamma: float) -> tuple[float, float] | None:
    """(S, C) with S·C = m and γ(C²S + CS²)/2 = Ω (S ≥ C), i.e. the Mixer of the same width and
    connections, or None when m exceeds the widest Mixer at this Ω, m_max = (Ω/γ)^{2/3} (eq. 15)."""
    total = 2 * omega / (gamma * width)  # S + C
    disc = total * total - 4 * width
    if disc < -1e-9 * total * total:
        return None
    root = math.sqrt(max(disc, 0.0))
    return (total + root) / 2, (total - root) / 2


# ------------------------------------------------------------- App. D.1 scaling (Fig. S.1 centre, right)


def d1_width_density(omega: float, a: float) -> tuple[int, float]:
    """App. D.1's scaling of an SW-MLP layer with Ω connections: width m = Ω^{(1+a)/2} (rounded) and
    density p = Ω^{-a}, so that m²p = Ω whatever the scaling index a ≥ 0 (a = 0: a dense √Ω-wide layer)."""
    return max(1, round(omega ** ((1 + a) / 2))), omega ** (-a)


def normalised_sparse_singular_values(omega: float, a: float, max_entries: int = DEFAULT_MAX_ENTRIES) -> dict:
    """The singular values λ of Z = M ⊙ W normalised as App. D.1 normalises them, for one draw from
    torch's global generator: Z is m×m with M ~ Bernoulli(p) and W ~ N(0, 1) (`d1_width_density`), Q =
    ZZᵀ is scaled by c, the mean of its diagonal, so λ = σ(Z)/√c and the mean of λ² is 1 for every a.

    Z is never formed. Its singular values are those of the blocks its non-zeros form as a bipartite
    graph between rows and columns (the connected components: at large a almost every non-zero is alone
    in its row and column, a 1×1 block), plus zeros for the rows no block reaches. A block with one row
    or one column has the norm of its entries as its only singular value; larger blocks go to a dense
    svd, up to `max_entries` entries each.

    Returns ``values`` (the non-zero blocks' λ, float64), ``zeros`` (how many of the m are exactly 0),
    ``m``, ``p`` and ``connections`` (the non-zeros drawn).
    """
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from mixer_lightning.models.sparse import bernoulli_pattern

    m, p = d1_width_density(omega, a)
    row, col = bernoulli_pattern(m, m, min(1.0, p))
    values = torch.randn(row.numel(), dtype=torch.float64)
    n = row.numel()
    if n == 0:
        return {"values": torch.zeros(0, dtype=torch.float64), "zeros": m, "m": m, "p": p, "connections": 0}
    scale = math.sqrt(float((values**2).sum()) / m)  # √c, c = tr(ZZᵀ)/m
    rows, cols, vals = row.numpy(), col.numpy(), values.numpy()
    graph = coo_matrix((np.ones(n), (rows, m + cols)), shape=(2 * m, 2 * m))
    _, labels = connected_components(graph, directed=False)
    component = labels[rows]
    order = np.argsort(component, kind="stable")
    bounds = np.flatnonzero(np.diff(component[order])) + 1
    singular: list[np.ndarray] = []
    counted = 0
    for members in np.split(order, bounds):
        r_ids, r_idx = np.unique(rows[members], return_inverse=True)
        c_ids, c_idx = np.unique(cols[members], return_inverse=True)
        if min(len(r_ids), len(c_ids)) == 1:
            singular.append(np.array([np.sqrt(np.sum(vals[members] ** 2))]))
            counted += 1
            continue
        _check_size(len(r_ids), len(c_ids), max_entries, f"block of Z at a = {a:g}")
        block = np.zeros((len(r_ids), len(c_ids)))
        block[r_idx, c_idx] = vals[members]
        singular.append(np.linalg.svd(block, compute_uv=False))
        counted += min(len(r_ids), len(c_ids))
    found = torch.from_numpy(np.concatenate(singular)) / scale
    return {"values": found, "zeros": m - counted, "m": m, "p": p, "connections": n}
