"""The ``mixer`` command: Lightning's ``fit|validate|test|predict`` (`mixer_lightning.lightning_cli`)
plus the project's own commands (`mixer_lightning.commands`).

`main` is both the console script and the entry point the tests drive::

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.fast_dev_run", "true"])

It is also the one place where errors become what a user sees: a mistake in the input is one line
``mixer: error: FIELD: problem; fix`` (exit status 2), a failure of the machine (full disk, too little
memory, a run another process writes) or of the run (divergence) one line with status 1, a stop by
SIGTERM/SIGINT one line with status 143/130 (`mixer_lightning.errors.translate_library_error`).
"""

from __future__ import annotations

import difflib
import os
import signal
import sys

from mixer_lightning.commands import COMMANDS, run_command
from mixer_lightning.errors import ConfigError, Stopped, translate_library_error

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _unknown_command(argv: list[str]) -> ConfigError | None:
    """A one-line error for a missing or misspelt command (Lightning's parser knows only its own four)."""
    known = (*LIGHTNING_COMMANDS, *COMMANDS)
    if argv and (argv[0] in known or argv[0].startswith("-")):
        return None
    listing = f"choose one of {', '.join(known)}"
    if not argv:
        return ConfigError("command", "none given", f"{listing} (`mixer --help`)")
    close = difflib.get_close_matches(argv[0], known, n=1)
    hint = f"did you mean `mixer {close[0]}`? " if close else ""
    return ConfigError("command", f"unknown command {argv[0]!r}", f"{hint}{listing}")


def main(args: list[str] | None = None) -> None:
    """Run ``mixer`` with `args` (default: the process's command line).

    Errors are printed as one line (see the module docstring); pass ``--debug`` (or set
    ``MIXER_DEBUG=1``) for the full traceback.
    """
    argv = list(sys.argv[1:] if args is None else args)
    debug = os.environ.get("MIXER_DEBUG", "") not in ("", "0")
    if "--debug" in argv:
        argv.remove("--debug")
        debug = True
    try:
        unknown = _unknown_command(argv)
        if unknown is not None:
            raise unknown
        if argv[0] in COMMANDS:
            code = run_command(argv[0], argv[1:])
            if code:
                raise SystemExit(code)
            return
        from mixer_lightning.lightning_cli import run  # Lightning is imported only for its subcommands

        run(argv)
    except BrokenPipeError:  # `mixer width --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except Stopped as stop:
        print(f"mixer: {stop}", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    except SystemExit as exit_:
        if type(exit_).__name__ == "SIGTERMException":  # Lightning's, before our handler was installed
            print("mixer: stopped by SIGTERM before training started (nothing new to resume)", file=sys.stderr)
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    except Exception as error:
        translated = translate_library_error(error, argv[0] if argv else None)
        if translated is None or debug:
            raise
        print(f"mixer: error: {translated}", file=sys.stderr)
        raise SystemExit(2 if isinstance(translated, ConfigError) else 1) from None


if __name__ == "__main__":
    main()
