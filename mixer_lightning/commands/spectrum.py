"""Largest singular values of random SW-MLP and Mixer weights at a fixed number of connections Ω, over
increasing width (Hayase & Karakida 2024, Sec. 4.3, Figure 4 right; App. D.1, Figure S.1).

SW-MLP: M ⊙ A ∈ R^{γm×m} drawn as the model's ``init: spectral`` draws it, at p = Ω/(γm²); σ_max by
Lanczos on the sparse matrix, beside eq. (17)'s √L₊, L₊ = c² + 3c²√γ(1−p)/q², c = 1 + √γ, q = √(pm).
Mixer of the same m = S·C and Ω (eq. 14, up to m_max = (Ω/γ)^{2/3}): γS×S and γC×C weights N(0, 1/n),
σ_max ≈ 1 + √γ, the Marchenko–Pastur edge, whatever the width. Default widths: the paper's grid at
(Ω, γ) plus 2·m_max and 4·m_max; each value the mean over ``--seeds``.

``--a`` (Fig. S.1 centre, right): for each scaling index a, Z = M ⊙ W, m = Ω^{(1+a)/2}, p = Ω^{-a},
W ~ N(0, 1), singular values normalised by √(mean diagonal of ZZᵀ), pooled over ``--trials``; λ_max
grows with a (a = 0: a dense W, λ_max → 2; a = 1/3: an S-Mixer with S = C).

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
from jsonargparse.typing import PositiveInt, restricted_number_type

from mixer_lightning.analysis.spectrum import mp_singular_value_density
from mixer_lightning.analysis.width_spectra import DEFAULT_MAX_ENTRIES, compute, compute_d1, default_grid, user_grid
from mixer_lightning.commands.lists import integers, reals
from mixer_lightning.commands.lists import seeds as parse_seeds
from mixer_lightning.errors import require
from mixer_lightning.safety.atomic import pyplot, save_figure
from mixer_lightning.width import GAMMA, check_omega, parse_int_expression

DEFAULT_SEEDS = "0,1,2,3,4"  # Figure 4's caption: five trials (App. C.2 says ten)
GammaAtLeastOne = restricted_number_type(None, float, (">=", 1.0))  # a γm×m hidden layer


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--omega", type=str, required=True, help="connections per layer Ω, e.g. 2**19")
    parser.add_argument(
        "--gamma",
        type=GammaAtLeastOne,
        default=GAMMA,
        help="expansion factor γ (default 1, the S-Mixer's of Figs. 3, 5-7 at fixed Ω; Figure 4: 2)",
    )
    parser.add_argument("--widths", type=str, default=None, help="comma-separated SW-MLP widths m (default: see above)")
    parser.add_argument("--seeds", type=str, default=None, help=f"comma-separated seeds (default {DEFAULT_SEEDS})")
    parser.add_argument("--trials", type=PositiveInt | None, default=None, help="or seeds 0, 1, … (Fig. S.1: 50)")
    parser.add_argument("--a", type=str, default=None, help="App. D.1 scaling indices a: m = Ω^((1+a)/2), p = Ω^(-a)")
    parser.add_argument(
        "--bins", type=restricted_number_type(None, int, (">=", 2)), default=60, help="--a: histogram bins"
    )
    parser.add_argument("--all", action="store_true", help="also every singular value (dense svd; small widths)")
    parser.add_argument("--max_entries", type=PositiveInt, default=DEFAULT_MAX_ENTRIES, help="--all: largest γm·m done")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--plot", type=str, default=None, help="draw σ_max against m (and the spectra) to this PNG")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")


def _values(rows: list[dict], key: str) -> list:
    return [row[key] for row in rows]


def plot(result: dict, path: str) -> None:
    """Figure 4 (right): σ_max against m, SW-MLP (mean ± std) and eq. (17), the Mixer and 1 + √γ; with
    the full spectra (``--all``), their histograms against the Marchenko–Pastur law (Figure S.1 centre)."""
    plt = pyplot()
    gamma, edge, sw, points = result["gamma"], result["mixer"]["mp_edge"], result["sw_mlp"], result["mixer"]["points"]
    spectra = [r for r in sw if r.get("singular_values")]
    fig, axes = plt.subplots(1, 2 if spectra else 1, figsize=(11 if spectra else 6.2, 4.2), squeeze=False)
    ax, ms = axes[0, 0], _values(sw, "m")
    label = "SW-MLP  M ⊙ A  (γm×m, p = Ω/γm²)"
    ax.errorbar(ms, _values(sw, "sigma_max"), _values(sw, "sigma_max_std"), marker="o", ms=4, capsize=3, label=label)
    ax.plot(ms, _values(sw, "eq17"), "--", color="C0", alpha=0.6, label="eq. (17): √L₊")
    mixers = (("token", "s", "C3", "token W (γS×S)"), ("channel", "^", "none", "channel V (γC×C)")) if points else ()
    for key, marker, fill, label in mixers:
        ys = _values(points, f"sigma_max_{key}")
        ax.plot(_values(points, "m"), ys, marker, color="C3", mfc=fill, label=f"Mixer {label}")
    ax.axhline(edge, color="C3", linewidth=1.2, label=f"MP edge 1 + √γ = {edge:.3f}")
    ax.axvline(result["mixer"]["m_max"], color="gray", linestyle=":", label="widest Mixer: m_max = (Ω/γ)^(2/3)")
    title = f"Random weights at Ω = {result['omega']:,}, γ = {gamma:g} ({len(result['seeds'])} seeds)"
    ax.set(xscale="log", xlabel="width m", ylabel="largest singular value σ_max", title=title)
    ax.legend(fontsize=8)
    if spectra:
        ax, top = axes[0, 1], 1.02 * max(max(r["singular_values"]) for r in spectra)
        for i, r in enumerate(spectra):
            color = plt.get_cmap("viridis")(i / max(1, len(spectra) - 1))
            label = f"SW-MLP m = {r['m']}, p = {r['p']:.3g}"
            ax.hist(r["singular_values"], 60, (0, top), density=True, histtype="step", color=color, label=label)
        s = torch.linspace(0, top, 400, dtype=torch.float64)
        ax.plot(s, mp_singular_value_density(s, gamma), color="C3", linewidth=1.5, label="Mixer W: Marchenko–Pastur")
        ax.set(xlabel="singular value", ylabel="density", title="All singular values (mean over seeds)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def plot_d1(result: dict, path: str) -> None:
    """Fig. S.1 centre (the normalised singular values for each a; a dense Gaussian W's law as reference)
    and right (λ_max against a, min–max shaded; 2 for the Mixers' dense W; a = 1/3: an S-Mixer, S = C)."""
    plt = pyplot()
    rows = result["scaling"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.3))
    for i, row in enumerate(rows):
        color = plt.get_cmap("viridis")(i / max(1, len(rows) - 1))
        label = f"a = {row['a']:g}: m = {row['m']:,}, p = {row['p']:.3g}"
        left.stairs(row["histogram"]["density"], row["histogram"]["edges"], color=color, label=label)
    s = torch.linspace(0, 2, 300, dtype=torch.float64)
    left.plot(s, mp_singular_value_density(s, 1.0), color="C3", linestyle="--", label="dense W (a = 0, Ω → ∞)")
    title = f"Ω = {result['omega']:,}, {result['trials']} trials (zeros in the first bin)"
    left.set(yscale="log", xlabel="normalised singular value λ", ylabel="density", title=title)
    left.legend(fontsize=7)
    a = _values(rows, "a")
    right.plot(a, _values(rows, "lambda_max"), "o-", color="C0", label="SW-MLP: mean λ_max")
    low, high = _values(rows, "lambda_max_min"), _values(rows, "lambda_max_max")
    right.fill_between(a, low, high, color="C0", alpha=0.2, label="min–max over trials")
    right.axhline(result["mixer_lambda_max"], color="C3", label="Mixer (dense W): 2, the MP edge")
    right.axvline(1 / 3, color="gray", linestyle=":", label="a = 1/3: S-Mixer with S = C (p = 1/C)")
    xlabel = "scaling index a  (m = Ω^((1+a)/2), p = Ω^(-a))"
    right.set(xlabel=xlabel, ylabel="largest singular value λ_max", title="App. D.1: λ_max grows with the sparsity")
    right.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def run_d1(args: Namespace, omega: int, seeds: list[int]) -> None:
    require(args.gamma == 1.0, "gamma", "App. D.1's scaling is for square m×m weights (γ = 1)", "drop --gamma")
    require(not args.widths and not args.all, "a", "sets the widths itself (m = Ω^((1+a)/2))", "drop --widths / --all")
    scalings = reals(args.a, "a", lambda v: v >= 0, "scaling indices a >= 0", "0,0.5,1,1.5")
    result = compute_d1(omega, scalings, seeds, args.bins, args.max_entries)
    if args.plot:
        plot_d1(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"App. D.1 scaling at Ω = {omega:,}: m = Ω^((1+a)/2), p = Ω^(-a), Z = M ⊙ W with W ~ N(0, 1); singular "
          f"values normalised by √(mean diagonal of ZZᵀ); {len(seeds)} trials")  # fmt: skip
    print(f"{'a':>6} {'m':>9} {'p':>10} {'connections':>12} {'λ_max mean ± std':>18} {'[min, max]':>16} {'zeros':>7}")
    for r in result["scaling"]:
        spread = f"{r['lambda_max']:>9.4f} ± {r['lambda_max_std']:.4f} [{r['lambda_max_min']:.3f}, {r['lambda_max_max']:.3f}]"
        print(
            f"{r['a']:>6g} {r['m']:>9,} {r['p']:>10.4g} {r['connections']:>12,.0f} {spread} {r['zero_fraction']:>7.1%}"
        )
    print("Mixer (dense Gaussian W, Ω → ∞): λ_max = 2 (Marchenko–Pastur edge)")
    if args.plot:
        print(f"Plot written to {args.plot}")


def run(args: Namespace) -> None:
    omega = parse_int_expression(args.omega, "omega")
    check_omega(omega)
    require(args.trials is None or args.seeds is None, "trials", "give --seeds or --trials, not both", "drop one")
    seeds = list(range(args.trials)) if args.trials else parse_seeds(args.seeds or DEFAULT_SEEDS)
    if args.a is not None:
        run_d1(args, omega, seeds)
        return
    gamma = args.gamma
    widths = integers(args.widths, "widths", example="512,1024,2048") if args.widths else None
    points = user_grid(omega, gamma, widths) if widths else default_grid(omega, gamma)
    result = compute(omega, gamma, points, seeds, full=args.all, max_entries=args.max_entries)
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    mixer = result["mixer"]
    print(f"Ω = {omega:,} connections per layer, γ = {gamma:g}, {len(seeds)} seeds; Marchenko–Pastur edge "
          f"1 + √γ = {mixer['mp_edge']:.4f}; widest Mixer m_max = {mixer['m_max']:,.0f}")  # fmt: skip
    print(f"{'m':>7} {'p':>9} {'q=√(pm)':>8} {'SW-MLP σ_max':>17} {'eq. 17':>7}   Mixer (S, C): σ_max token / channel")
    by_width = {p["m"]: p for p in mixer["points"]}
    for r in result["sw_mlp"]:
        mix = by_width.get(r["m"])
        text = (
            f"({mix['S']}, {mix['C']}): {mix['sigma_max_token']:.4f} / {mix['sigma_max_channel']:.4f}" if mix else "-"
        )
        print(f"{r['m']:>7} {r['p']:>9.5f} {r['q']:>8.2f} {r['sigma_max']:>9.4f} ± {r['sigma_max_std']:.4f} "
              f"{r['eq17']:>7.4f}   {text}")  # fmt: skip
    if mixer["sigma_max"] is not None:
        print(f"Mixer σ_max (mean over its weights) = {mixer['sigma_max']:.4f}")
    if args.plot:
        print(f"Plot written to {args.plot}")
