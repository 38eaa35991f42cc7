"""The ``mixer`` command: Lightning's ``fit|validate|test|predict`` (`mixer_lightning.lightning_cli`)
plus the project's own commands (`mixer_lightning.commands`).

`main` is both the console script and the entry point the tests drive::

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.fast_dev_run", "true"])
"""

from __future__ import annotations

import os
import sys

from mixer_lightning.commands import COMMANDS, run_command
from mixer_lightning.errors import ConfigError, find_config_error


def main(args: list[str] | None = None) -> None:
    """Run ``mixer`` with `args` (default: the process's command line).

    Mistakes in the input (`ConfigError`) are printed as one line and exit with status 2; pass
    ``--debug`` (or set ``MIXER_DEBUG=1``) for the full traceback.
    """
    argv = list(sys.argv[1:] if args is None else args)
    debug = os.environ.get("MIXER_DEBUG", "") not in ("", "0")
    if "--debug" in argv:
        argv.remove("--debug")
        debug = True
    try:
        if argv and argv[0] in COMMANDS:
            code = run_command(argv[0], argv[1:])
            if code:
                raise SystemExit(code)
            return
        from mixer_lightning.lightning_cli import run  # Lightning is imported only for its subcommands

        run(argv)
    except BrokenPipeError:  # `mixer width --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except Exception as error:
        config_error = find_config_error(error)
        if config_error is None or debug:
            raise
        print(f"mixer: error: {config_error}", file=sys.stderr)
        raise SystemExit(2 if isinstance(config_error, ConfigError) else 1) from None


if __name__ == "__main__":
    main()
