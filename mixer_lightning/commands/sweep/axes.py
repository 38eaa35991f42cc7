"""The generic axes of a sweep (``--grid KEY=V1,V2``): a config value the base config sets, and the values
it takes (Table 1's learning-rate search, App. D.5's RP block positions), crossed with the width grid."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import yaml

from mixer_lightning.commands.lists import scalars
from mixer_lightning.errors import ConfigError, require

# What a grid axis may not vary: the sweep sets these itself.
RESERVED = {"seed_everything": "--seeds", "trainer.logger": "the sweep (each run's directory is pinned)"}


@dataclass(frozen=True)
class Axis:
    key: str  # dotted, as in the YAML
    values: tuple
    name: str  # for run names and report columns: the key's last part (two parts where two axes share it)


def nested(key: str, value: Any) -> dict:
    """``a.b.c`` = value as the nested mapping a config file would hold."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def normalise_key(key: str, base: dict) -> str:
    """``model.optimizer.lr`` → ``model.optimizer.init_args.lr``: ``init_args`` inserted where the key enters
    a class (as jsonargparse's command line allows), and the key checked against the base config: an
    axis varies a value the config sets, so that a misspelt key does not emit a sweep whose runs all fail."""
    out, node = [], base
    for part in key.split("."):
        if isinstance(node, dict) and "class_path" in node and part not in ("class_path", "init_args", "dict_kwargs"):
            out.append("init_args")
            node = node.get("init_args") or {}
        if not isinstance(node, dict) or part not in node:
            known = sorted(node) if isinstance(node, dict) else []
            close = difflib.get_close_matches(part, known, n=1)
            raise ConfigError(
                "grid",
                f"{'.'.join([*out, part])} is not set in the base config (an axis varies a value the config sets)",
                f"did you mean {'.'.join([*out, close[0]])}?" if close else "set it in the config first",
            )
        out.append(part)
        node = node[part]
    return ".".join(out)


def parse_axes(texts: list[str] | None, base: dict) -> list[Axis]:
    """``--grid KEY=V1,V2`` flags as axes: values are comma-separated scalars (``0.01,0.02``) or a YAML
    list whose items may be lists (``[[true,false],[false,true]]``: App. D.5's one RP block per position)."""
    axes: list[Axis] = []
    for text in texts or []:
        key, sep, values = str(text).partition("=")
        require(bool(sep and key.strip()), "grid", f"cannot read {text!r}", "write KEY=V1,V2,...")
        key = normalise_key(key.strip(), base)
        for reserved, owner in RESERVED.items():
            require(key != reserved and not key.startswith(reserved + "."), "grid", f"{key} is set by {owner}")
        require(all(a.key != key for a in axes), "grid", f"{key} is given twice")
        values = values.strip()
        if values.startswith("["):
            try:
                parsed = yaml.safe_load(values)
            except yaml.YAMLError as error:
                raise ConfigError("grid", f"cannot read {values!r} as a YAML list ({error})") from None
            require(isinstance(parsed, list) and bool(parsed), "grid", f"{values!r} is not a non-empty list")
            require(len({repr(v) for v in parsed}) == len(parsed), "grid", f"{values!r} repeats a value")
            values = tuple(parsed)
        else:
            values = tuple(scalars(values, "grid"))
        axes.append(Axis(key, values, key.rsplit(".", 1)[-1]))
    names = [a.name for a in axes]
    return [Axis(a.key, a.values, ".".join(a.key.split(".")[-2:]) if names.count(a.name) > 1 else a.name) for a in axes]


def format_value(value: Any) -> str:
    """A grid value as run names spell it: [true, false, false] → tff, [1, 2] → 1-2, 0.010 → 0.01."""
    if isinstance(value, list):
        if all(isinstance(v, bool) for v in value):
            return "".join("t" if v else "f" for v in value)
        return "-".join(format_value(v) for v in value)
    text = f"{value:g}" if isinstance(value, float) else str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.+\-]", "-", text)
