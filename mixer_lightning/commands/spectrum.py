"""Largest singular values of random SW-MLP and Mixer weights at a fixed number of connections Ω, over
increasing width (Hayase & Karakida 2024, Sec. 4.3, Figure 4 right, App. D.1, Figure S.1).

SW-MLP: at width m the first layer of an MLP block is M ⊙ A ∈ R^{γm×m}, drawn exactly as the model's
``init: spectral`` draws it (M Bernoulli(p) with ones 1/√p, A ~ N(0, 1/m)), with the density
p = Ω/(γm²) that keeps Ω = γpm² connections (App. D.1; eq. 18 uses this p). Its σ_max is computed by
Lanczos on the sparse matrix, never forming the γm×m array, and compared with eq. (17)'s prediction
√L₊, L₊ = c² + 3c²√γ(1−p)/q², c = 1 + √γ, q = √(pm), which grows about linearly with m.

Mixer: the MLP-Mixer of the same width m = S·C and the same Ω (S and C from eq. 14; only up to the
widest Mixer m_max = (Ω/γ)^{2/3}) has weights γS×S and γC×C drawn N(0, 1/S), N(0, 1/C). Its effective
weights I ⊗ W and their permutations have W's singular values, so σ_max ≈ c = 1 + √γ, the
Marchenko–Pastur edge, whatever the width.

Default widths: the Mixer widths S·C of the paper's grid at (Ω, γ) (Fig. 4: C = 4 … 64 at Ω = 2^19,
γ = 2), plus 2·m_max and 4·m_max, which only an SW-MLP reaches. Each value is the mean over
``--seeds`` (the paper: five trials).

App. D.1 scaling (``--a``, Fig. S.1 centre and right): for each scaling index a, the m×m weight Z = M ⊙ W
with m = Ω^{(1+a)/2}, M ~ Bernoulli(p = Ω^{-a}) and W ~ N(0, 1), so m²p = Ω; its singular values λ are
normalised by √c, c the mean diagonal entry of ZZᵀ (App. D.1), and pooled over ``--trials`` draws
(the paper: a = 1.5, Ω = 10^3, 50 trials for the centre panel). The largest, λ_max, grows with a
(right panel); a dense Gaussian W (a = 0, as a Mixer's weights) has λ_max → 2, the Marchenko–Pastur
edge, and an S-Mixer with S = C corresponds to a = 1/3 (p = 1/C). Fig. S.1 left (trainability) is
`mixer sweep report` of an SW-MLP density sweep (its error_vs_sparsity.png).

Examples:
    mixer spectrum --omega 2**19 --gamma 2                          Figure 4 (right)
    mixer spectrum --omega 2**19 --gamma 2 --plot spectrum.png --json
    mixer spectrum --omega 2**14 --gamma 2 --widths 128,256,512,1024 --all --plot s1.png   spectra too
    mixer spectrum --omega 10**3 --a 1.5 --trials 50 --plot s1_centre.png                   Fig. S.1 centre
    mixer spectrum --omega 10**3 --a 0,0.25,0.5,0.75,1,1.25,1.5 --trials 50 --plot s1.png  Fig. S.1 right
"""

from __future__ import annotations

import json

import torch
from jsonargparse import ArgumentParser, Namespace

from mixer_lightning.analysis.spectrum import (
    d1_width_density,
    mp_singular_value_density,
)
from mixer_lightning.analysis.width_spectra import (
    DEFAULT_MAX_ENTRIES,
    compute,
    compute_d1,
    default_grid,
    user_grid,
)
from mixer_lightning.commands.lists import integers, reals
from mixer_lightning.commands.lists import seeds as parse_seeds
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import save_figure
from mixer_lightning.width import parse_int_expression

DEFAULT_SEEDS = "0,1,2,3,4"  # Figure 4's caption: five trials (App. C.2 says ten)
DEFAULT_MAX_CONNECTIONS = 2**27  # non-zeros of one drawn weight: ~2 GB of CSR indices and values
MAX_WIDTH = 2**26  # m beyond this: the m×m (γm×m) index space leaves float64's exact integers
MAX_GAMMA = 1024.0
MAX_TRIALS = 10_000


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--omega", type=str, required=True, help="connections per layer Ω, e.g. 2**19")
    parser.add_argument("--gamma", type=float, default=None, help="expansion factor γ (default 2, Figure 4; --a: 1)")
    parser.add_argument("--widths", type=str, default=None, help="comma-separated SW-MLP widths m (default: see above)")
    parser.add_argument(
        "--seeds", type=str, default=None, help=f"comma-separated seeds; values are means (default {DEFAULT_SEEDS})"
    )
    parser.add_argument("--trials", type=int, default=None, help="or this many seeds 0, 1, … (Fig. S.1 centre: 50)")
    parser.add_argument(
        "--a",
        type=str,
        default=None,
        help="App. D.1 scaling indices a (comma-separated): m = Ω^((1+a)/2), p = Ω^(-a) (Fig. S.1)",
    )
    parser.add_argument("--bins", type=int, default=60, help="--a: histogram bins of the singular values")
    parser.add_argument(
        "--max_connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="the most non-zeros one drawn weight may hold (bounds Ω)",
    )
    parser.add_argument("--all", action="store_true", help="also every singular value (dense svd; small widths)")
    parser.add_argument("--max_entries", type=int, default=DEFAULT_MAX_ENTRIES, help="--all: largest γm·m done")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw σ_max against m (and the spectra) to this PNG")


def plot(result: dict, path: str) -> None:
    """Figure 4 (right): σ_max against m, SW-MLP (mean ± std) and eq. (17), the Mixer and 1 + √γ; with
    the full spectra (``--all``), their histograms against the Marchenko–Pastur law (Figure S.1 centre)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gamma, edge = result["gamma"], result["mixer"]["mp_edge"]
    sw = result["sw_mlp"]
    spectra = [r for r in sw if r.get("singular_values")]
    fig, axes = plt.subplots(1, 2 if spectra else 1, figsize=(11 if spectra else 6.2, 4.2), squeeze=False)
    ax = axes[0, 0]
    ms = [r["m"] for r in sw]
    ax.errorbar(
        ms,
        [r["sigma_max"] for r in sw],
        yerr=[r["sigma_max_std"] for r in sw],
        marker="o",
        ms=4,
        capsize=3,
        color="C0",
        label="SW-MLP  M ⊙ A  (γm×m, p = Ω/γm²)",
    )
    ax.plot(ms, [r["eq17"] for r in sw], "--", color="C0", alpha=0.6, label="eq. (17): √L₊")
    points = result["mixer"]["points"]
    if points:
        ax.plot(
            [p["m"] for p in points],
            [p["sigma_max_token"] for p in points],
            "s",
            ms=4,
            color="C3",
            label="Mixer token W (γS×S)",
        )
        ax.plot(
            [p["m"] for p in points],
            [p["sigma_max_channel"] for p in points],
            "^",
            ms=4,
            color="C3",
            mfc="none",
            label="Mixer channel V (γC×C)",
        )
    ax.axhline(edge, color="C3", linewidth=1.2, label=f"MP edge 1 + √γ = {edge:.3f}")
    ax.axvline(result["mixer"]["m_max"], color="gray", linestyle=":", label="widest Mixer: m_max = (Ω/γ)^(2/3)")
    ax.set(
        xscale="log",
        xlabel="width m",
        ylabel="largest singular value σ_max",
        title=f"Random weights at Ω = {result['omega']:,}, γ = {gamma:g} ({len(result['seeds'])} seeds)",
    )
    ax.legend(fontsize=8)
    if spectra:
        ax = axes[0, 1]
        top = max(max(r["singular_values"]) for r in spectra)
        cmap = plt.get_cmap("viridis")
        for i, r in enumerate(spectra):
            ax.hist(
                r["singular_values"],
                bins=60,
                range=(0, top * 1.02),
                density=True,
                histtype="step",
                color=cmap(i / max(1, len(spectra) - 1)),
                label=f"SW-MLP m = {r['m']}, p = {r['p']:.3g}",
            )
        s = torch.linspace(0, top * 1.02, 400, dtype=torch.float64)
        ax.plot(s, mp_singular_value_density(s, gamma), color="C3", linewidth=1.5, label="Mixer W: Marchenko–Pastur")
        ax.set(xlabel="singular value", ylabel="density", title="All singular values (mean over seeds)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def _seed_list(args: Namespace) -> list[int]:
    if args.trials is not None:
        require(args.seeds is None, "trials", "give --seeds or --trials, not both", "drop one of them")
        require(1 <= args.trials <= MAX_TRIALS, "trials", f"must be in [1, {MAX_TRIALS}], got {args.trials}")
        return list(range(args.trials))
    return parse_seeds(args.seeds if args.seeds is not None else DEFAULT_SEEDS)


def _check_omega(omega: int, max_connections: int) -> None:
    """Ω is the non-zeros of every weight drawn: beyond `max_connections` it is one line, not a
    machine that runs out of memory (``--omega 2**100``)."""
    require(omega > 0, "omega", f"must be positive, got {omega}", "give e.g. 2**19")
    require(
        omega <= max_connections,
        "omega",
        f"{omega:.4g} connections per layer is more than one weight drawn here "
        f"may hold (--max_connections {max_connections:,})",
        "give a smaller Ω (Figure 4: 2**19; Fig. S.1: 10**3), or raise --max_connections",
    )


def plot_d1(result: dict, path: str) -> None:
    """Fig. S.1 centre (the distribution of the normalised singular values, each a; the quarter-circle
    law of a dense Gaussian W, a = 0, as reference) and right (λ_max against a, min–max shaded; 2 for
    the Mixers' dense W; a = 1/3 is an S-Mixer with S = C)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["scaling"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.3))
    cmap = plt.get_cmap("viridis")
    for i, row in enumerate(rows):
        edges, density = row["histogram"]["edges"], row["histogram"]["density"]
        left.stairs(
            density,
            edges,
            color=cmap(i / max(1, len(rows) - 1)),
            label=f"a = {row['a']:g}: m = {row['m']:,}, p = {row['p']:.3g}",
        )
    s = torch.linspace(0, 2, 300, dtype=torch.float64)
    left.plot(s, mp_singular_value_density(s, 1.0), color="C3", linestyle="--", label="dense W (a = 0, Ω → ∞)")
    left.set(
        yscale="log",
        xlabel="normalised singular value λ",
        ylabel="density",
        title=f"Ω = {result['omega']:,}, {result['trials']} trials (zeros in the first bin)",
    )
    left.legend(fontsize=7)
    a = [r["a"] for r in rows]
    right.plot(a, [r["lambda_max"] for r in rows], "o-", color="C0", label="SW-MLP: mean λ_max")
    right.fill_between(
        a,
        [r["lambda_max_min"] for r in rows],
        [r["lambda_max_max"] for r in rows],
        color="C0",
        alpha=0.2,
        label="min–max over trials",
    )
    right.axhline(result["mixer_lambda_max"], color="C3", label="Mixer (dense W): 2, the MP edge")
    right.axvline(1 / 3, color="gray", linestyle=":", label="a = 1/3: S-Mixer with S = C (p = 1/C)")
    right.set(
        xlabel="scaling index a  (m = Ω^((1+a)/2), p = Ω^(-a))",
        ylabel="largest singular value λ_max",
        title="App. D.1: λ_max grows with the sparsity",
    )
    right.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def run_d1(args: Namespace, omega: int, seeds: list[int]) -> None:
    require(
        args.gamma in (None, 1, 1.0), "gamma", "App. D.1's scaling is for square m×m weights (γ = 1)", "drop --gamma"
    )
    require(
        not args.widths and not args.all, "a", "--a sets the widths itself (m = Ω^((1+a)/2))", "drop --widths / --all"
    )
    require(2 <= args.bins <= 10_000, "bins", f"must be in [2, 10000], got {args.bins}")
    scalings = reals(args.a, "a", lambda v: 0 <= v <= 8, "scaling indices a in [0, 8]", "0,0.5,1,1.5")
    for a in scalings:
        m, _ = d1_width_density(omega, a)
        require(
            m <= MAX_WIDTH,
            "a",
            f"a = {a:g} at Ω = {omega:,} gives m = Ω^((1+a)/2) = {m:.4g}, wider than {MAX_WIDTH:,}",
            "give a smaller a or Ω",
        )
    result = compute_d1(omega, scalings, seeds, args.bins, args.max_entries)
    if args.plot:
        plot_d1(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"App. D.1 scaling at Ω = {omega:,}: m = Ω^((1+a)/2), p = Ω^(-a), Z = M ⊙ W with W ~ N(0, 1); singular "
        f"values normalised by √(mean diagonal of ZZᵀ); {len(seeds)} trials"
    )
    print(f"{'a':>6} {'m':>9} {'p':>10} {'connections':>12} {'λ_max mean ± std':>18} {'[min, max]':>16} {'zeros':>7}")
    for r in result["scaling"]:
        print(
            f"{r['a']:>6g} {r['m']:>9,} {r['p']:>10.4g} {r['connections']:>12,.0f} "
            f"{r['lambda_max']:>9.4f} ± {r['lambda_max_std']:.4f} [{r['lambda_max_min']:.3f}, {r['lambda_max_max']:.3f}]"
            f" {r['zero_fraction']:>7.1%}"
        )
    print("Mixer (dense Gaussian W, Ω → ∞): λ_max = 2 (Marchenko–Pastur edge)")
    if args.plot:
        print(f"Plot written to {args.plot}")


def run(args: Namespace) -> None:
    omega = parse_int_expression(args.omega, "omega")
    _check_omega(omega, args.max_connections)
    seeds = _seed_list(args)
    if args.a is not None:
        run_d1(args, omega, seeds)
        return
    gamma = 2.0 if args.gamma is None else args.gamma
    require(
        1 <= gamma <= MAX_GAMMA,
        "gamma",
        f"must be >= 1 (a γm×m hidden layer) and <= {MAX_GAMMA:g}, got {gamma}",
        "give e.g. 2",
    )
    args.gamma = gamma
    if args.widths:
        widths = integers(args.widths, "widths", example="512,1024,2048")
        require(
            max(widths) <= MAX_WIDTH,
            "widths",
            f"m = {max(widths):,} is wider than {MAX_WIDTH:,}",
            "give smaller widths",
        )
        points = user_grid(omega, gamma, widths)
    else:
        points = default_grid(omega, gamma)
    result = compute(omega, gamma, points, seeds, full=args.all, max_entries=args.max_entries)
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    mixer = result["mixer"]
    print(
        f"Ω = {omega:,} connections per layer, γ = {args.gamma:g}, {len(seeds)} seeds; "
        f"Marchenko–Pastur edge 1 + √γ = {mixer['mp_edge']:.4f}; widest Mixer m_max = {mixer['m_max']:,.0f}"
    )
    by_width = {p["m"]: p for p in mixer["points"]}
    print(
        f"{'m':>7} {'p':>9} {'q=√(pm)':>8} {'SW-MLP σ_max':>17} {'eq. 17':>7}   {'Mixer (S, C): σ_max token / channel':<36}"
    )
    for row in result["sw_mlp"]:
        mix = by_width.get(row["m"])
        mixer_text = (
            f"({mix['S']}, {mix['C']}): {mix['sigma_max_token']:.4f} / {mix['sigma_max_channel']:.4f}"
            if mix
            else "none this wide at this Ω"
        )
        print(
            f"{row['m']:>7} {row['p']:>9.5f} {row['q']:>8.2f} {row['sigma_max']:>9.4f} ± {row['sigma_max_std']:.4f} "
            f"{row['eq17']:>7.4f}   {mixer_text}"
        )
    if mixer["sigma_max"] is not None:
        print(f"Mixer σ_max (mean over its weights) = {mixer['sigma_max']:.4f}")
    if args.plot:
        print(f"Plot written to {args.plot}")
