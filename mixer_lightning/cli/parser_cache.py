"""``mixer fit|validate|test|predict --help`` and a misspelt flag answered without importing Lightning.

Building LightningCLI's parser needs ``import lightning.pytorch``, which imports all of torchmetrics
(torchvision's models, ``torch._dynamo``, ``scipy.signal``): 5-6 s of CPU on a small machine, before a
single argument is read (benchmarks/RESULTS.md, "Start-up"). What the parser says about ``COMMAND
--help`` and about a flag it does not know is a function of the installed code alone, so the full
parser's answer is kept here, and later answered from in milliseconds:

- the help text of ``mixer COMMAND --help`` (exactly those two arguments), per terminal width, written
  by the console script's own full run (in another process the "known subclasses" it lists depend on
  what that process had imported);
- the option keys of every subcommand's parser, and which of them take dotted sub-keys (a class's
  arguments, ``--model.channels``): a flag that is certainly unknown gets the same one-line
  did-you-mean (`mixer_lightning.cli.suggestions.unknown_flag`) as the full parser gives.

Anything the cache does not certainly know (a flag under ``--model``/``--data``/a class argument,
``--print_config``, a flag with ``=``, a config file that does not read, validate/test/predict
completed from a checkpoint, ...) goes to the full parser, which fills the cache on its way.

The cache is one JSON file per fingerprint in the user's cache directory (``$MIXER_CACHE_DIR``, else
``$XDG_CACHE_HOME/mixer_lightning``, else ``~/.cache/mixer_lightning``; the folder ``mixer models``
uses), under ``cli/``. The fingerprint (`fingerprint`) covers everything the parser's answer depends
on: the SHA-256 of every source file of this package, the versions of the libraries whose classes and
docstrings make the parser, ``sys.path`` and the modification times of its ``site-packages`` folders (an
install or upgrade of any package changes them), the Python version and the environment
variables jsonargparse, Lightning, argparse (``COLUMNS``, the locale) or this project read. Any change
is another file: a stale answer cannot be served. Files are written atomically; one that does not
read as this format is ignored (and replaced by the next full run).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # mixer_lightning/
FORMAT = 1
# Libraries whose classes, signatures and docstrings make up the parser and its help.
LIBRARIES = (
    "mixer-lightning",
    "lightning",
    "jsonargparse",
    "torch",
    "torchmetrics",
    "torchvision",
    "timm",
    "docstring-parser",
    "typeshed-client",
    "PyYAML",
)
# Environment variables that change the parser or its help: jsonargparse's and Lightning's settings
# (``JSONARGPARSE_*``, ``PL_*`` defaults), ours (the trust policy), argparse's width and language.
ENVIRONMENT_PREFIXES = ("JSONARGPARSE_", "PL_", "MIXER_", "LIGHTNING_")
ENVIRONMENT_NAMES = ("COLUMNS", "LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES")
KEPT_FILES = 8  # fingerprints kept side by side (several checkouts or environments sharing one cache)
COMMANDS = ("fit", "validate", "test", "predict")
EVALUATIONS = ("validate", "test", "predict")


# ------------------------------------------------------------------------------ the fingerprint


def _versions() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in LIBRARIES:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} absent")
    return found


def _sources() -> list[str]:
    """The SHA-256 of every ``.py`` file of the package (content, not times: a checkout that restores
    an old file with a new time, or a new file with an old time, is still seen)."""
    entries = []
    for folder, folders, files in os.walk(PACKAGE):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as file:
                    entries.append(f"{os.path.relpath(path, PACKAGE)} {hashlib.sha256(file.read()).hexdigest()}")
    return entries


def _search_path() -> list[str]:
    """``sys.path``, with the modification time of its package folders (``site-packages``): installing,
    upgrading or removing a package adds and removes entries (``*.dist-info``) there. Not of the other
    folders (the working directory, the script's): every run writes into those."""
    entries = []
    for entry in sys.path:
        stamp = None
        if os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            try:
                stamp = os.stat(entry).st_mtime_ns
            except OSError:
                pass
        entries.append(f"{entry} {stamp}")
    return entries


def _environment() -> list[str]:
    return sorted(
        f"{name}={value}"
        for name, value in os.environ.items()
        if (name.startswith(ENVIRONMENT_PREFIXES) and name != "MIXER_CACHE_DIR") or name in ENVIRONMENT_NAMES
    )


def fingerprint() -> str:
    """A hash of everything the parser's answers depend on (module docstring)."""
    parts = [f"format {FORMAT}", sys.version, str(PACKAGE), *_versions(), *_sources(), *_search_path(), *_environment()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def cache_folder() -> Path:
    root = os.environ.get("MIXER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mixer_lightning"
    )
    return Path(root) / "cli"


def cache_file() -> Path:
    return cache_folder() / f"parser-{fingerprint()}.json"


# ------------------------------------------------------------------------------ reading and writing


def _valid(content: Any) -> bool:
    return (
        isinstance(content, dict)
        and content.get("format") == FORMAT
        and isinstance(content.get("help", {}), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in content.get("help", {}).items())
        and isinstance(content.get("parsers", {}), dict)
        and all(
            isinstance(p, dict) and isinstance(p.get("options"), list) and isinstance(p.get("dests"), dict)
            for p in content.get("parsers", {}).values()
        )
    )


def load(path: Path | None = None) -> dict:
    """The cache of this fingerprint, or ``{}`` (none, unreadable, or not this format: ignored)."""
    try:
        content = json.loads((path or cache_file()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return content if _valid(content) else {}


def store(update: dict) -> None:
    """Merge `update` into the cache, written atomically (a reader never sees half a file); the oldest
    fingerprints beyond `KEPT_FILES` are removed. A cache that cannot be written is only slower."""
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        content = load(path) or {"format": FORMAT}
        for key, value in update.items():
            content.setdefault(key, {}).update(value)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(content), encoding="utf-8")
        os.replace(temporary, path)
        others = sorted(path.parent.glob("parser-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in others[KEPT_FILES:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def _help_key(command: str) -> str:
    """The help text's key: argparse wraps it to the terminal's width (``COLUMNS``, else the terminal)."""
    return f"{command}@{shutil.get_terminal_size().columns}"


def _asks_help(argv: list[str]) -> bool:
    return len(argv) == 2 and argv[0] in COMMANDS and argv[1] in ("-h", "--help")


# ------------------------------------------------------------------------------ filling (full parser)


def remember_parsers(parser: Any) -> None:
    """Keep the option keys of every subcommand parser of LightningCLI's `parser` (called by the full
    parser before it parses: reading the actions imports nothing and changes nothing)."""
    from mixer_lightning.cli.adapter import option_keys, subcommand_parser

    if load().get("parsers"):
        return
    parsers = {}
    for command in COMMANDS:
        sub = subcommand_parser(parser, command)
        if sub is None:
            return
        dests = {action.dest: getattr(action, "_typehint", None) is not None for action in sub._actions}
        parsers[command] = {"options": option_keys(sub), "dests": dests}
    store({"parsers": parsers})


class _Tee(io.TextIOBase):
    """Writes to `stream` and keeps a copy (the help text, as the user saw it)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


@contextlib.contextmanager
def recording_help(argv: list[str], console: bool) -> Iterator[None]:
    """Around the full parser: keep the help text it prints for ``mixer COMMAND --help``. Only the
    console script's run is kept (`console`): a process that imported more (a test, a notebook)
    lists more "known subclasses" in its help than a fresh ``mixer`` does."""
    if not (console and _asks_help(argv)):
        yield
        return
    tee = _Tee(sys.stdout)
    try:
        with contextlib.redirect_stdout(tee):
            yield
    except SystemExit as exit_:
        if exit_.code in (0, None) and tee.copy.getvalue():
            store({"help": {_help_key(argv[0]): tee.copy.getvalue()}})
        raise


# ------------------------------------------------------------------------------ answering (no Lightning)


def _config_files(args: list[str]) -> list[str] | None:
    """The ``--config`` files of `args`, or None if one is not a readable, trusted YAML mapping (the
    full parser says which and why, before anything else)."""
    from mixer_lightning.safety.config_files import load_configs
    from mixer_lightning.safety.trust import check_class_paths

    names = []
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            names.append(arg.split("=", 1)[1])
        elif arg in ("--config", "-c"):
            if i + 1 >= len(args):
                return None
            names.append(args[i + 1])
    for name in names:
        try:
            if not Path(name).is_file():
                return None
            check_class_paths(load_configs([name], "config"), "config", repr(name))
        except Exception:
            return None
    return names


def _unknown(key: str, parser: dict) -> bool | None:
    """Whether the subcommand parser rejects ``--key`` (True), accepts it (False), or leaves it to a
    typed argument whose sub-keys the cache does not know (None: the full parser decides).

    jsonargparse: a flag that is no option string goes, when it has dots, to the action of its longest
    dotted prefix (``ActionTypeHint.parse_argv_item`` → ``find_parent_action``); an action with a type
    hint (a class, a callable) parses it, a group's config loader (``--trainer``) does not."""
    if key in parser["options"]:
        return False
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in parser["dests"]:
            return None if parser["dests"][prefix] else True
    return True


def answer(argv: list[str]) -> bool:
    """Answer `argv` from the cache: True after printing the help; a misspelt flag raises its one-line
    `ConfigError` (the full parser's); False: the full parser must run."""
    if os.environ.get("MIXER_NO_PARSER_CACHE", "") not in ("", "0") or not argv or argv[0] not in COMMANDS:
        return False
    command, rest = argv[0], argv[1:]
    cache = load()
    if not cache:
        return False
    if _asks_help(argv):
        text = cache.get("help", {}).get(_help_key(command))
        if text is None:
            return False
        sys.stdout.write(text)
        return True
    parser = cache.get("parsers", {}).get(command)
    if parser is None or any(a in ("-h", "--help") or a.startswith("--print_config") for a in rest):
        return False
    if command in EVALUATIONS and not any(a in ("--config", "-c") or a.startswith("--config=") for a in rest):
        return False  # completed from the checkpoint's run first (`arguments.evaluation_arguments`)
    if _config_files(rest) is None:
        return False
    from mixer_lightning.cli.suggestions import unknown_flag

    for arg in rest:
        if not arg.startswith("--") or arg == "--" or arg == "--config" or arg.startswith("--config="):
            continue
        if "=" in arg or arg.endswith("+"):
            return False  # the full parser names such a flag its own way
        unknown = _unknown(arg[2:], parser)
        if unknown is None:
            return False
        if unknown:
            error = unknown_flag(arg[2:], parser["options"], command)
            if error is None:
                return False
            raise error
    return False


def fast_exit(code: int, console: bool) -> None:
    """End the console script (`console`) with `code` without the interpreter's teardown of torch and
    Lightning (about 1 s of CPU): only after an answer that wrote nothing but stdout/stderr (help, the
    printed config, an argument error), both flushed first. In-process callers get SystemExit."""
    if console:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    raise SystemExit(code)
