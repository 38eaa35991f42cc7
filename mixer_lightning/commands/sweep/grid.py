"""The grid points of a sweep: which configs to train (before any file is written).

One width grid, chosen by the base config's model and the flags (App. C of Hayase & Karakida 2024):

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

then every generic axis (``--grid KEY=V1,V2``, e.g. the learning rate of Table 1's search:
`mixer_lightning.commands.sweep.axes`) crossed with it, and every point run once per seed.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any

from mixer_lightning.commands.lists import integers, reals
from mixer_lightning.commands.sweep.axes import Axis, format_value, nested, parse_axes
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.config_files import deep_merge
from mixer_lightning.width import (
    check_omega,
    check_width,
    default_channels,
    density,
    gamma_points,
    parse_int_expression,
    solve_tokens,
)

# LightningModule class name -> (family, γ when the family fixes it). A table read from the config's
# class path, not attributes of the task classes: emitting a sweep never imports Lightning (0.3 s vs 8 s).
FAMILIES = {"SMixerModule": ("s_mixer", 1.0), "MLPMixerModule": ("mlp_mixer", None), "SWMLPModule": ("sw_mlp", None)}
# Fig. 5 (App. C.4): the SW-MLP at sparsity 1-p ∈ {0.1, 0.3, 0.5, 0.7, 0.9} at fixed Ω.
PAPER_DENSITIES_AT_OMEGA = (0.9, 0.7, 0.5, 0.3, 0.1)
# Fig. 2(a) (App. C.1): the SW-MLP at p = 2^-n, n = 0 … 10, at the Mixer's width.
PAPER_DENSITIES_AT_WIDTH = tuple(2.0**-n for n in range(11))
MODEL_SIZE_KEYS = ("channels", "tokens", "omega", "gamma", "patch_size", "density", "width")


@dataclass
class GridPoint:
    """One point of the grid: its id (the run directory's name), the config values it sets, and the
    width figures the report plots (None where they do not apply)."""

    id: str
    overrides: dict = field(default_factory=dict)  # nested, merged over the base config
    C: int | None = None
    S: int | None = None
    P: int | None = None
    m: int | None = None
    p: float | None = None
    gamma: float | None = None
    axes: dict[str, Any] = field(default_factory=dict)  # generic axis values, by the axis's short name
    width_point: str | None = None  # the id of the width point alone (without the axes)

    def figures(self) -> dict:
        return {
            "C": self.C,
            "S": self.S,
            "P": self.P,
            "m": self.m,
            "p": self.p,
            "gamma": self.gamma,
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
        parts += [f"{name} = {value}" for name, value in self.axes.items()]
        return ", ".join(parts) or "the base config"


@dataclass
class Grid:
    kind: str
    points: list[GridPoint]
    omega: int | None
    gamma: float | None
    width: int | None
    axes: list[Axis]

    def signature(self) -> dict:
        """What an extended sweep directory must share with the sweep already there."""
        return {
            "kind": self.kind,
            "omega": self.omega,
            "gamma": self.gamma,
            "width": self.width,
            "axes": [a.key for a in self.axes],
        }


# ------------------------------------------------------------------------------------- the config


def model_family(config: dict, required: bool = True) -> tuple[str | None, float | None]:
    """(family, fixed γ) of the config's model; a `ConfigError` when a width grid needs one."""
    class_path = str((config.get("model") or {}).get("class_path", ""))
    name = class_path.rsplit(".", 1)[-1]
    if name in FAMILIES:
        return FAMILIES[name]
    require(
        not required,
        "config",
        f"model {class_path or '(none)'} has no width grid",
        f"sweep a config whose model is one of {', '.join(FAMILIES)} (or vary it with --grid only)",
    )
    return None, None


# ----------------------------------------------------------------------------------- width grids


def _patch_grid(args, init_args: dict, omega: int, gamma: float, family: str) -> list[GridPoint]:
    points = []
    if args.patch_sizes:
        require(not args.channels, "channels", "give --channels or --patch_sizes, not both")
        for size in integers(args.patch_sizes, "patch_sizes", example="7,8,14,16,28,32"):
            c = args.in_chans * size * size
            points.append(GridPoint(f"P{size}_C{c}", {"patch_size": size, "channels": c}, C=c, P=size))
    else:
        channels = integers(args.channels, "channels") if args.channels else default_channels(omega, gamma)
        for c in channels:
            points.append(GridPoint(f"C{c}", {"channels": c}, C=c, P=init_args.get("patch_size")))
    for point in points:
        s = solve_tokens(omega, point.C, gamma)
        point.id += f"_S{s}"
        point.S, point.m, point.p = s, s * point.C, density(s, point.C, gamma)
        point.overrides.update(omega=omega, tokens=None)
        point.gamma = gamma
        if family == "mlp_mixer":
            point.overrides["gamma"] = gamma
    return points


def _gamma_grid(args, omega: int, width: int) -> list[GridPoint]:
    """App. D.3 / Fig. S.3: C | m, S = m/C, γ = 2Ω/(m(C + m/C)) (eq. S.46); the model is given S and γ
    directly (Ω would re-solve S)."""
    channels = integers(args.channels, "channels") if args.channels else None
    points = []
    for point in gamma_points(omega, width, channels):
        points.append(
            GridPoint(
                f"C{point.C}_S{point.S}_g{point.gamma:.4g}",
                {"channels": point.C, "tokens": point.S, "gamma": point.gamma, "omega": None},
                C=point.C,
                S=point.S,
                m=width,
                p=point.p,
                gamma=point.gamma,
            )
        )
    return points


def _sw_mlp_gamma(args, init_args: dict) -> tuple[str, float]:
    """(block, γ) of the SW-MLP as the model resolves them: the config's, else its preset's, else the
    model's defaults; ``--gamma`` replaces γ of MLP blocks."""
    from mixer_lightning.models import get_entry
    from mixer_lightning.models.sw_mlp import SWMLP

    settings = {
        **(get_entry(init_args["preset"]).defaults if init_args.get("preset") else {}),
        **{k: v for k, v in init_args.items() if v is not None},
    }
    block = settings.get("block") or inspect.signature(SWMLP).parameters["block"].default
    if block == "fc":
        require(
            args.gamma in (None, 1, 1.0),
            "gamma",
            "a single-FC SW-MLP block has γ = 1",
            "drop --gamma (or use block: mlp)",
        )
        return block, 1.0
    return block, float(args.gamma or settings.get("gamma") or 2.0)


def _densities(text: str | None, default: tuple[float, ...]) -> list[float]:
    if text is None:
        return list(default)
    return reals(text, "densities", lambda v: 0 < v <= 1, "densities p in (0, 1]", "0.9,0.5,2**-6")


def _sw_mlp_width(args, config_paths: list[str], init_args: dict) -> tuple[int, dict]:
    """The fixed width m of a density grid, and what the points set to keep it: ``--width``, else the
    config's ``width``, else its ``channels`` × S0 (S0 from the data's image size)."""
    if args.width is not None:
        width = parse_int_expression(args.width, "width")
        check_width(width)
        return width, {"width": width, "channels": None}
    if init_args.get("width"):
        return int(init_args["width"]), {}
    require(
        bool(init_args.get("channels")),
        "width",
        "the base config sets neither width nor channels",
        "give --width M (the SW-MLP's width m)",
    )
    from mixer_lightning.analysis.features import datamodule_from_config

    data = datamodule_from_config(config_paths)
    patch = int(init_args.get("patch_size") or 4)
    require(
        data.image_size % patch == 0,
        "width",
        f"patch_size {patch} does not divide the image size {data.image_size}",
        "give --width M",
    )
    return (data.image_size // patch) ** 2 * int(init_args["channels"]), {}


def _sw_mlp_grid(
    args, config_paths: list[str], init_args: dict, omega: int | None
) -> tuple[str, list[GridPoint], float, int | None]:
    from mixer_lightning.models.sw_mlp import resolve_width_density

    require(
        not args.channels and not args.patch_sizes,
        "channels",
        "an SW-MLP sweep is over densities, not channels or patch sizes",
        "use --densities",
    )
    block, gamma = _sw_mlp_gamma(args, init_args)
    keep_gamma = {} if block == "fc" else {"gamma": gamma}  # the γ its width was solved with
    points = []
    if omega is not None:  # Fig. 5 / Fig. S.1 left: each p at m = √(Ω/(γp)), the same Ω
        require(
            args.width is None,
            "width",
            "give --omega (the width follows from p) or --width, not both",
            "drop one of them",
        )
        for p in _densities(args.densities, PAPER_DENSITIES_AT_OMEGA):
            m, p = resolve_width_density(1, gamma, None, None, p, float(omega))
            points.append(
                GridPoint(
                    f"p{p:g}_m{m}",
                    {"omega": omega, "density": p, "width": None, "channels": None, **keep_gamma},
                    P=init_args.get("patch_size"),
                    m=m,
                    p=p,
                    gamma=gamma,
                )
            )
        return "densities_at_omega", points, gamma, None
    width, keep_width = _sw_mlp_width(args, config_paths, init_args)  # Fig. 2(a): every p at one width
    for p in _densities(args.densities, PAPER_DENSITIES_AT_WIDTH):
        points.append(
            GridPoint(
                f"p{p:.4g}_m{width}",
                {"density": p, "omega": None, **keep_width, **keep_gamma},
                P=init_args.get("patch_size"),
                m=width,
                p=p,
                gamma=gamma,
            )
        )
    return "densities_at_width", points, gamma, width


def width_grid(
    args, base: dict, config_paths: list[str]
) -> tuple[str, list[GridPoint], int | None, float | None, int | None]:
    """(kind, points, Ω, γ, fixed width) of the flags' width grid; the overrides are model init args."""
    omega = None
    if args.omega is not None:
        omega = parse_int_expression(args.omega, "omega")
        check_omega(omega)
    sizes = args.channels or args.patch_sizes or args.width is not None or args.densities is not None
    family, fixed_gamma = model_family(base, required=omega is not None or bool(sizes))
    init_args = (base.get("model") or {}).get("init_args") or {}
    if family is None:
        require(args.gamma is None, "gamma", "γ belongs to a width grid", "vary it with --grid model.init_args.gamma=…")
        return "base", [GridPoint("base")], None, None, None
    if family == "sw_mlp":
        kind, points, gamma, width = _sw_mlp_grid(args, config_paths, init_args, omega)
        return kind, points, omega, gamma, width
    require(
        args.densities is None,
        "densities",
        f"the {family} family is swept over channels, not densities",
        "drop --densities (or sweep an SW-MLP config)",
    )
    if fixed_gamma is not None and args.gamma not in (None, fixed_gamma):
        raise ConfigError("gamma", f"the {family} family has γ = {fixed_gamma:g}", "drop --gamma")
    if args.width is not None:
        require(
            family == "mlp_mixer",
            "width",
            f"the {family} family has γ = 1, so a fixed width cannot keep Ω (eq. S.46 varies γ)",
            "sweep an MLP-Mixer config",
        )
        require(
            omega is not None,
            "omega",
            "a γ grid at fixed width needs --omega (γ = 2Ω/(m(C + m/C)), eq. S.46)",
            "give e.g. --omega 2**20 --width 4096",
        )
        require(
            not args.patch_sizes and args.gamma is None,
            "width",
            "a fixed-width grid takes --channels only (γ follows from Ω, m and C)",
            "drop --patch_sizes / --gamma",
        )
        width = parse_int_expression(args.width, "width")
        return "gamma_at_width", _gamma_grid(args, omega, width), omega, None, width
    if omega is None:
        require(
            not sizes,
            "omega",
            "a channel or patch-size grid needs --omega (S is solved at fixed Ω)",
            "give e.g. --omega 2**18",
        )
        require(args.gamma is None, "gamma", "γ belongs to a width grid", "vary it with --grid model.init_args.gamma=…")
        return "base", [GridPoint("base")], None, None, None
    gamma = fixed_gamma or args.gamma or init_args.get("gamma") or 4.0
    kind = "patch_sizes" if args.patch_sizes else "channels"
    return kind, _patch_grid(args, init_args, omega, float(gamma), family), omega, float(gamma), None


def build(args, base: dict, config_paths: list[str]) -> Grid:
    """The grid of the flags over the base config: width points × generic axes; unique point ids."""
    kind, points, omega, gamma, width = width_grid(args, base, config_paths)
    for point in points:
        point.overrides = {"model": {"init_args": point.overrides}} if point.overrides else {}
    axes = parse_axes(args.grid, base)
    if kind != "base":
        for axis in axes:
            for name in MODEL_SIZE_KEYS:
                require(
                    axis.key != f"model.init_args.{name}",
                    "grid",
                    f"{axis.key} is set by the width grid",
                    "drop this axis, or the width grid's flags",
                )
    if axes:
        crossed = []
        for point, values in itertools.product(points, itertools.product(*(a.values for a in axes))):
            suffix = "_".join(f"{a.name}{format_value(v)}" for a, v in zip(axes, values, strict=True))
            overrides = point.overrides
            for axis, value in zip(axes, values, strict=True):
                overrides = deep_merge(overrides, nested(axis.key, value))
            crossed.append(
                GridPoint(
                    suffix if kind == "base" else f"{point.id}_{suffix}",
                    overrides,
                    point.C,
                    point.S,
                    point.P,
                    point.m,
                    point.p,
                    point.gamma,
                    {a.name: v for a, v in zip(axes, values, strict=True)},
                    point.id,
                )
            )
        points = crossed
    seen: dict[str, GridPoint] = {}
    flag = {"channels": "channels", "patch_sizes": "patch_sizes", "gamma_at_width": "channels"}.get(kind, "densities")
    for point in points:
        if point.id in seen:
            raise ConfigError(
                "grid" if kind == "base" else flag,
                f"two values give the same grid point {point.id} ({seen[point.id].describe()})",
                "give values that differ",
            )
        seen[point.id] = point
    return Grid(kind, points, omega, gamma, width, axes)
