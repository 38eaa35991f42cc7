"""The entry point of the ``mixer`` command: Lightning's ``fit|validate|test|predict``
(`mixer_lightning.cli.lightning`) plus the project's own commands (`mixer_lightning.commands`).

`main` is both the console script and the entry point the tests drive::

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.fast_dev_run", "true"])

It is also the one place where errors become what a user sees: a mistake in the input is one line
``mixer: error: FIELD: problem; fix`` (exit status 2), a failure of the machine (full disk, too little
memory, a run another process writes) or of the run (divergence) one line with status 1, a stop by
SIGTERM/SIGINT one line with status 143/130 (`mixer_lightning.errors.translate_library_error`).
"""

from __future__ import annotations

import contextvars
import difflib
import os
import signal
import sys
from typing import NoReturn

from mixer_lightning.cli.signals import ignore_stop_signals, restore_signals, stop_on_signals
from mixer_lightning.commands import COMMANDS, run_command
from mixer_lightning.errors import (
    ConfigError,
    Interrupted,
    Stopped,
    error_prefix,
    process_rank,
    settled_stop,
    stderr_line,
    stop_behind,
    translate_library_error,
)

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
# ``mixer --help`` is written here, without importing Lightning (or torch): it starts at once.
LIGHTNING_SUMMARIES = {
    "fit": "train a model: mixer fit --config CONFIG.yaml (resume: --ckpt_path last)",
    "validate": "evaluate a checkpoint on the validation split (val_metrics.json, in its run directory)",
    "test": "evaluate a checkpoint on the test split: mixer test --ckpt_path RUN/checkpoints/best.ckpt",
    "predict": "class probabilities of the test split, or top-k of image files (--data.predict_root DIR)",
}
HELP = """usage: mixer [-h] [--version] COMMAND ...

mixer-lightning: MLP-Mixers and their wide, sparse relatives in PyTorch Lightning: the models, recipes
and analyses of MLP-Mixer (Tolstikhin et al., NeurIPS 2021) and "Understanding MLP-Mixer as a Wide and
Sparse MLP" (Hayase & Karakida, ICML 2024).

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
  mixer predict --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt --data.predict_root photos/
  mixer models 'mixer_*'                                      presets with parameter counts

manual: docs/usage.md
"""


def version() -> str:
    """The installed version of mixer-lightning (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("mixer-lightning")
    except PackageNotFoundError:
        from mixer_lightning import __version__

        return __version__


def help_text() -> str:
    from mixer_lightning.commands import summary

    width = max(len(name) for name in (*LIGHTNING_SUMMARIES, *COMMANDS))
    lightning = "\n".join(f"  {name:<{width}}  {text}" for name, text in LIGHTNING_SUMMARIES.items())
    return HELP.format(lightning=lightning, project=summary())


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


def _stops_at_parsing(argv: list[str], error: BaseException | None = None) -> bool:
    """Whether a Lightning subcommand ended while its arguments were read, before any run existed:
    ``--help`` and ``--print_config`` end there, and so does an argument error raised inside
    ``parse_arguments`` (not inside instantiation or a run: a traceback frame tells). Such an end
    may skip the interpreter's teardown (`mixer_lightning.cli.parser_cache.fast_exit`)."""
    if not argv or argv[0] not in LIGHTNING_COMMANDS:
        return False
    if error is None:
        return any(a in ("-h", "--help") or a.startswith("--print_config") for a in argv[1:])
    names = set()
    traceback = error.__traceback__
    while traceback is not None:
        names.add(traceback.tb_frame.f_code.co_name)
        traceback = traceback.tb_next
    return "parse_arguments" in names and not names & {"instantiate_classes", "_run_subcommand"}


def _exit_stopped(stop: Stopped | Interrupted) -> NoReturn:
    Interrupted.unwinding = True  # the stop is settled: a signal from here on asks for nothing new
    if process_rank() == 0:  # every process of a DDP job stops at the same step: one line, not one per rank
        stderr_line(f"mixer: {stop}")
    raise SystemExit(128 + stop.signum) from None


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
    signals = stop_on_signals()  # Ctrl+C, SIGTERM, SIGHUP outside training: one line (`signals`)
    stop_line = False  # a stop's line was printed: the process exits on it
    try:
        if argv and argv[0] in ("-h", "--help"):
            print(help_text(), end="")
            return
        if argv and argv[0] == "--version":
            print(f"mixer-lightning {version()}")
            return
        unknown = _unknown_command(argv)
        if unknown is not None:
            raise unknown
        from mixer_lightning.errors import install_thread_excepthook
        from mixer_lightning.safety.config_files import install_bounded_yaml_loader
        from mixer_lightning.safety.trust import enforce_import_policy

        enforce_import_policy()  # before any config is parsed: nothing untrusted is imported from here on
        install_bounded_yaml_loader()  # every YAML text read within bounds (aliases, nesting): issue 25
        install_thread_excepthook(debug)  # a logger thread's error is one line, not a traceback
        if argv[0] in COMMANDS:
            code = run_command(argv[0], argv[1:])
            if code:
                raise SystemExit(code)
            return
        from mixer_lightning.cli import parser_cache  # help and misspelt flags from the last full parser's answers

        if parser_cache.answer(argv):
            parser_cache.fast_exit(0, console=args is None)
            return
        from mixer_lightning.cli.lightning import run  # Lightning is imported only for its subcommands

        with parser_cache.recording_help(argv, console=args is None):
            # In a context of its own: jsonargparse's `subclass_arg_context` sets a ContextVar to the
            # subcommand's parser and never resets it, so after `main` returned, that parser (and through
            # LightningCLI's instantiator the CLI, its Trainer, model, optimizer state and data) stayed alive
            # until the next call: an in-process sweep (`mixer sweep --run`) held one point's model while the
            # next one trained, and a fit's while its test ran.
            contextvars.copy_context().run(run, argv)
    except BrokenPipeError:  # `mixer width --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (Stopped, Interrupted) as raised:
        stop_line = True
        _exit_stopped(settled_stop(raised))
    except SystemExit as exit_:
        if type(exit_).__name__ == "SIGTERMException":  # Lightning's, before our handler was installed
            print("mixer: stopped by SIGTERM before training started (nothing new to resume)", file=sys.stderr)
            raise SystemExit(128 + signal.SIGTERM) from None
        if exit_.code in (0, None) and _stops_at_parsing(argv):  # the help or the config printed, nothing else
            from mixer_lightning.cli.parser_cache import fast_exit

            fast_exit(0, console=args is None)
        raise
    except Exception as error:
        stop = stop_behind(error)
        if stop is not None and not debug:  # raised by what a signal's stop cut short (a checkpoint being written)
            stop_line = True
            _exit_stopped(stop)
        translated = translate_library_error(error, argv[0] if argv else None)
        if translated is None or debug:
            raise
        print(f"{error_prefix()} {translated}", file=sys.stderr)
        if isinstance(translated, ConfigError) and _stops_at_parsing(argv, error):  # nothing was written
            from mixer_lightning.cli.parser_cache import fast_exit

            fast_exit(2, console=args is None)
        raise SystemExit(2 if isinstance(translated, ConfigError) else 1) from None
    finally:
        if stop_line and args is None:  # the console's process ends on its line: a held-down Ctrl+C adds nothing
            ignore_stop_signals()  # not Python's handlers back first: a KeyboardInterrupt could come in between
        else:
            restore_signals(signals)
