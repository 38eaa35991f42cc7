"""Ticks and labels shared by the sweep figures (`report.py`, `cka.py`): ticks at a grid's values,
written as numbers (never matplotlib's 4×10^1), densities as 2⁻ⁿ, and a y label saying how many seeds
each point stands for."""

from __future__ import annotations

import math


def _tick_text(value: float) -> str:
    """A grid value as a tick label: the number itself (2,768, 0.02), never matplotlib's 4×10^1."""
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.3g}"


def power_of_two_text(value: float) -> str:
    """A density on a log₂ axis: 2⁻⁵ where it is a power of two (the grids' densities), else the number."""
    exponent = math.log2(value) if value > 0 else 0.5
    return f"$2^{{{int(exponent)}}}$" if float(exponent).is_integer() else _tick_text(value)


def grid_ticks(axis, values, text=_tick_text, log: bool = False, slant: bool = True) -> None:
    """Ticks at the grid's values only (C = 16, 32, 48, 64, …), labelled with the values; on a log axis
    matplotlib's decade ticks would label few of them, and as 2×10^1. Where labels would overlap, they
    slant, and a value too close to the one labelled before it keeps its tick without a label."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    values = sorted({float(v) for v in values})
    if not values:
        return
    position = [math.log(v) if log else v for v in values]
    span = (position[-1] - position[0]) or 1.0
    crowded = len(values) > 8 or any((b - a) / span < 0.09 for a, b in zip(position, position[1:], strict=False))
    labels, last = [], None
    for value, at in zip(values, position, strict=True):
        shown = last is None or (at - last) / span >= (0.035 if crowded else 0.0)
        labels.append(text(value) if shown else "")
        last = at if shown else last
    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(FixedFormatter(labels))
    axis.set_minor_locator(NullLocator())
    if crowded and slant:  # (short labels such as 2⁻⁵ fit upright)
        for label in axis.get_ticklabels():
            label.set_rotation(40)
            label.set_horizontalalignment("right")


def seeds_label(summary: list[dict], what: str = "test error") -> str:
    """The y label of an error plot: how many seeds each mean (and error bar) stands for."""
    seeds = sorted({r["seeds"] for r in summary if r.get("seeds") is not None})
    if not seeds:
        return f"{what} (mean ± std over seeds)"
    if seeds == [1]:
        return f"{what} (1 seed, no error bar)"
    count = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
    return f"{what} (mean ± std over {count} seeds)"
