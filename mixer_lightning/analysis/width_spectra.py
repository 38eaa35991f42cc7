"""σ_max of random SW-MLP and Mixer weights over width at a fixed Ω (Hayase & Karakida 2024, Sec. 4.3,
Figure 4 right: `compute`), and App. D.1's normalised singular values over the sparsity index a (Figure
S.1: `compute_d1`), as ``mixer spectrum`` draws them."""

from __future__ import annotations

import math
import statistics

import torch

from mixer_lightning.analysis.spectrum import (
    _svdvals,
    d1_width_density,
    eq17_sigma_max,
    mixer_pair,
    mp_edge,
    normalised_sparse_singular_values,
    sparse_singular_values,
    sw_mlp_weight,
)
from mixer_lightning.errors import require
from mixer_lightning.models.layers import hidden_width
from mixer_lightning.width import default_channels, optimum, solve_tokens

DEFAULT_MAX_ENTRIES = 2**23  # --all: dense svdvals up to 8M entries (4096×2048: seconds in float64)


def default_grid(omega: int, gamma: float) -> list[dict]:
    """The Mixer widths of the paper's grid (exact (S, C) pairs), then 2·m_max and 4·m_max."""
    points = {}
    for c in default_channels(omega, gamma):
        s = solve_tokens(omega, c, gamma)
        points.setdefault(s * c, {"m": s * c, "S": s, "C": c})
    m_max = optimum(omega, gamma)["m"]
    for factor in (2, 4):
        m = round(factor * m_max)
        points.setdefault(m, {"m": m, "S": None, "C": None})
    return sorted(points.values(), key=lambda p: p["m"])


def user_grid(omega: int, gamma: float, widths: list[int]) -> list[dict]:
    """Each width with the Mixer of the same width and Ω, where one exists (S, C rounded)."""
    points = []
    for m in sorted(set(widths)):
        pair = mixer_pair(omega, m, gamma)
        s, c = (round(pair[0]), round(pair[1])) if pair is not None and round(pair[1]) >= 1 else (None, None)
        points.append({"m": m, "S": s, "C": c})
    return points


def compute(omega: int, gamma: float, points: list[dict], seeds: list[int], full: bool = False, max_entries: int = DEFAULT_MAX_ENTRIES) -> dict:  # fmt: skip
    """σ_max (mean and std over seeds) of the SW-MLP and Mixer weights at each grid point (with ``full``,
    every singular value of the widths whose γm×m weight has at most `max_entries` entries)."""
    narrowest = min(point["m"] for point in points)
    fix = f"use widths >= {math.ceil(math.sqrt(omega / gamma))}"
    require(omega <= gamma * narrowest**2, "widths", f"m = {narrowest} is narrower than a dense layer with Ω", fix)
    fits = any(hidden_width(gamma, point["m"]) * point["m"] <= max_entries for point in points)
    require(not full or fits, "max_entries", f"no width's γm×m weight has at most {max_entries:,} entries", "raise it")
    sw_rows, mixer_rows, mixer_values = [], [], []
    for point in points:
        m = point["m"]
        p = omega / (gamma * m * m)
        hidden = hidden_width(gamma, m)
        dense_ok = full and hidden * m <= max_entries
        sigmas, spectra, connections = [], [], []
        for seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                weight = sw_mlp_weight(m, p, gamma)
            connections.append(weight.values().numel())
            if dense_ok:
                values = _svdvals(weight.to_dense())
                spectra.append(values)
                sigmas.append(float(values[0]))
            else:
                sigmas.append(float(sparse_singular_values(weight)[0]))
        row = {
            "m": m,
            "hidden": hidden,
            "p": p,
            "q": math.sqrt(p * m),
            "connections": statistics.fmean(connections),
            "sigma_max": statistics.fmean(sigmas),
            "sigma_max_std": _std(sigmas),
            "eq17": eq17_sigma_max(m, p, gamma),
        }
        if full:
            row["singular_values"] = torch.stack(spectra).mean(0).tolist() if spectra else None
        sw_rows.append(row)
        if point["S"] is not None:
            token, channel = [], []
            for seed in seeds:
                generator = torch.Generator().manual_seed(seed)
                for n, out in ((point["S"], token), (point["C"], channel)):
                    w = torch.randn(hidden_width(gamma, n), n, generator=generator, dtype=torch.float64) / math.sqrt(n)
                    out.append(math.sqrt(float(torch.linalg.eigvalsh(w.T @ w)[-1])))  # σ_max², n×n Gram: fast
            mixer_values.extend(token + channel)
            mixer_rows.append(
                {
                    "m": m,
                    "S": point["S"],
                    "C": point["C"],
                    "sigma_max_token": statistics.fmean(token),
                    "sigma_max_channel": statistics.fmean(channel),
                }
            )
    best = optimum(omega, gamma)
    return {
        "omega": omega,
        "gamma": gamma,
        "seeds": seeds,
        "mixer": {
            "sigma_max": statistics.fmean(mixer_values) if mixer_values else None,
            "mp_edge": mp_edge(gamma),
            "m_max": best["m"],
            "points": mixer_rows,
        },
        "sw_mlp": sw_rows,
    }


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def compute_d1(
    omega: int, scalings: list[float], seeds: list[int], bins: int = 60, max_entries: int = DEFAULT_MAX_ENTRIES
) -> dict:
    """App. D.1 (Fig. S.1 centre, right): for each a, the normalised singular values λ of Z = M ⊙ W
    (`normalised_sparse_singular_values`) over the seeds: λ_max (mean, std, min, max), the fraction of
    exact zeros, and a histogram of all of them (density over [0, the largest λ of any a])."""
    import numpy as np

    draws = {}
    for a in scalings:
        draws[a] = []
        for seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                draws[a].append(normalised_sparse_singular_values(omega, a, max_entries))
    top = max(float(d["values"].max()) for runs in draws.values() for d in runs if d["values"].numel())
    edges = np.linspace(0.0, top * 1.02, bins + 1)
    rows = []
    for a, runs in draws.items():
        m, p = d1_width_density(omega, a)
        maxima = [float(d["values"].max()) if d["values"].numel() else 0.0 for d in runs]
        counts, _ = np.histogram(np.concatenate([d["values"].numpy() for d in runs]), bins=edges)
        zeros = sum(d["zeros"] for d in runs)
        counts[0] += zeros
        total = m * len(runs)
        rows.append(
            {
                "a": a,
                "m": m,
                "p": p,
                "sparsity": 1 - p,
                "connections": statistics.fmean(d["connections"] for d in runs),
                "lambda_max": statistics.fmean(maxima),
                "lambda_max_std": _std(maxima),
                "lambda_max_min": min(maxima),
                "lambda_max_max": max(maxima),
                "zero_fraction": zeros / total,
                "histogram": {"edges": edges.tolist(), "density": (counts / (total * np.diff(edges))).tolist()},
            }
        )
    return {"omega": omega, "trials": len(seeds), "seeds": seeds, "mixer_lambda_max": 2.0, "scaling": rows}
