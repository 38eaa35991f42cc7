"""The grid points of a sweep. One width grid, chosen by the base config's network and the flags (App. C
of Hayase & Karakida 2024), crossed with the generic axes (``--grid``, `axes`):

==================  ==========================================  ===========================================
kind                flags                                       points
==================  ==========================================  ===========================================
channels            Mixer, ``--omega`` [``--channels``]         C; S from (Ω, C, γ) (eq. 14; Figs. 4-6)
patch_sizes         Mixer, ``--omega --patch_sizes``            P, C = in_chans·P²; S from Ω (Fig. 6 ImageNet)
gamma_at_width      MLP-Mixer, ``--omega --width`` [channels]   C | m, S = m/C, γ = 2Ω/(m(C + m/C)) (eq. S.46)
densities_at_omega  SW-MLP, ``--omega`` [``--densities``]       p, m = √(Ω/(γp)) (eq. S.43; Fig. 5, S.1 left)
densities_at_width  SW-MLP, [``--width``] [``--densities``]     p at the config's (or the given) width (Fig. 2)
base                none of these                               the base config itself (seeds, axes only)
==================  ==========================================  ===========================================
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any

from mixer_lightning.commands.lists import integers, reals
from mixer_lightning.commands.sweep.axes import Axis, format_value, nested, parse_axes
from mixer_lightning.errors import require
from mixer_lightning.safety.config_files import deep_merge
from mixer_lightning.width import (
    check_omega,
    default_channels,
    density,
    gamma_points,
    parse_int_expression,
    solve_tokens,
)

PAPER_DENSITIES_AT_OMEGA = (0.9, 0.7, 0.5, 0.3, 0.1)  # Fig. 5 (App. C.4): sparsity 1-p = 0.1 … 0.9
PAPER_DENSITIES_AT_WIDTH = tuple(2.0**-n for n in range(11))  # Fig. 2(a) (App. C.1): p = 2^-n
MODEL_SIZE_KEYS = ("channels", "tokens", "omega", "gamma", "patch_size", "density", "width")


def network(config: dict) -> tuple[str, dict, str]:
    """(class path, init args, dotted key of the init args) of a config's network, ``model.net``."""
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    net = model.get("net") if isinstance(model.get("net"), dict) else {}
    return str(net.get("class_path") or ""), net.get("init_args") or {}, "model.net.init_args"


def family(path: str) -> tuple[str | None, set[str]]:
    """The width grid a network class takes, by what it is: a Mixer of PK layers (`models.pk.PKMixer`, any
    family built on it) is swept over C at fixed Ω, an SW-MLP over densities; none for another class. With
    the parameters it declares: a Mixer without ``gamma`` has γ = 1 (the S-Mixer's FC + σ)."""
    if not path:
        return None, set()
    from mixer_lightning.models.pk import PKMixer
    from mixer_lightning.models.sw_mlp import SWMLP
    from mixer_lightning.tasks.initialise import import_network

    cls = import_network(path, "config", "the base config")
    kind = "mixer" if issubclass(cls, PKMixer) else "sw_mlp" if issubclass(cls, SWMLP) else None
    return kind, set(inspect.signature(cls).parameters)


@dataclass
class GridPoint:
    """One point: its id (the run directory's name), the network arguments it sets, the width figures the
    report plots (None where they do not apply) and its generic axis values."""

    id: str
    overrides: dict = field(default_factory=dict)
    C: int | None = None
    S: int | None = None
    P: int | None = None
    m: int | None = None
    p: float | None = None
    gamma: float | None = None
    axes: dict[str, Any] = field(default_factory=dict)
    width_point: str | None = None  # the id of the width point alone (without the axes)

    def figures(self) -> dict:
        keys = ("C", "S", "P", "m", "p", "gamma")
        return {k: getattr(self, k) for k in keys} | {
            "axes": dict(self.axes),
            "width_point": self.width_point or self.id,
        }

    def describe(self) -> str:
        parts = []
        if self.C is not None:
            parts.append(f"C = {self.C}, S = {self.S}, m = S·C = {self.m:,}")
        elif self.m is not None:
            parts.append(f"p = {self.p:g}, m = {self.m:,}")
        if self.gamma is not None:
            parts.append(f"γ = {self.gamma:.6g}")
        return ", ".join(parts + [f"{name} = {value}" for name, value in self.axes.items()]) or "the base config"


@dataclass
class Grid:
    kind: str
    points: list[GridPoint]
    omega: int | None
    gamma: float | None
    width: int | None
    axes: list[Axis]

    def signature(self) -> dict:
        """What a sweep directory extended by another emit must share with the sweep already there."""
        keys = ("kind", "omega", "gamma", "width")
        return {k: getattr(self, k) for k in keys} | {"axes": [a.key for a in self.axes]}


def _mixer_grid(args, init_args: dict, omega: int, gamma: float, free_gamma: bool) -> list[GridPoint]:
    """Width points at fixed Ω: per C (or per P, C = in_chans·P²), S solved from (Ω, C, γ)."""
    if args.patch_sizes:
        require(not args.channels, "channels", "give --channels or --patch_sizes, not both")
        sizes = integers(args.patch_sizes, "patch_sizes")
        points = [
            GridPoint(f"P{p}_C{args.in_chans * p * p}", {"patch_size": p}, C=args.in_chans * p * p, P=p) for p in sizes
        ]
    else:
        channels = integers(args.channels, "channels") if args.channels else default_channels(omega, gamma)
        points = [GridPoint(f"C{c}", {}, C=c, P=init_args.get("patch_size")) for c in channels]
    for point in points:
        point.S = solve_tokens(omega, point.C, gamma)
        point.id += f"_S{point.S}"
        point.m, point.p, point.gamma = point.S * point.C, density(point.S, point.C, gamma), gamma
        point.overrides.update(channels=point.C, omega=omega, tokens=None)
        if free_gamma:
            point.overrides["gamma"] = gamma
    return points


def _gamma_grid(args, omega: int, width: int) -> list[GridPoint]:
    """App. D.3 / Fig. S.3: C | m, S = m/C, γ = 2Ω/(m(C + m/C)) (eq. S.46); the network is given S and γ
    (Ω would solve S again)."""
    channels = integers(args.channels, "channels") if args.channels else None
    return [
        GridPoint(
            f"C{g.C}_S{g.S}_g{g.gamma:.4g}",
            {"channels": g.C, "tokens": g.S, "gamma": g.gamma, "omega": None},
            C=g.C,
            S=g.S,
            m=width,
            p=g.p,
            gamma=g.gamma,
        )
        for g in gamma_points(omega, width, channels)
    ]


def _sw_mlp_grid(
    args, config_paths: list[str], init_args: dict, omega: int | None
) -> tuple[str, list, float, int | None]:
    """Densities at fixed Ω (Fig. 5, S.1 left: m = √(Ω/(γp))) or at one width (Fig. 2(a)); the points keep
    the γ their width was solved with (a single-FC block has γ = 1)."""
    from mixer_lightning.models.sw_mlp import SWMLP

    require(not args.channels and not args.patch_sizes, "channels", "an SW-MLP sweep is over densities")
    block = init_args.get("block") or inspect.signature(SWMLP).parameters["block"].default
    require(block != "fc" or args.gamma in (None, 1), "gamma", "a single-FC SW-MLP block has γ = 1")
    gamma = 1.0 if block == "fc" else float(args.gamma or init_args.get("gamma") or 2.0)
    keep = {} if block == "fc" else {"gamma": gamma}
    default = PAPER_DENSITIES_AT_OMEGA if omega is not None else PAPER_DENSITIES_AT_WIDTH
    densities = (
        reals(args.densities, "densities", lambda v: 0 < v <= 1, "densities p in (0, 1]") if args.densities else default
    )
    patch = init_args.get("patch_size")
    if omega is not None:
        require(args.width is None, "width", "give --omega (the width follows from p) or --width, not both")
        points = []
        for p in densities:
            m = max(1, round((omega / (gamma * p)) ** 0.5))
            overrides = {"omega": omega, "density": p, "width": None, "channels": None, **keep}
            points.append(GridPoint(f"p{p:g}_m{m}", overrides, P=patch, m=m, p=p, gamma=gamma))
        return "densities_at_omega", points, gamma, None
    if args.width is not None:
        width, keep_width = parse_int_expression(args.width, "width"), {"channels": None}
        keep_width["width"] = width
    elif init_args.get("width"):
        width, keep_width = int(init_args["width"]), {}
    else:  # the config's channels × S0 patches (S0 from the data's image size)
        require(bool(init_args.get("channels")), "width", "the config sets neither width nor channels", "give --width")
        from mixer_lightning.analysis.features import datamodule_from_config

        image_size = datamodule_from_config(config_paths).image_size
        width, keep_width = (image_size // int(patch or 4)) ** 2 * int(init_args["channels"]), {}
    overrides = {"density": None, "omega": None, **keep_width, **keep}
    points = [
        GridPoint(f"p{p:.4g}_m{width}", overrides | {"density": p}, P=patch, m=width, p=p, gamma=gamma)
        for p in densities
    ]
    return "densities_at_width", points, gamma, width


def width_grid(
    args, base: dict, config_paths: list[str]
) -> tuple[str, list[GridPoint], int | None, float | None, int | None]:
    """(kind, points, Ω, γ, fixed width) of the flags' width grid; the points' overrides are network arguments."""
    omega = None
    if args.omega is not None:
        omega = parse_int_expression(args.omega, "omega")
        check_omega(omega)
    path, init_args, _ = network(base)
    name = path.rsplit(".", 1)[-1] or "(none)"
    sizes = args.channels or args.patch_sizes or args.width is not None or args.densities is not None
    kind, parameters = family(path) if omega is not None or sizes else (None, set())
    require(kind or (omega is None and not sizes), "config", f"network {name} has no width grid")
    if kind == "sw_mlp":
        kind, points, gamma, width = _sw_mlp_grid(args, config_paths, init_args, omega)
        return kind, points, omega, gamma, width
    free_gamma = "gamma" in parameters
    if kind is not None:
        require(args.densities is None, "densities", f"the {name} is swept over channels, not densities")
        require(free_gamma or args.gamma in (None, 1), "gamma", f"the {name} has γ = 1", "drop --gamma")
    if args.width is not None:
        require(free_gamma, "width", f"the {name} has γ = 1: a fixed width cannot keep Ω (eq. S.46)")
        require(omega is not None, "omega", "a γ grid at fixed width needs --omega (eq. S.46)")
        require(not args.patch_sizes and args.gamma is None, "width", "a fixed-width grid takes --channels only")
        width = parse_int_expression(args.width, "width")
        return "gamma_at_width", _gamma_grid(args, omega, width), omega, None, width
    if omega is None:
        require(not sizes, "omega", "a channel or patch-size grid needs --omega (S is solved at fixed Ω)")
        require(args.gamma is None, "gamma", "γ belongs to a width grid", "vary it with --grid")
        return "base", [GridPoint("base")], None, None, None
    gamma = float(args.gamma or init_args.get("gamma") or 4.0) if free_gamma else 1.0
    kind = "patch_sizes" if args.patch_sizes else "channels"
    return kind, _mixer_grid(args, init_args, omega, gamma, free_gamma), omega, gamma, None


def build(args, base: dict, config_paths: list[str]) -> Grid:
    """The grid of the flags over the base config: width points × generic axes, with unique ids."""
    kind, points, omega, gamma, width = width_grid(args, base, config_paths)
    key = network(base)[2]
    for point in points:
        point.overrides = nested(key, point.overrides) if point.overrides else {}
    axes = parse_axes(args.grid, base)
    for axis in axes if kind != "base" else ():
        require(axis.key.removeprefix(key + ".") not in MODEL_SIZE_KEYS, "grid", f"{axis.key} is set by the width grid")
    if axes:
        crossed = []
        for point, values in itertools.product(points, itertools.product(*(a.values for a in axes))):
            suffix = "_".join(f"{a.name}{format_value(v)}" for a, v in zip(axes, values, strict=True))
            overrides = point.overrides
            for axis, value in zip(axes, values, strict=True):
                overrides = deep_merge(overrides, nested(axis.key, value))
            named = {a.name: v for a, v in zip(axes, values, strict=True)}
            figures = (point.C, point.S, point.P, point.m, point.p, point.gamma)
            crossed.append(
                GridPoint(suffix if kind == "base" else f"{point.id}_{suffix}", overrides, *figures, named, point.id)
            )
        points = crossed
    seen: dict[str, GridPoint] = {}
    for point in points:  # values that round to one point (C = 8, 8.2) would run it twice
        flag = next((f for f in ("patch_sizes", "densities", "channels") if getattr(args, f)), "grid")
        require(
            point.id not in seen, flag, f"two values give the same grid point {point.id}", "give values that differ"
        )
        seen[point.id] = point
    return Grid(kind, points, omega, gamma, width, axes)
