"""Width and sparsity of Mixers at a fixed number of connections Ω (Hayase & Karakida, Sec. 4.1).

For each channel size C: the token size S with γ(C²S + CS²)/2 = Ω, the effective width m = S·C,
the non-zero ratio p = Ω/(γm²) of the effective weights and the connections of the rounded pair;
then the optimum S* = C* = (Ω/γ)^{1/3}, m_max = (Ω/γ)^{2/3}, and the width m = √(Ω/(γp)) of an
SW-MLP with the same connections at each sparsity 1 − p.

Examples:
    mixer width --omega 2**18 --gamma 1                   the pairs of the paper's Figure 5
    mixer width --omega 2**19 --gamma 2 --json            Figure 4 (left)
    mixer width --omega 2**18 --channels 16,32,48 --sparsity 0.1,0.3 --plot fig3.png
"""

from __future__ import annotations

import json

from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.width import (
    default_channels,
    optimum,
    parse_int_expression,
    sw_mlp_width,
    tokens_from_omega,
    width_pairs,
)

PAPER_SPARSITIES = [0.1, 0.3, 0.5, 0.7, 0.9]  # App. C.4: 1 - p for the SW-MLPs of Figure 5


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--omega", type=str, required=True, help="connections per layer Ω, e.g. 2**18 or 262144")
    parser.add_argument("--gamma", type=float, default=1.0, help="expansion factor γ (1 for the S-Mixer)")
    parser.add_argument("--channels", type=str, default=None, help="comma-separated C values (default: the paper's)")
    parser.add_argument("--sparsity", type=str, default=None, help="comma-separated SW-MLP sparsities 1-p")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw Figure 3 (S and m against C) to this PNG")


def _numbers(text: str, field: str, kind: type) -> list:
    try:
        return [kind(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(field, f"cannot read {text!r}", "give comma-separated numbers, e.g. 16,32,48") from None


def compute(omega: int, gamma: float, channels: list[int] | None = None, sparsity: list[float] | None = None) -> dict:
    """The pairs, the optimum and the SW-MLP widths, as `mixer width --json` prints them."""
    require(omega > 0, "omega", f"must be positive, got {omega}", "give e.g. 2**18")
    require(gamma > 0, "gamma", f"must be positive, got {gamma}")
    channels = channels or default_channels(omega, gamma)
    require(all(c > 0 for c in channels), "channels", f"must be positive, got {channels}")
    sparsity = PAPER_SPARSITIES if sparsity is None else sparsity
    for s in sparsity:
        require(0 <= s < 1, "sparsity", f"1-p must be in [0, 1), got {s}", "give values such as 0.1,0.5,0.9")
    best = optimum(omega, gamma)
    return {
        "omega": omega,
        "gamma": gamma,
        "pairs": [pair.as_dict() for pair in width_pairs(omega, gamma, channels)],
        "optimum": {"S": best["S"], "C": best["C"], "m": best["m"], "p": omega / (gamma * best["m"] ** 2)},
        "sw_mlp": [{"sparsity": s, "p": 1 - s, "m": round(sw_mlp_width(omega, 1 - s, gamma))} for s in sparsity],
    }


def plot(result: dict, path: str) -> None:
    """Figure 3: S (and m = S·C) against C at fixed Ω, the computed pairs marked, S* = C* dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    omega, gamma = result["omega"], result["gamma"]
    c_star = result["optimum"]["C"]
    c_max = max([p["C"] for p in result["pairs"]] + [4 * c_star])
    cs = np.geomspace(1, c_max, 400)
    ss = np.array([tokens_from_omega(omega, c, gamma) for c in cs])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(cs, ss, label="S")
    ax.plot(cs, ss * cs, label="m = S·C")
    ax.scatter([p["C"] for p in result["pairs"]], [p["S"] for p in result["pairs"]], color="C0", zorder=3)
    ax.scatter([p["C"] for p in result["pairs"]], [p["m"] for p in result["pairs"]], color="C1", zorder=3)
    ax.axvline(c_star, color="gray", linestyle="--", label=f"S* = C* = {c_star:.4g}")
    ax.set(xscale="log", yscale="log", xlabel="C", title=f"Ω = {omega:,}, γ = {gamma:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: Namespace) -> None:
    omega = parse_int_expression(args.omega, "omega")
    channels = _numbers(args.channels, "channels", int) if args.channels else None
    sparsity = _numbers(args.sparsity, "sparsity", float) if args.sparsity else None
    result = compute(omega, args.gamma, channels, sparsity)
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Ω = {omega:,} connections per layer, γ = {args.gamma:g}")
    print(f"{'C':>6} {'S':>6} {'m = S·C':>10} {'p':>9} {'connections':>14}")
    for pair in result["pairs"]:
        print(f"{pair['C']:>6} {pair['S']:>6} {pair['m']:>10,} {pair['p']:>9.5f} {pair['connections']:>14,.0f}")
    best = result["optimum"]
    print(f"optimum: S* = C* = {best['S']:.4g}, m_max = {best['m']:,.0f}, p_min = {best['p']:.5f}")
    print(
        "SW-MLP at the same Ω:  "
        + ",  ".join(f"1-p = {row['sparsity']:g}: m = {row['m']:,}" for row in result["sw_mlp"])
    )
    if args.plot:
        print(f"Figure 3 written to {args.plot}")
