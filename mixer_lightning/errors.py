"""User-facing errors.

A `ConfigError` is a mistake in the user's input (a config value, a flag, a file). The `mixer`
command prints it as one line naming the field and the fix, and exits with status 2, without a
traceback (set ``MIXER_DEBUG=1`` or pass ``--debug`` to see it). A `TrainingError` (the loss
diverged) and a `ResourceError` (a full disk, too little memory, a run directory another process
is writing) are one line with status 1; `Stopped` (SIGTERM, SIGINT) is one line with status
128 + the signal's number, after a resumable checkpoint was saved.
"""

from __future__ import annotations

import errno
import re
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


def find_config_error(error: BaseException | None) -> ConfigError | TrainingError | ResourceError | None:
    """The `ConfigError` (or `TrainingError`, `ResourceError`) behind `error`, if any (jsonargparse and
    Lightning wrap exceptions raised while they build objects; the cause is somewhere down the
    ``__cause__`` chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (ConfigError, TrainingError, ResourceError)):
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


class ResourceError(RuntimeError):
    """The machine cannot do what was asked, through no mistake in the input: the disk is full, the
    memory too small, the run directory is being written by another process. Printed as one line
    ``field: problem; fix``, exit status 1."""

    def __init__(self, field: str, problem: str, fix: str | None = None):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}" + (f"; {fix}" if fix else ""))


class Stopped(Exception):
    """A run stopped by a signal (SIGTERM from a scheduler, SIGINT from Ctrl+C) at a point it can be
    resumed from exactly; `mixer` prints the message and exits with status 128 + `signum` (143, 130)."""

    def __init__(self, signum: int, message: str):
        self.signum = signum
        super().__init__(message)


def _chain(error: BaseException | None) -> list[BaseException]:
    seen, chain = set(), []
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _argument_error(error: BaseException, command: str | None) -> ConfigError:
    """jsonargparse's parse error (raised, not printed after the usage text) as one line: the innermost
    key (``model.channels``), the types it takes and the value given."""
    message = str(error).strip()
    help_ = f"see `mixer {command} --help`" if command else "see `mixer --help`"
    keys = re.findall(r'Parser key "([^"]+)"', message)
    denied = re.search(r"Importing '([\w.]+)' is not allowed", message)
    if denied:  # jsonargparse's import-path policy (`mixer_lightning.safety.trust.enforce_import_policy`)
        return untrusted_import(".".join(keys) or "config", denied.group(1))
    if keys:
        field = ".".join(keys)
        inner = message[message.rindex(f'Parser key "{keys[-1]}"') :].split(":", 1)[1]
        problem = re.search(r"Problem with given class_path '([\w.]+)':\s*\n\s*(.*)", inner)
        if problem:  # the class is found, but not its option (or the class is not found)
            cls, reason = problem.group(1).rsplit(".", 1)[-1], problem.group(2).strip()
            option = re.match(r"Option '([^']+)' is not accepted", reason)
            if option:
                return ConfigError(f"{field}.{option.group(1)}", f"{cls} has no option {option.group(1)!r}", help_)
            return ConfigError(f"{field}.class_path", f"{problem.group(1)}: {_one_line(reason)}", help_)
        subtypes = re.search(r"Subtypes: \[(.*?)\]", inner)
        expected = re.findall(r"Expected a <class '(?:[\w.]+\.)?(\w+)'>", inner)
        types = re.findall(r"<class '(?:[\w.]+\.)?(\w+)'>", subtypes.group(1)) if subtypes else expected
        given = re.search(r"(?:Given value|Got value): (.*)", inner)
        if types and given:
            names = " or ".join(dict.fromkeys("null" if t == "NoneType" else t for t in types))
            return ConfigError(field, f"expected {names}, got {given.group(1).strip()!r}", help_)
        lines = [line.strip() for line in inner.splitlines() if line.strip()]
        got = f", got {given.group(1).strip()!r}" if given else ""
        return ConfigError(field, _one_line(lines[0] if lines else inner).rstrip(".:") + got, help_)
    found = re.match(r"Subcommand '(\w+)' does not accept option '([^']+)'", message)
    if found:
        return ConfigError(found.group(2), f"no such option of `mixer {found.group(1)}`", help_)
    found = re.match(r"unrecognized arguments: (.*)", message)
    if found:
        return ConfigError(found.group(1).split()[0], "no such option", help_)
    return ConfigError("arguments", _one_line(message), help_)


def untrusted_import(field: str, name: str) -> ConfigError:
    """The one line for a config that names `name` to import outside the trusted packages."""
    return ConfigError(
        field,
        f"names {name!r}, outside the trusted packages; refused before importing it, since importing it would "
        "run its code",
        "if you trust it, add its package to MIXER_TRUSTED_MODULES (comma-separated)",
    )


def translate_library_error(error: BaseException, command: str | None = None) -> Exception | None:
    """The one-line error for `error` (raised by this project or a library it calls), or None when it is
    not one we can explain (then the traceback is the right answer: a bug)."""
    found = find_config_error(error)
    if found is not None:
        return found
    for link in _chain(error):
        name, message = type(link).__name__, str(link)
        if name == "ArgumentError":
            return _argument_error(link, command)
        if name == "ImportDenied":
            denied = re.search(r"Importing '([\w.]+)' is not allowed", message)
            return untrusted_import("config", denied.group(1) if denied else message)
        lowered = message.lower()
        if (
            name == "OutOfMemoryError"
            or isinstance(link, MemoryError)
            or (isinstance(link, RuntimeError) and ("can't allocate memory" in lowered or "out of memory" in lowered))
        ):
            wanted = re.search(r"(?:tried to allocate|Tried to allocate) ([\d.]+ ?[KMGT]?i?B|\d+ bytes)", message)
            size = f" (it asked for {wanted.group(1)})" if wanted else ""
            return ResourceError(
                "memory",
                f"out of memory{size}",
                "use a smaller model or data.batch_size, or a machine with more memory",
            )
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" writing {link.filename!r}" if link.filename else ""
            resume = (
                "; a stopped run goes on with --ckpt_path last" if command == "fit" else " and run the command again"
            )
            return ResourceError("disk", f"no space left on the device{where}", f"free some space{resume}")
    return None
