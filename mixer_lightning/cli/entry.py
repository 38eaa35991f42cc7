"""The ``mixer`` command: Lightning's ``fit|validate|test|predict`` (`mixer_lightning.cli.lightning`) and the
project's own commands (`mixer_lightning.commands`). `main` is the console script and what the tests drive::

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.fast_dev_run", "true"])

Errors a user can act on are one line, ``mixer: error: FIELD: problem; fix``: status 2 for the input (a
`ConfigError`, jsonargparse's argument errors), 1 for the machine or the run (`ResourceError`,
`TrainingError`, an unwritable path, a library's own error: its type and first line); a run stopped by SIGTERM or SLURM's requeue signal at a resumable point
is one line with status 128 + the signal. ``--debug`` (or ``MIXER_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextvars
import difflib
import os
import sys

from mixer_lightning.commands import COMMANDS, run_command, summary
from mixer_lightning.errors import ConfigError, ResourceError, Stopped, TrainingError, argument_error, library_line

LIGHTNING_COMMANDS = {
    "fit": "train a model: mixer fit --config CONFIG.yaml (resume: --ckpt_path last)",
    "validate": "evaluate a checkpoint on the validation split (val_metrics.json, in its run directory)",
    "test": "evaluate a checkpoint on the test split: mixer test --ckpt_path RUN/checkpoints/best.ckpt",
    "predict": "class probabilities of the test split, or top-k of image files (--data.predict_root DIR)",
}
HELP = """usage: mixer [-h] [--version] [--debug] COMMAND ...

mixer-lightning: MLP-Mixers and their wide, sparse relatives in PyTorch Lightning: the models, recipes and
analyses of MLP-Mixer (Tolstikhin et al., NeurIPS 2021) and "Understanding MLP-Mixer as a Wide and Sparse
MLP" (Hayase & Karakida, ICML 2024).

training and evaluation (LightningCLI: YAML configs and dotted flags; mixer COMMAND --help):
{lightning}

project commands (mixer COMMAND --help):
{project}

options:
  -h, --help  show this help and exit
  --version   show the version of mixer-lightning and exit
  --debug     show the traceback of an error (also MIXER_DEBUG=1)

examples:
  mixer fit --config configs/quickstart.yaml                  train (a run directory under runs/)
  mixer fit --config configs/quickstart.yaml --ckpt_path last resume the latest run, exactly
  mixer test --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt
  mixer models 'mixer_*'                                      presets with parameter counts

manual: docs/usage.md
"""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("mixer-lightning")
    except PackageNotFoundError:
        from mixer_lightning import __version__

        return __version__


def help_text() -> str:
    width = max(map(len, (*LIGHTNING_COMMANDS, *COMMANDS)))
    lightning = "\n".join(f"  {name:<{width}}  {text}" for name, text in LIGHTNING_COMMANDS.items())
    return HELP.format(lightning=lightning, project=summary())


def one_line(error: BaseException, argv: list[str] = ()) -> tuple[str, int] | None:
    """The line and exit status for `error` (or what it was raised from), or None: a bug, shown as a traceback;
    an argument error names the flag of `argv` its message names."""
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        if isinstance(error, argparse.ArgumentError):
            error = argument_error(error, argv)
        if isinstance(error, ConfigError):
            return f"mixer: error: {error}", 2
        if isinstance(error, (ResourceError, TrainingError)):
            return f"mixer: error: {error}", 1
        if isinstance(error, Stopped):
            return (f"mixer: {error}" if error.rank == 0 else ""), 128 + error.signum
        if isinstance(error, UnicodeDecodeError):  # a config file saved in another encoding (read by jsonargparse)
            return f"mixer: error: config: not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8", 2
        if isinstance(error, OSError) and error.filename is not None:  # a full disk, a path we may not write
            return f"mixer: error: {error.filename}: {error.strerror}", 1
        error = error.__cause__ or error.__context__
    return library_line(seen[0])


def main(args: list[str] | None = None) -> None:
    """Run ``mixer`` with `args` (default: the process's command line)."""
    argv = list(sys.argv[1:] if args is None else args)
    debug = "--debug" in argv or os.environ.get("MIXER_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    if argv[:1] in ([], ["-h"], ["--help"]):
        print(help_text(), end="")
        return
    if argv[0] == "--version":
        print(f"mixer-lightning {version()}")
        return
    try:
        if argv[0] not in (*LIGHTNING_COMMANDS, *COMMANDS):
            close = difflib.get_close_matches(argv[0], [*LIGHTNING_COMMANDS, *COMMANDS], n=1)
            hint = f"did you mean `mixer {close[0]}`? " if close else ""
            raise ConfigError("command", f"unknown command {argv[0]!r}", f"{hint}see `mixer --help`")
        from mixer_lightning.safety.trust import enforce_import_policy

        enforce_import_policy()  # nothing a config, flag or checkpoint names is imported outside trusted packages
        if argv[0] in COMMANDS:
            code = run_command(argv[0], argv[1:])
            if code:
                raise SystemExit(code)
            return
        from mixer_lightning.cli.lightning import run  # Lightning is imported only for its commands

        # In a context of its own: jsonargparse leaves a ContextVar on the subcommand's parser, which would keep
        # the run's CLI, model and data alive after `main` returns (an in-process sweep runs many).
        contextvars.copy_context().run(run, argv)
    except BrokenPipeError:  # `mixer width --json | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:  # Ctrl+C outside training (Lightning handles it inside)
        raise SystemExit(130) from None
    except Exception as error:
        line = None if debug else one_line(error, argv)
        if line is None:
            raise
        if line[0]:
            print(line[0], file=sys.stderr, flush=True)
        raise SystemExit(line[1]) from None
