"""Comma-separated flag values (``--seeds 0,1,2``, ``--channels 16,32,48``, ``--densities 2**-6,0.5``), as
the papers write them (``2**18``, ``1/64``): one parser, so every such flag fails alike, in one line
naming the flag (an empty item, no number, out of range, a value twice: a sweep would run it twice)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mixer_lightning.errors import ConfigError
from mixer_lightning.width import parse_int_expression, parse_real_expression

T = TypeVar("T")

SEED_LIMIT = 2**32  # numpy's (and Lightning's seed_everything's) seeds are 0 … 2**32 − 1


def comma_list(
    text: str | int | float,
    field: str,
    parse: Callable[[str], T],
    what: str,
    example: str,
    valid: Callable[[T], bool] | None = None,
    valid_text: str | None = None,
    allow_duplicates: bool = False,
) -> list[T]:
    """The values of a comma-separated flag, each read with `parse` (and checked by `valid`); any
    problem is one `ConfigError` on `field`."""
    text, values = str(text), []
    fix = f"give comma-separated {what}, e.g. {example}"
    for item in text.split(","):
        item = item.strip()
        try:
            value = parse(item)
        except (ValueError, TypeError, OverflowError, ConfigError):
            raise ConfigError(field, f"cannot read {text!r}: {item!r} is not one of the {what}", fix) from None
        if valid is not None and not valid(value):
            raise ConfigError(field, f"needs {valid_text or what}, got {text!r} ({item!r})", fix)
        if value in values and not allow_duplicates:
            raise ConfigError(field, f"{item!r} is given twice in {text!r}", "give each value once")
        values.append(value)
    return values


_integer = functools.partial(parse_int_expression, field="value")
_real = functools.partial(parse_real_expression, field="value")


def integers(text: str | int, field: str, minimum: int = 1, example: str = "16,32,48") -> list[int]:
    """Integers >= `minimum` (``2**10`` allowed)."""
    return comma_list(text, field, _integer, "integers", example, lambda v: v >= minimum, f"integers >= {minimum}")


def seeds(text: str | int, field: str = "seeds") -> list[int]:
    """Seeds in numpy's range 0 … 2**32 − 1."""
    return comma_list(text, field, _integer, "integers", "0,1,2", lambda v: 0 <= v < SEED_LIMIT, "seeds < 2**32")


def reals(
    text: str | float,
    field: str,
    valid: Callable[[float], bool] | None = None,
    valid_text: str | None = None,
    example: str = "0.1,0.5,0.9",
) -> list[float]:
    """Real numbers (``2**-6``, ``1/64``, ``1e-3`` allowed), optionally checked by `valid`."""
    return comma_list(text, field, _real, "numbers", example, valid, valid_text)


def scalar(item: str) -> Any:
    """A config value as YAML reads it, numbers first (PyYAML reads ``1e-2`` as a string)."""
    import yaml

    for kind in (int, float):
        try:
            return kind(item)
        except ValueError:
            pass
    try:
        value = yaml.safe_load(item)
    except yaml.YAMLError as error:
        raise ValueError(str(error)) from None
    if isinstance(value, (list, dict)) or not item:
        raise ValueError("a grid value is a single scalar")
    return value


def scalars(text: str, field: str, example: str = "0.01,0.02,0.04") -> list[Any]:
    """Config values for a generic sweep axis (numbers, booleans, strings)."""
    return comma_list(text, field, scalar, "values", example)
