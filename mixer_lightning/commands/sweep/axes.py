"""The generic axes of a sweep (``--grid KEY=V1,V2``): a config value the base config sets, and the values
it takes (Table 1's learning-rate search, App. D.5's RP block positions), crossed with the width grid
(`mixer_lightning.commands.sweep.grid`)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from mixer_lightning.commands.lists import scalars
from mixer_lightning.errors import ConfigError, require

# What a grid axis may not vary: the sweep sets these itself.
RESERVED = {"seed_everything": "--seeds", "trainer.logger": "the sweep (each run's directory is pinned)"}


@dataclass(frozen=True)
class Axis:
    """A generic axis: a config value (dotted key, as in the YAML) and the values it takes."""

    key: str
    values: tuple
    name: str  # short name for ids and report columns (the key's last part, more if ambiguous)


def nested(key: str, value: Any) -> dict:
    """``a.b.c`` = value as the nested mapping a config file would hold."""
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def normalise_key(key: str, base: dict) -> str:
    """``model.optimizer.init_args.lr`` → ``model.init_args.optimizer.init_args.lr``: ``init_args``
    inserted where the key enters a class (as jsonargparse's command line allows), then checked
    against the base config: a grid axis varies a value the config sets, so a typo cannot emit a
    sweep whose every run fails."""
    require(
        bool(re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key)),
        "grid",
        f"{key!r} is not a dotted config key",
        "write e.g. model.init_args.optimizer.init_args.lr=0.01,0.02",
    )
    parts, out, node = key.split("."), [], base
    for i, part in enumerate(parts):
        if isinstance(node, dict) and "class_path" in node and part not in ("class_path", "init_args", "dict_kwargs"):
            out.append("init_args")
            node = node.get("init_args") or {}
        if not isinstance(node, dict) or part not in node:
            where = ".".join(out) or "the top level"
            known = sorted(node) if isinstance(node, dict) else []
            close = difflib.get_close_matches(part, known, n=1)
            hint = (
                f"did you mean {'.'.join([*out, close[0]])}?"
                if close
                else (f"{where} sets {', '.join(known)}" if known else "set it in the config first")
            )
            raise ConfigError(
                "grid",
                f"{'.'.join([*out, part])} is not set in the base config (a grid axis varies a value the config sets)",
                hint,
            )
        out.append(part)
        node = node[part]
        if i < len(parts) - 1 and not isinstance(node, dict):
            raise ConfigError("grid", f"{'.'.join(out)} is a value, not a section", f"vary {'.'.join(out)} itself")
    return ".".join(out)


def parse_axes(texts: list[str] | None, base: dict) -> list[Axis]:
    """``--grid KEY=V1,V2`` flags as axes (keys normalised and checked, values parsed once each)."""
    axes: list[Axis] = []
    for text in texts or []:
        key, sep, values = str(text).partition("=")
        require(
            bool(sep) and bool(key.strip()),
            "grid",
            f"cannot read {text!r}",
            "write KEY=V1,V2,..., e.g. model.init_args.optimizer.init_args.lr=0.01,0.02,0.04",
        )
        key = normalise_key(key.strip(), base)
        for reserved, owner in RESERVED.items():
            require(
                key != reserved and not key.startswith(reserved + "."),
                "grid",
                f"{key} is set by {owner}",
                "drop this axis",
            )
        require(all(a.key != key for a in axes), "grid", f"{key} is given twice", "give each axis once")
        axes.append(Axis(key, _axis_values(values, key), key.rsplit(".", 1)[-1]))
    names = [a.name for a in axes]
    return [Axis(a.key, a.values, ".".join(a.key.split(".")[-2:]) if names.count(a.name) > 1 else a.name) for a in axes]


def _axis_values(text: str, key: str) -> tuple:
    """The values of one axis: comma-separated scalars (``0.01,0.02``), or a YAML list whose items may
    themselves be lists (``[[true,false,false,false],[false,true,false,false]]``: App. D.5's one RP
    block per position)."""
    text = text.strip()
    if not text.startswith("["):
        return tuple(scalars(text, f"grid {key}"))
    import yaml

    fix = f"write {key}=[V1, V2, ...], e.g. model.init_args.permute=[[true,false],[false,true]]"
    from mixer_lightning.safety.config_files import bounded_safe_load

    try:  # within the YAML bounds of every config (an alias bomb as a grid is one line, not a hang)
        values = bounded_safe_load(text, "grid", f"the grid of {key}")
    except yaml.YAMLError as error:
        raise ConfigError("grid", f"cannot read {text!r} as a YAML list ({str(error).splitlines()[0]})", fix) from None
    require(isinstance(values, list) and len(values) > 0, "grid", f"{text!r} is not a non-empty list", fix)
    require(all(not isinstance(v, dict) for v in values), "grid", f"{text!r} holds mappings", fix)
    require(
        len({repr(v) for v in values}) == len(values),
        "grid",
        f"{text!r} repeats a value (the same run twice)",
        "give each value once",
    )
    return tuple(values)


def format_value(value: Any) -> str:
    """A grid value as the run names spell it."""
    if isinstance(value, list):  # [true, false, false] → tff; [1, 2] → 1-2
        if all(isinstance(v, bool) for v in value):
            return "".join("t" if v else "f" for v in value)
        return "-".join(format_value(v) for v in value)
    text = f"{value:g}" if isinstance(value, float) else str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.+\-]", "-", text)
