"""Errors a user can act on. `mixer` prints each as one line ``mixer: error: FIELD: problem; fix``:
a `ConfigError` (a mistake in a config, a flag or an input file) with exit status 2, a `ResourceError` (a
full disk, a run another process writes) or a `TrainingError` (the loss diverged) with status 1. A
`Stopped` run (SIGTERM, SLURM's requeue signal) saved a resumable checkpoint: one line, status 128 + signal.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager


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


def argument_error(error: argparse.ArgumentError) -> ConfigError:
    """jsonargparse's argument error as one line: its first and last lines of detail, on the key it names
    (``Parser key "X":`` heads its message; the option an argparse message quotes; the key of a nested value)."""
    text = str(error)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or ["arguments"]
    named = lines[0].startswith('Parser key "') and lines[0].endswith('":')
    key = lines[0][len('Parser key "') : -2] if named else "arguments"
    detail = lines[1:] if named else lines
    nested = [
        line.rsplit('Parser key "', 1)[1][:-2] for line in lines[1:] if line.endswith('":') and 'Parser key "' in line
    ]
    key = ".".join([key, *nested])  # a nested value's own parser heads a line's end: `model.net`, then `channels`
    # The innermost problem is the one to fix; else the first and last lines of detail.
    problem = detail[-1] if nested else "; ".join(dict.fromkeys([detail[0], detail[-1]]))
    problem = problem.split(". Got value: Namespace(")[0][:300]
    if "NestedArg(key='" in text and not nested:  # `--data.batch_size abc` under a subclass group: `data` only
        key += "." + text.split("NestedArg(key='", 1)[1].split("'", 1)[0]
    elif lines[0].split(":")[0] in ("Unexpected config", "Problems parsing config"):  # a --config file's
        key = "config"
    elif lines[0].startswith("unrecognized arguments: --"):  # argparse's
        key = lines[0].split()[2][2:]
    elif "option '" in lines[0]:  # "Subcommand 'fit' does not accept option 'trainer.max_epoch'"
        key = lines[0].split("option '", 1)[1].split("'", 1)[0]
    elif lines[0].startswith("the following arguments are required: "):  # argparse's: `fit.model.net, fit.data`
        key = lines[0].split(": ", 1)[1].split(",")[0].strip().split(".", 1)[-1]
    return ConfigError(key, problem, "see `mixer COMMAND --help`")
