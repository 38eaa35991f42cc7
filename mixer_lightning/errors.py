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
import itertools
import os
import re
import sys
import threading
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


class Interrupted(BaseException):
    """A stop by a signal that cannot wait for a resumable point: Ctrl+C, SIGTERM or SIGHUP before training
    starts or after it ended, or a second Ctrl+C. A `BaseException` like KeyboardInterrupt, so that no
    ``except Exception`` swallows it and Lightning tears the run down and re-raises it, but not a
    KeyboardInterrupt, which Lightning answers with its own message and exit status 1. `mixer` prints
    the message as one line and exits with status 128 + `signum` (130, 143, 129)."""

    # True once one is raised in this process (`mixer` resets it per command): a stop signal that comes
    # while it unwinds is ignored, as Lightning ignores Ctrl+C while it shuts down after a KeyboardInterrupt.
    # Raising again would cut the tear-down (DataLoader workers, loggers) short at a random place, and each
    # line would name the latest signal instead of the stop that was asked for.
    unwinding = False

    def __init__(self, signum: int, message: str):
        self.signum = signum
        Interrupted.unwinding = True
        super().__init__(message)


def stderr_line(text: str) -> None:
    """`text` and its newline to stderr in one write, flushed. print() writes the two apart, and a signal
    handler that raises (a second Ctrl+C) can run between them: the next line was glued to this one."""
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


def _chain(error: BaseException | None) -> list[BaseException]:
    seen, chain = set(), []
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def settled_stop(stop: Stopped | Interrupted) -> Stopped | Interrupted:
    """The stop a run reports: the first one asked for. A signal that comes while a stop unwinds (a second
    Ctrl+C after a `Stopped` saved last.ckpt, while the run is torn down) raises from within that tear-down
    and so has the earlier stop in its chain; that stop's line is the one that says what was saved."""
    return [link for link in _chain(stop) if isinstance(link, (Stopped, Interrupted))][-1]


def stop_behind(error: BaseException) -> Stopped | Interrupted | None:
    """The stop (`settled_stop`) that `error` was raised while unwinding, if any: a signal's handler raises
    wherever the run is, and what it cuts short can raise again on the way out. torch.save, stopped in the
    middle of writing a checkpoint, ends its zip file with "RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos", whose context is the `Interrupted`; the interrupted write is
    discarded (`safety.atomic.atomic_write`), so the stop's line holds."""
    stop = next((link for link in _chain(error) if isinstance(link, (Stopped, Interrupted))), None)
    return None if stop is None else settled_stop(stop)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_summary(error: BaseException, limit: int = 160) -> str:
    """``Type: message`` of `error` on one line of at most `limit` characters, for a line that names it."""
    return _one_line(f"{type(error).__name__}: {error}", limit)


# A value echoed in an error is cut to this many characters (issue 25, RC16): a flag value can be a
# 5,000-character string or a YAML text that expands to millions of values, and the line must stay a line.
ECHO_LIMIT = 80
# A message longer than this is shortened (`bounded_line`), so that ``mixer: error: `` and the message
# stay within 300 characters.
LINE_LIMIT = 286
# In a message that long, a word (no space, no quote) longer than this is an echoed value, not a path
# the user needs whole (a path under pytest's temporary folder is ~90 characters), and is cut.
LONG_WORD = 120


def _echo(value: object) -> str:
    """`value` as an error message may echo it: one line of at most `ECHO_LIMIT` characters, saying how
    long it was when cut."""
    text = " ".join(str(value).split())
    return text if len(text) <= ECHO_LIMIT else f"{text[: ECHO_LIMIT - 25]}... ({len(text):,} characters)"


def _given_value(message: str) -> str | None:
    """The value jsonargparse says it was given (its first ``Given value:``, else ``Got value:``) as an
    error may echo it (`_echo`), without jsonargparse's ". Got value: Namespace(...)" tail (the whole
    parsed value, which may hold everything a file or flag set). A class or group option given a
    file gets the file's text, lines that jsonargparse prints as they are: "the content of a file
    (N lines)" is said instead, never the content."""
    # Not the outer union's "Given value: NestedArg(key='batch_size', val='abc')": the innermost key's
    # own "Got value: abc" says what the user wrote.
    found = re.search(r"Given value: (?!NestedArg\()(.*)", message) or re.search(r"Got value: (.*)", message)
    if found is None:
        return None
    following = message[found.end() :].lstrip("\n").splitlines()
    if following and not re.match(r"\s*(- |Given value|Got value|Subtypes:|Errors:|Parser key|Expected)", following[0]):
        lines = 1 + len(list(itertools.takewhile(lambda line: not line.strip().startswith("- "), following)))
        return f"the content of a file ({lines} lines), not a YAML mapping"
    return repr(_echo(found.group(1).split(". Got value:", 1)[0].strip()))


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
        given = _given_value(inner)
        if types and given:
            names = " or ".join(dict.fromkeys("null" if t == "NoneType" else t for t in types))
            return ConfigError(field, f"expected {names}, got {given}", help_)
        lines = [line.strip() for line in inner.splitlines() if line.strip()]
        got = f", got {given}" if given else ""
        return ConfigError(field, _one_line(lines[0] if lines else inner).rstrip(".:") + got, help_)
    found = re.match(r"Subcommand '(\w+)' does not accept option '([^']+)'", message)
    if found:
        return ConfigError(found.group(2), f"no such option of `mixer {found.group(1)}`", help_)
    found = re.match(r"unrecognized arguments: (.*)", message)
    if found:
        return ConfigError(found.group(1).split()[0], "no such option", help_)
    return ConfigError("arguments", _one_line(message), help_)


# OSErrors that say what is wrong with a path the user gave (or a run's files they changed): a folder
# where a file belongs (``metrics.csv`` replaced by a folder), no permission, a read-only disk, a
# name longer than the file system takes. Each is one line (`path_error`), not a traceback.
PATH_ERRORS = {
    errno.EISDIR: ("is a folder, where a file belongs", "give the path of a file, or move the folder away"),
    errno.ENOTDIR: ("goes through a file as if it were a folder", "check the path"),
    errno.EEXIST: ("exists already", "choose another path, or move it away"),
    errno.EACCES: (
        "cannot be accessed: permission denied",
        "choose a path you may read and write, or change its permissions",
    ),
    errno.EPERM: ("cannot be changed: operation not permitted", "choose a path you may write to"),
    errno.EROFS: ("lies on a read-only file system", "choose a path on a writable disk"),
    errno.ENAMETOOLONG: ("has a name longer than the file system allows (255 bytes a name)", "give a shorter path"),
    errno.ELOOP: ("goes through a loop of symbolic links", "fix the links"),
}


def path_error(error: OSError) -> ConfigError:
    """The one line for an `OSError` of `PATH_ERRORS` on ``error.filename`` (echoed within bounds)."""
    problem, fix = PATH_ERRORS[error.errno]
    name = error.filename2 if error.errno == errno.EEXIST and error.filename2 else error.filename
    return ConfigError("path", f"{_echo(os.fsdecode(name) if isinstance(name, bytes) else name)!r} {problem}", fix)


def _copy_of(error: Exception) -> Exception:
    """A copy of `error` (its class, arguments and attributes) made without calling its ``__init__``:
    `copy.copy` calls ``cls(*args)``, which fails for a class whose ``__init__`` takes other arguments
    than its message (`data.shards.BadShard(shard, sample, problem)`)."""
    copied = type(error).__new__(type(error), *error.args)
    copied.__dict__.update(vars(error))
    copied.args = error.args
    return copied


def _shorter_paths(text: str, excess: int) -> str:
    """`text` up to `excess` characters shorter where its quoted paths allow: from the longest, each loses
    folders after its first, as few as it takes (``'/scratch/.../shards/train-0002.tar'`` at the most),
    and keeps its first folder and its last two parts (the folder and the file the user looks for). A
    path is also cut to `LONG_WORD` characters this way, not as an echoed value is (`_echo`)."""
    quoted = re.findall(r"'([^'\s]*/[^'\s]*)'|\"([^\"\s]*/[^\"\s]*)\"", text)
    for path in sorted({single or double for single, double in quoted}, key=len, reverse=True):
        parts, need = path.split("/"), max(excess, len(path) - LONG_WORD)
        if need <= 0 or len(parts) <= 4:
            continue
        middle = parts[2:-2]
        while middle and len(path) - len("/".join([*parts[:2], "...", *middle, *parts[-2:]])) < need:
            middle.pop(0)
        shorter = "/".join([*parts[:2], "...", *middle, *parts[-2:]])
        if len(shorter) < len(path):
            excess -= (len(path) - len(shorter)) * text.count(path)
            text = text.replace(path, shorter)
    return text


def bounded_line(error: Exception) -> Exception:
    """`error` with a message of at most `LINE_LIMIT` characters. Above it, quoted paths lose folders
    from their middle, as many as it takes (`_shorter_paths`: the path gives way, not the problem after
    it), each word longer than `LONG_WORD` (an echoed value: a 5,000-character flag, a name over 255
    bytes) is cut as `_echo` cuts it; a message still too long keeps its field, gives the problem up to
    two thirds of what is left and the fix the rest, each cut at its end. The error is copied, so the
    original keeps its message."""
    if len(str(error)) <= LINE_LIMIT:
        return error

    def words(part: str, excess: int) -> str:
        part = _shorter_paths(" ".join(part.split()), excess)
        return re.sub(rf"[^\s'\"]{{{LONG_WORD + 1},}}", lambda word: _echo(word.group()), part)

    bounded = _copy_of(error)
    if not isinstance(error, (ConfigError, ResourceError)):
        text = " ".join(str(error).split())
        bounded.args = (_one_line(words(text, len(text) - LINE_LIMIT), LINE_LIMIT),)
        return bounded
    field, problem, fix = (" ".join((part or "").split()) for part in (error.field, error.problem, error.fix))
    budget = LINE_LIMIT - len(field) - 2 - (2 if fix else 0)
    problem = words(problem, len(problem) + len(fix) - budget)
    field, fix = words(field, 0), words(fix, len(problem) + len(fix) - budget)
    if len(problem) + len(fix) > budget:
        problem = _one_line(problem, max(min(len(problem), max(budget - len(fix), 2 * budget // 3)), 20))
        fix = _one_line(fix, max(budget - len(problem), 20)) if fix else fix
    bounded.field, bounded.problem, bounded.fix = field, problem, fix or None
    bounded.args = (_one_line(f"{field}: {problem}" + (f"; {fix}" if fix else ""), LINE_LIMIT),)
    return bounded


def install_thread_excepthook(debug: bool = False) -> None:
    """From now on, an exception that ends a background thread is one line ``mixer: warning: ...``
    (translated as `translate_library_error` does when it can), not Python's "Exception in thread"
    traceback; with `debug`, the hook in place before shows the traceback.

    Loggers write from threads: TensorBoard's event writer hits a full disk in its own thread, which
    prints a traceback and keeps the error for the main thread, whose next write raises it (then one
    ``mixer: error:`` line, status 1). Kept for the process: ``mixer`` is one command per process."""
    global _thread_debug
    _thread_debug = debug
    if getattr(threading.excepthook, "mixer_hook", False):
        return
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if _thread_debug or args.exc_value is None or not isinstance(args.exc_value, Exception):
            previous(args)
            return
        translated = translate_library_error(args.exc_value)
        if isinstance(translated, (ConfigError, ResourceError)):  # its fix is the main thread's line to give
            what = f"{translated.field}: {translated.problem}"
        else:
            what = translated or f"{type(args.exc_value).__name__}: {args.exc_value}"
        name = args.thread.name if args.thread is not None else "a background thread"
        print(f"mixer: warning: {_one_line(f'{name} stopped: {what}', LINE_LIMIT)}", file=sys.stderr)

    hook.mixer_hook = True  # type: ignore[attr-defined]
    threading.excepthook = hook


_thread_debug = False


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
        return bounded_line(found)
    for link in _chain(error):
        name, message = type(link).__name__, str(link)
        if name == "ArgumentError":
            return bounded_line(_argument_error(link, command))
        if name == "ImportDenied":
            denied = re.search(r"Importing '([\w.]+)' is not allowed", message)
            return untrusted_import("config", denied.group(1) if denied else message)
        if isinstance(link, OSError) and link.filename is not None and link.errno in PATH_ERRORS:
            return path_error(link)
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


def process_rank() -> int:
    """This process's global rank in a multi-process run (DDP, FSDP, a SLURM task), 0 otherwise: what
    Lightning's ``rank_zero_only.rank`` holds once the strategy has set it up (from ``RANK``,
    ``LOCAL_RANK``, ``SLURM_PROCID`` before), read without importing Lightning (a command that never
    imported it has one process)."""
    module = sys.modules.get("lightning.fabric.utilities.rank_zero")
    rank = getattr(getattr(module, "rank_zero_only", None), "rank", 0) if module is not None else 0
    return rank if isinstance(rank, int) else 0


def error_prefix() -> str:
    """``mixer: error:``, naming the rank in a process other than the first of a multi-process run: an error
    raised on several ranks prints once per rank, and which rank failed is what a user must know."""
    rank = process_rank()
    return "mixer: error:" if rank == 0 else f"mixer: error (rank {rank}):"
