"""User-facing errors.

A `ConfigError` is a mistake in the user's input (a config value, a flag, a file). The `mixer`
command prints it as one line naming the field and the fix, and exits non-zero, without a
traceback (set ``MIXER_DEBUG=1`` or pass ``--debug`` to see it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ConfigError(ValueError):
    """A bad value in a config, a flag or an input file. The message names the field and the fix."""

    def __init__(self, field: str, problem: str | None = None, fix: str | None = None):
        if problem is None:
            # Rebuilt from one message: a DataLoader worker re-raises its exception as
            # type(error)(text), the text ending with the original "...ConfigError: field: problem; fix".
            message = field.strip().splitlines()[-1] if field.strip() else field
            message = message.split("ConfigError: ", 1)[-1]
            field, _, problem = message.partition(": ")
            self.field, self.problem, self.fix = field, problem, None
            super().__init__(message)
            return
        self.field, self.problem, self.fix = field, problem, fix
        message = f"{field}: {problem}"
        if fix:
            message += f"; {fix}"
        super().__init__(message)


def require(condition: bool, field: str, problem: str, fix: str | None = None) -> None:
    """Raise `ConfigError(field, problem, fix)` unless `condition` holds."""
    if not condition:
        raise ConfigError(field, problem, fix)


def find_config_error(error: BaseException | None) -> ConfigError | TrainingError | None:
    """The `ConfigError` (or `TrainingError`) behind `error`, if any (jsonargparse and Lightning wrap
    exceptions raised while they build objects; the cause is somewhere down the ``__cause__`` chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (ConfigError, TrainingError)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


@contextmanager
def field_prefix(prefix: str) -> Iterator[None]:
    """Prefix the field of any `ConfigError` raised inside with ``prefix.`` (e.g. ``model.``), so the
    message names the field as it is written in a config."""
    try:
        yield
    except ConfigError as error:
        if error.field.startswith(prefix + "."):
            raise
        raise ConfigError(f"{prefix}.{error.field}", error.problem, error.fix) from None


class TrainingError(RuntimeError):
    """A run that cannot go on for a reason of the run, not of the code (the loss diverged, say).
    The `mixer` command prints it as one line and exits with status 1."""
