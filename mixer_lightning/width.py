"""Width and connections of Mixers and sparse-weight MLPs (Hayase & Karakida 2024, Sec. 4.1).

Pure arithmetic (no torch), shared by the models (a Mixer given by Ω and C), the ``mixer width``
command, the sweeps and the analyses.

- Ω, the average number of connections per layer (eq. 14): Ω = γ(C²S + CS²)/2 for an MLP-Mixer
  with D_S = γS, D_C = γC; γ = 1 for the S-Mixer. Ω = p·m² for an SW-MLP layer (eq. 13), p·γ·m² for
  its MLP blocks.
- At fixed Ω, S = (√(C² + 8Ω/(γC)) − C)/2, so the effective width m = S·C peaks at
  S* = C* = (Ω/γ)^{1/3} with m_max = (Ω/γ)^{2/3} (eq. 15), where the non-zero ratio p = Ω/(γm²)
  is smallest.
- An SW-MLP of density p at the same Ω has width m = √(Ω/(γp)) (eq. S.43).
- At fixed Ω and fixed width m = S·C, the expansion factor is γ = 2Ω/(m(C + m/C)), a single peak in C
  at C* = S* = √m with γ_max = Ω/(m√m) (App. D.3, eq. S.46; Fig. S.3).
"""

from __future__ import annotations

import ast
import math
from dataclasses import asdict, dataclass

from mixer_lightning.errors import ConfigError, require

# The default γ of `mixer width` and `mixer spectrum`: the S-Mixer's (γ = 1), that of the paper's Ω experiments
# (Figs. 3, 5-7, App. D.1); Figure 4 alone takes γ = 2.
GAMMA = 1.0
MAX_EXPRESSION_BITS = 1024  # an expression's value (and every step of it) stays below 2**1024


def parse_int_expression(text: str | int, field: str = "omega") -> int:
    """An integer written plainly (``262144``) or as the paper writes Ω (``2**18``, ``2^18``,
    ``3*2**20``, ``290217984``). Values past 2**1024 are refused before they are computed
    (``(2**512)**512`` would take the machine's memory)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text

    def bounded(value: int) -> int:
        if abs(value).bit_length() > MAX_EXPRESSION_BITS:
            raise ValueError("too large")
        return value

    def evaluate(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return bounded(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Pow)):
            left, right = evaluate(node.left), evaluate(node.right)
            if isinstance(node.op, ast.Pow):
                if right < 0:
                    raise ValueError("not an integer expression")
                if right > 2**20 or (abs(left).bit_length() - 1) * right > MAX_EXPRESSION_BITS:
                    raise ValueError("exponent out of range")
                return bounded(left**right)
            return bounded({ast.Mult: left * right, ast.Add: left + right, ast.Sub: left - right}[type(node.op)])
        raise ValueError("not an integer expression")

    try:
        return evaluate(ast.parse(str(text).strip().replace("^", "**"), mode="eval").body)
    except ValueError as error:
        if str(error) in ("too large", "exponent out of range"):
            raise ConfigError(
                field, f"{text!r} is too large (past 2**{MAX_EXPRESSION_BITS})", "write e.g. 262144 or 2**18"
            ) from None
        raise ConfigError(field, f"cannot read {text!r} as an integer", "write e.g. 262144 or 2**18") from None
    except (SyntaxError, KeyError, RecursionError, MemoryError):
        raise ConfigError(field, f"cannot read {text!r} as an integer", "write e.g. 262144 or 2**18") from None


def parse_real_expression(text: str | float, field: str) -> float:
    """A finite real number written plainly (``0.015625``, ``1e-3``) or as an expression (``2**-6``,
    ``2^-6``, ``1/64``, ``10**8``)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:

        def evaluate(node: ast.AST) -> float:
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, (int, float))
                and not isinstance(node.value, bool)
            ):
                return float(node.value)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                operand = evaluate(node.operand)
                return -operand if isinstance(node.op, ast.USub) else operand
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub, ast.Pow)):
                left, right = evaluate(node.left), evaluate(node.right)
                if isinstance(node.op, ast.Pow):
                    if abs(right) > 4096:
                        raise ValueError("exponent out of range")
                    return math.pow(left, right)
                if isinstance(node.op, ast.Div):
                    return left / right
                return {ast.Mult: left * right, ast.Add: left + right, ast.Sub: left - right}[type(node.op)]
            raise ValueError("not a number")

        try:
            value = evaluate(ast.parse(str(text).strip().replace("^", "**"), mode="eval").body)
        except (SyntaxError, ValueError, KeyError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
            value = math.nan
    if not math.isfinite(value):
        raise ConfigError(field, f"cannot read {text!r} as a finite number", "write e.g. 0.5, 1e-3 or 2**-6")
    return value


MAX_OMEGA = 2**62  # connections per layer: far past any model (Mixer-B/16 has 2.9e8), and exact in float64 ratios
MAX_WIDTH = 2**40


def check_omega(omega_: float, field: str = "omega") -> None:
    """Ω must be positive and below `MAX_OMEGA` (``2**100`` is a typo, not a model)."""
    require(omega_ > 0, field, f"must be positive, got {omega_}", "give e.g. 2**18")
    require(
        omega_ <= MAX_OMEGA,
        field,
        f"{omega_:.4g} connections per layer is past any model (at most 2**62)",
        "give e.g. 2**18 (Figure 5) or 290217984 (Mixer-B/16)",
    )


def check_width(width: float, field: str = "width") -> None:
    require(width > 0, field, f"must be positive, got {width}", "give e.g. 4096")
    require(width <= MAX_WIDTH, field, f"{width:.4g} is past any model (at most 2**40)", "give e.g. 4096")


def omega(tokens: float, channels: float, gamma: float = 1.0) -> float:
    """Ω = γ(C²S + CS²)/2: average connections per mixing layer (eq. 14)."""
    return gamma * (channels**2 * tokens + channels * tokens**2) / 2


def tokens_from_omega(omega_: float, channels: float, gamma: float = 1.0) -> float:
    """The real S with Ω(S, C, γ) = Ω: S = (√(C² + 8Ω/(γC)) − C)/2."""
    return (math.sqrt(channels**2 + 8 * omega_ / (gamma * channels)) - channels) / 2


def solve_tokens(omega_: float, channels: int, gamma: float = 1.0) -> int:
    """S for (Ω, C, γ), rounded to the nearest integer as the paper's lists; a `ConfigError` if
    Ω cannot give a single token at this C."""
    check_omega(omega_)
    require(channels > 0, "channels", f"must be positive, got {channels}")
    require(gamma > 0, "gamma", f"must be positive, got {gamma}")
    tokens = round(tokens_from_omega(omega_, channels, gamma))
    if tokens < 1:
        smallest = math.ceil(omega(1, channels, gamma))
        raise ConfigError(
            "omega",
            f"{omega_:g} is unreachable with channels={channels} and gamma={gamma:g} (S would be < 1)",
            f"use omega >= {smallest} or fewer channels",
        )
    return tokens


def resolve_tokens(tokens: int | None, omega_: float | str | None, channels: int, gamma: float) -> int | None:
    """S from either ``tokens`` or ``omega`` (with C, γ; Ω as a number or as the paper writes it,
    ``2**18``); both given must agree."""
    if omega_ is None:
        return tokens
    if isinstance(omega_, str):
        omega_ = parse_int_expression(omega_, "omega")
    solved = solve_tokens(omega_, channels, gamma)
    if tokens is not None and tokens != solved:
        raise ConfigError(
            "tokens",
            f"tokens={tokens} contradicts omega={omega_:g} (which gives S={solved} at channels={channels}, gamma={gamma:g})",
            "give tokens or omega, not both",
        )
    return solved


def optimum(omega_: float, gamma: float = 1.0) -> dict[str, float]:
    """S* = C* = (Ω/γ)^{1/3} and m_max = (Ω/γ)^{2/3} (eq. 15)."""
    side = round((omega_ / gamma) ** (1 / 3), 9)  # 2**18 gives 64, not 63.99999999999999
    return {"S": side, "C": side, "m": round(side * side, 6)}


def density(tokens: float, channels: float, gamma: float = 1.0) -> float:
    """Non-zero ratio p = Ω/(γm²) of the effective wide MLP of a Mixer (= (1/S + 1/C)/2)."""
    m = tokens * channels
    return omega(tokens, channels, gamma) / (gamma * m * m)


def sw_mlp_width(omega_: float, p: float, gamma: float = 1.0) -> float:
    """Width of an SW-MLP with density p and Ω connections per layer: m = √(Ω/(γp)) (eq. S.43)."""
    require(0 < p <= 1, "sparsity", f"density p = {p:g} must be in (0, 1]", "give 1-p in [0, 1)")
    return math.sqrt(omega_ / (gamma * p))


@dataclass(frozen=True)
class WidthPair:
    """One (C, S) point at fixed Ω."""

    C: int
    S: int
    m: int  # effective width S·C
    p: float  # non-zero ratio of the effective weights
    connections: float  # Ω(S, C, γ) of the rounded pair

    def as_dict(self) -> dict:
        return asdict(self)


def width_pairs(omega_: float, gamma: float, channels: list[int]) -> list[WidthPair]:
    """(C, S, m, p, Ω) for each C at fixed Ω."""
    pairs = []
    for c in channels:
        s = solve_tokens(omega_, c, gamma)
        pairs.append(WidthPair(C=c, S=s, m=s * c, p=density(s, c, gamma), connections=omega(s, c, gamma)))
    return pairs


# The channel sizes the paper sweeps (App. C.2, C.4), mirrored pairs added by `default_channels`.
PAPER_CHANNELS: dict[tuple[int, float], list[int]] = {
    (2**18, 1.0): [16, 32, 48],
    (2**21, 1.0): [16, 32, 64],
    (2**27, 1.0): [128, 256],
    (2**19, 2.0): [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 64],
}


def default_channels(omega_: float, gamma: float = 1.0) -> list[int]:
    """The C values of a sweep at fixed Ω: the paper's where it gives them (Fig. 4, 5), else powers
    of two from 16 up to C* and C* itself rounded (the widest point, S ≈ C: eq. 15); with every C's S
    added, so that (C, S) and (S, C) both appear."""
    below = PAPER_CHANNELS.get((int(omega_), float(gamma)))
    mirror = below is None or gamma == 1.0
    if below is None:
        c_star = optimum(omega_, gamma)["C"]
        below = [c for c in (2**k for k in range(4, 40)) if c <= c_star * 1.0001] + [max(1, round(c_star))]
    channels = set(below)
    if mirror:
        channels |= {solve_tokens(omega_, c, gamma) for c in below}
    return sorted(channels)


def model_connections(model) -> dict:
    """Connections of a built model: its ``connections()`` (one count per FC layer of the effective
    wide MLP: a Mixer's mixing layers, an SW-MLP's sparse layers) and their mean Ω. Duck-typed, so this
    module needs no torch."""
    report = getattr(model, "connections", None)
    require(callable(report), "model", f"{type(model).__name__} does not report its connections")
    layers = [int(count) for count in report()]
    return {"layers": layers, "omega": sum(layers) / len(layers)}


# ------------------------------------------------------------- γ at fixed width m (App. D.3, eq. S.46)


def gamma_at_width(omega_: float, width: float, channels: float) -> float:
    """γ = 2Ω/(m(C + m/C)): the expansion factor that keeps Ω connections per layer at width m = S·C
    (eq. 14 with S = m/C; App. D.3)."""
    return 2 * omega_ / (width * (channels + width / channels))


def gamma_optimum(omega_: float, width: float) -> dict[str, float]:
    """C* = S* = √m and γ_max = Ω/(m√m): the widest expansion at fixed (Ω, m) (eq. S.46)."""
    side = math.sqrt(width)
    return {"S": side, "C": side, "gamma": omega_ / (width * side)}


def _hidden(gamma: float, n: int) -> int:
    """D = γn rounded half up, as the models round it (`mixer_lightning.models.layers.hidden_width`)."""
    return max(1, int(math.floor(gamma * n + 0.5)))


@dataclass(frozen=True)
class GammaPoint:
    """One (C, S = m/C, γ) point at fixed Ω and width m (eq. S.46)."""

    C: int
    S: int
    m: int
    gamma: float
    p: float  # non-zero ratio of the effective weights, (1/S + 1/C)/2
    connections: float  # Ω of the model as built: D_S = γS and D_C = γC rounded, (C·D_S·S + S·D_C·C)/2

    def as_dict(self) -> dict:
        return asdict(self)


def default_width_channels(width: int) -> list[int]:
    """The C of a γ grid at fixed m: the powers of two dividing m with C and S = m/C both >= 4, and
    √m itself (the optimum of eq. S.46) where it is an integer."""
    channels = {c for c in (2**k for k in range(2, 40)) if width % c == 0 and c >= 4 and width // c >= 4}
    root = math.isqrt(width)
    if root * root == width:
        channels.add(root)
    return sorted(channels)


def gamma_points(omega_: float, width: int, channels: list[int] | None = None) -> list[GammaPoint]:
    """(C, S = m/C, γ of eq. S.46) for each C that divides m (default `default_width_channels`)."""
    check_omega(omega_)
    check_width(width)
    channels = default_width_channels(width) if channels is None else channels
    require(bool(channels), "channels", f"no C divides m = {width} with C, S >= 4", "give --channels")
    points = []
    for c in channels:
        if c <= 0 or width % c:
            divisors = [d for d in range(1, width + 1) if width % d == 0][:12]
            raise ConfigError(
                "channels",
                f"{c} does not divide the width m = {width} (S = m/C must be an integer)",
                f"choose divisors of {width}, e.g. {','.join(map(str, divisors))}",
            )
        s = width // c
        gamma = gamma_at_width(omega_, width, c)
        realised = (c * _hidden(gamma, s) * s + s * _hidden(gamma, c) * c) / 2
        points.append(GammaPoint(C=c, S=s, m=width, gamma=gamma, p=density(s, c, gamma), connections=realised))
    return points
