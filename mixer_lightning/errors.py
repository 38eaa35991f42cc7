"""Errors a user can act on. `mixer` prints each as one line ``mixer: error: FIELD: problem; fix``:
a `ConfigError` (a mistake in a config, a flag or an input file) with exit status 2, a `ResourceError` (a
full disk, a run another process writes) or a `TrainingError` (the loss diverged) with status 1. A
`Stopped` run (SIGTERM, SLURM's requeue signal) saved a resumable checkpoint: one line, status 128 + signal.
"""

from __future__ import annotations

import argparse
import sysconfig
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ConfigError(ValueError):
    """A bad value in a config, a flag or an input file; the message names the field and the fix."""

    def __init__(self, field: str, problem: str | None = None, fix: str | None = None):
        if problem is None:  # rebuilt from its message: a DataLoader worker re-raises type(error)(text)
            field, _, problem = (field.strip().splitlines() or [""])[-1].split("ConfigError: ", 1)[-1].partition(": ")
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}" + (f"; {fix}" if fix else ""))


class ResourceError(RuntimeError):
    """The machine cannot do what was asked through no mistake in the input (a full disk, a run directory
    another process writes)."""

    def __init__(self, field: str, problem: str, fix: str | None = None):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}" + (f"; {fix}" if fix else ""))


class TrainingError(RuntimeError):
    """A run that cannot go on for a reason of the run, not of the code (the loss diverged)."""


class Stopped(Exception):
    """A run stopped by `signum` at a point it resumes from exactly (last.ckpt saved); said by the process of
    global rank 0 only (every rank of a DDP job stops)."""

    def __init__(self, signum: int, message: str, rank: int = 0):
        self.signum, self.rank = signum, rank
        super().__init__(message)


def require(condition: bool, field: str, problem: str, fix: str | None = None) -> None:
    """Raise `ConfigError(field, problem, fix)` unless `condition` holds."""
    if not condition:
        raise ConfigError(field, problem, fix)


@contextmanager
def field_prefix(prefix: str) -> Iterator[None]:
    """Name the field of a `ConfigError` raised inside as it is written in a config (``model.`` + field)."""
    try:
        yield
    except ConfigError as error:
        if error.field.startswith(prefix + "."):
            raise
        raise ConfigError(f"{prefix}.{error.field}", error.problem, error.fix) from None


def argument_error(error: argparse.ArgumentError, argv: Iterable[str] = (), keys: Iterable[str] = ()) -> ConfigError:
    """jsonargparse's (or argparse's) argument error as one line, in its own words (they name the key). The field
    is the longest flag of `argv` (``--trainer.max_epochs``; not ``--config``, a file) whose every part the message
    names, else the longest
    of `keys` (the parser's) it names, else ``arguments``: looked up in the message, not cut out of its wording."""
    text = " ".join(str(error).split()) or "arguments"
    given = [arg[2:].split("=")[0] for arg in argv if arg.startswith("--") and arg[2:].split("=")[0] != "config"]
    named = [key for key in given if key and all(part in text for part in key.split("."))]
    named = named or [key for key in keys if key and key in text]
    return ConfigError(max(named, key=len, default="arguments"), text, "see `mixer COMMAND --help`")


# Where this package, installed libraries and the standard library live (`library_line`).
PACKAGE = Path(__file__).resolve().parent
LIBRARIES = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib")}


def library_line(error: BaseException) -> tuple[str, int] | None:
    """A library's own error (raised in torch, Lightning, PIL… from a value it was given) is its type and first
    line, status 1; one raised in this package or in a user's own code is a bug, None: its traceback."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = Path(frame.tb_frame.f_code.co_filename).resolve() if frame is not None else PACKAGE
    if where.is_relative_to(PACKAGE) or not any(where.is_relative_to(folder) for folder in LIBRARIES):
        return None
    first = next(iter(str(error).strip().splitlines()), "")
    return f"mixer: error: {type(error).__name__}: {first}; --debug shows the traceback", 1
