"""The project's own subcommands (``mixer models``, ``mixer width``, ...), beside Lightning's
``fit``, ``validate``, ``test`` and ``predict``.

A command is a module with a docstring (its ``--help`` text) and two functions::

    def add_arguments(parser: jsonargparse.ArgumentParser) -> None: ...
    def run(args: jsonargparse.Namespace) -> int | None: ...

Adding one is one line in `COMMANDS`: its name, its module and the one-line summary that
``mixer --help`` shows. Modules are imported only when their command runs.
"""

from __future__ import annotations

import importlib

from jsonargparse import ArgumentParser

COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("mixer_lightning.commands.models", "list the registered models and presets"),
}


def summary() -> str:
    """The project commands, one per line, for ``mixer --help``."""
    width = max(map(len, COMMANDS))
    return "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())


def build_parser(name: str) -> tuple[ArgumentParser, object]:
    module = importlib.import_module(COMMANDS[name][0])
    parser = ArgumentParser(prog=f"mixer {name}", description=module.__doc__, exit_on_error=True)
    module.add_arguments(parser)
    return parser, module


def run_command(name: str, argv: list[str]) -> int | None:
    """Parse `argv` for the command `name` and run it."""
    parser, module = build_parser(name)
    return module.run(parser.parse_args(argv))
