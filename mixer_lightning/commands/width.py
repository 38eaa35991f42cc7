"""Width and sparsity of Mixers at a fixed number of connections Ω (Hayase & Karakida, Sec. 4.1).

For each channel size C: the token size S with γ(C²S + CS²)/2 = Ω, the effective width m = S·C,
the non-zero ratio p = Ω/(γm²) of the effective weights and the connections of the rounded pair;
then the optimum S* = C* = (Ω/γ)^{1/3}, m_max = (Ω/γ)^{2/3}, and the width m = √(Ω/(γp)) of an
SW-MLP with the same connections at each sparsity 1 − p.

With ``--width m`` the width is fixed instead and γ varies (App. D.3, eq. S.46): for each C dividing
m, S = m/C and γ = 2Ω/(m(C + m/C)), which peaks at C* = S* = √m with γ_max = Ω/(m√m) (Fig. S.3).

``--plot`` draws Figure 3 (m and p against C at the given Ω and γ; the paper's is Ω = 10^8, γ = 1),
or with ``--width``, γ against C (eq. S.46).

Examples:
    mixer width --omega 2**18 --gamma 1                   the pairs of the paper's Figure 5
    mixer width --omega 2**19 --gamma 2 --json            Figure 4 (left)
    mixer width --omega 10**8 --gamma 1 --plot fig3.png   Figure 3
    mixer width --omega 2**20 --width 4096                γ at fixed m = 4096 (eq. S.46, Fig. S.3)
    mixer width --omega 2**18 --channels 16,32,48 --sparsity 0.1,0.3
"""

from __future__ import annotations

import json

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveFloat

from mixer_lightning.commands.lists import integers, reals
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure
from mixer_lightning.width import (
    GAMMA,
    check_omega,
    default_channels,
    gamma_at_width,
    gamma_optimum,
    gamma_points,
    optimum,
    parse_int_expression,
    sw_mlp_width,
    tokens_from_omega,
    width_pairs,
)

PAPER_SPARSITIES = [0.1, 0.3, 0.5, 0.7, 0.9]  # App. C.4: 1 - p for the SW-MLPs of Figure 5


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--omega", type=str, required=True, help="connections per layer Ω, e.g. 2**18 or 262144")
    parser.add_argument(
        "--gamma",
        type=PositiveFloat,
        default=GAMMA,
        help="expansion factor γ (default 1, the S-Mixer's of Figs. 3, 5-7 at fixed Ω; Figure 4: 2)",
    )
    parser.add_argument("--channels", type=str, default=None, help="comma-separated C values (default: the paper's)")
    parser.add_argument("--sparsity", type=str, default=None, help="comma-separated SW-MLP sparsities 1-p")
    parser.add_argument("--width", type=str, default=None, help="fix the width m = S·C and vary γ (eq. S.46)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw Figure 3 (or, with --width, γ against C) to a PNG")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")


def compute(omega: int, gamma: float, channels: list[int] | None = None, sparsity: list[float] | None = None) -> dict:
    """The pairs, the optimum and the SW-MLP widths, as `mixer width --json` prints them."""
    check_omega(omega)
    best = optimum(omega, gamma)
    sparsity = PAPER_SPARSITIES if sparsity is None else sparsity
    return {
        "omega": omega,
        "gamma": gamma,
        "pairs": [pair.as_dict() for pair in width_pairs(omega, gamma, channels or default_channels(omega, gamma))],
        "optimum": {"S": best["S"], "C": best["C"], "m": best["m"], "p": omega / (gamma * best["m"] ** 2)},
        "sw_mlp": [{"sparsity": s, "p": 1 - s, "m": round(sw_mlp_width(omega, 1 - s, gamma))} for s in sparsity],
    }


def compute_at_width(omega: int, width: int, channels: list[int] | None = None) -> dict:
    """γ at fixed (Ω, m) for each C (eq. S.46), as `mixer width --width M --json` prints them."""
    points = gamma_points(omega, width, channels)
    return {
        "omega": omega,
        "width": width,
        "gamma_grid": [p.as_dict() for p in points],
        "optimum": gamma_optimum(omega, width),
    }


def plot(result: dict, path: str) -> None:
    """Figure 3: the effective width m = S·C (left axis) and the non-zero ratio p = Ω/(γm²) (right
    axis, log) against C at fixed Ω and γ (S from eq. 14), over C = 1 … the C with S = 1; the single
    peak of m (and the minimum of p) at C* = (Ω/γ)^{1/3} dashed, the computed pairs marked."""
    import numpy as np

    plt = pyplot()
    omega, gamma = result["omega"], result["gamma"]
    c_star, m_max = result["optimum"]["C"], result["optimum"]["m"]
    c_last = (np.sqrt(1 + 8 * omega / gamma) - 1) / 2  # S = 1 (eq. S.45's lower bound of m)
    cs = np.geomspace(1, c_last, 600)
    ms = np.array([tokens_from_omega(omega, c, gamma) for c in cs]) * cs
    ps = omega / (gamma * ms**2)
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.plot(cs, ms, color="C0", label="m = S·C")
    ax.scatter([p["C"] for p in result["pairs"]], [p["m"] for p in result["pairs"]], color="C0", s=14, zorder=3)
    ax.axvline(c_star, color="gray", linestyle="--", label=f"C* = S* = (Ω/γ)^(1/3) = {c_star:.4g}")
    ax.set(xscale="log", xlabel="C", ylabel="effective width m", title=f"Ω = {omega:,}, γ = {gamma:g}")
    ax.set_ylim(0, 1.08 * m_max)
    right = ax.twinx()
    right.plot(cs, ps, color="C1", label="p = Ω/(γm²)")
    right.scatter([p["C"] for p in result["pairs"]], [p["p"] for p in result["pairs"]], color="C1", s=14, zorder=3)
    right.set(yscale="log", ylabel="non-zero ratio p")
    lines = ax.get_legend_handles_labels(), right.get_legend_handles_labels()
    fig.legend(lines[0][0] + lines[1][0], lines[0][1] + lines[1][1], loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, path, dpi=120)


def plot_at_width(result: dict, path: str) -> None:
    """γ = 2Ω/(m(C + m/C)) against C at fixed (Ω, m) (eq. S.46): a single peak at C* = √m."""
    import numpy as np

    plt = pyplot()
    omega, width, best = result["omega"], result["width"], result["optimum"]
    cs = np.geomspace(1, width, 600)
    fig, ax = plt.subplots(figsize=(6.2, 4))
    ax.plot(cs, [gamma_at_width(omega, width, c) for c in cs], color="C2", label="γ = 2Ω/(m(C + m/C))")
    grid = result["gamma_grid"]
    ax.scatter([p["C"] for p in grid], [p["gamma"] for p in grid], color="C2", s=14, zorder=3)
    ax.axvline(best["C"], color="gray", linestyle="--", label=f"C* = S* = √m = {best['C']:.4g}")
    title = f"Ω = {omega:.4g}, m = {width:,}: γ_max = Ω/(m√m) = {best['gamma']:.4g}"
    ax.set(xscale="log", xlabel="C (S = m/C)", ylabel="expansion factor γ", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def run(args: Namespace) -> None:
    omega = parse_int_expression(args.omega, "omega")
    channels = integers(args.channels, "channels") if args.channels else None
    if args.width is not None:
        require(args.sparsity is None, "sparsity", "is for the SW-MLP at fixed Ω, not at fixed width", "drop one")
        width = parse_int_expression(args.width, "width")
        result = compute_at_width(omega, width, channels)
        lines = [f"Ω = {omega:,} connections per layer at fixed width m = S·C = {width:,} (eq. S.46)"]
        lines.append(f"{'C':>6} {'S':>6} {'γ':>9} {'p':>9} {'connections (D rounded)':>24}")
        for r in result["gamma_grid"]:
            lines.append(f"{r['C']:>6} {r['S']:>6} {r['gamma']:>9.4f} {r['p']:>9.5f} {r['connections']:>24,.0f}")
        best = result["optimum"]
        lines.append(f"optimum: C* = S* = √m = {best['C']:.4g}, γ_max = Ω/(m√m) = {best['gamma']:.4g}")
    else:
        in_range = (lambda s: 0 <= s < 1), "sparsities 1-p in [0, 1)"
        sparsity = reals(args.sparsity, "sparsity", *in_range) if args.sparsity else None
        result = compute(omega, args.gamma, channels, sparsity)
        lines = [f"Ω = {omega:,} connections per layer, γ = {args.gamma:g}"]
        lines.append(f"{'C':>6} {'S':>6} {'m = S·C':>10} {'p':>9} {'connections':>14}")
        for r in result["pairs"]:
            lines.append(f"{r['C']:>6} {r['S']:>6} {r['m']:>10,} {r['p']:>9.5f} {r['connections']:>14,.0f}")
        best = result["optimum"]
        lines.append(f"optimum: S* = C* = {best['S']:.4g}, m_max = {best['m']:,.0f}, p_min = {best['p']:.5f}")
        widths = ",  ".join(f"1-p = {row['sparsity']:g}: m = {row['m']:,}" for row in result["sw_mlp"])
        lines.append(f"SW-MLP at the same Ω:  {widths}")
    if args.plot:
        (plot_at_width if args.width is not None else plot)(result, args.plot)
        lines.append(f"{'γ against C' if args.width is not None else 'Figure 3'} written to {args.plot}")
    print(json.dumps(result, indent=2) if args.json else "\n".join(lines))
