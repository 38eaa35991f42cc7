"""The Lightning side of the ``mixer`` command: ``fit|validate|test|predict`` through `MixerCLI`.

Imported only when one of those runs, so that the project's own commands (``mixer width``, ...) start
without importing Lightning. `MixerCLI` puts together, through LightningCLI's public hooks (and the
one private method `mixer_lightning.cli.adapter` changes), the concerns of the modules beside it:

1. Every input is checked before the run directory exists: the config files and the arguments
   (`arguments`, one line with a did-you-mean on error: `suggestions`), the checkpoint and what it
   may change on resume (`resume`), the seed, the trainer, the model (built), the optimiser and
   schedule (built once on the side), the output paths (`checks`); hub weights bring their
   preprocessing as the data's defaults (`pretrained`).
2. The run directory is then claimed (`rundirs`): a new run takes the next free ``version_N`` by
   creating it; an existing one is only written by a run that resumes it (``--ckpt_path``), under its lock.
3. A run that fails before its first checkpoint removes the directory it created: no empty
   ``version_N/`` is left behind. Its results are written into it (`results`); what it prints is `console`'s.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import warnings
from argparse import ArgumentError
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Callback, LightningDataModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.callbacks.progress import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser

from mixer_lightning.callbacks import DataFacts, PredictionWriter
from mixer_lightning.callbacks.throughput import ThroughputMonitor
from mixer_lightning.cli import carried_over, checks, parser_cache, results
from mixer_lightning.cli.adapter import LightningAdapter, SaveConfig, batch_counts_as_ints, subcommand_parser
from mixer_lightning.cli.arguments import (
    EVALUATIONS,
    LINKED_FROM_DATA,
    SUBCOMMANDS,
    check_config_files,
    configs_first,
    evaluation_arguments,
)
from mixer_lightning.cli.console import RunHeader, progress_callback, quiet_libraries
from mixer_lightning.cli.pretrained import apply_pretrained_defaults, explicit_data_arguments
from mixer_lightning.cli.resume import resolve_checkpoint, restore_arguments
from mixer_lightning.cli.rundirs import (
    RunClaim,
    check_pinned_version,
    check_run_root,
    evaluate_in_run,
    first_process,
    loggerless_run,
)
from mixer_lightning.cli.signals import stop_context
from mixer_lightning.cli.suggestions import suggest_argument
from mixer_lightning.commands import HelpFormatter, summary
from mixer_lightning.data import ImageDataModule  # noqa: F401  (registers the data module for short class names)
from mixer_lightning.errors import ConfigError, Interrupted, Stopped, error_summary
from mixer_lightning.safety.checkpoints import (
    SPECIAL_CKPT_PATHS,
    AtomicCheckpointIO,
    BestCheckpoint,
    ResumeCheckpoint,
)
from mixer_lightning.safety.distributed import end_process_group
from mixer_lightning.safety.slurm import SlurmRequeue
from mixer_lightning.tasks import ClassifierModule

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "mixer"},
    },
    # The run header (`mixer_lightning.cli.console.RunHeader`) says what runs and its parameter count;
    # Lightning's table of every submodule (metrics included) is a flag away.
    "enable_model_summary": False,
}
DESCRIPTION = (
    "mixer-lightning: MLP-Mixers and their wide, sparse relatives (Tolstikhin et al. 2021; Hayase & "
    "Karakida 2024) in PyTorch Lightning"
)


class MixerCLI(LightningAdapter):
    """LightningCLI with the project's callbacks, the data → model links, and runs that never lose or
    overwrite what is on disk (module docstring)."""

    def __init__(self, *args: Any, claim: RunClaim, **kwargs: Any) -> None:
        self.claim = claim  # the run directory this command writes (`run` releases it)
        # validate/test/predict of a checkpoint inside a run directory: the results go there (no new run).
        self.evaluated_run = None
        # The data arguments the user's config files and flags set (the others may take pretrained defaults).
        self.explicit_data: set[str] = set()
        # The model arguments a checkpoint's hyper-parameters leave out, restored after Lightning reads them.
        self.kept: dict = {}
        self.header: RunHeader | None = None
        # validate/test: the checkpoint's epoch and step, its record and the results file (`results.stage_file`).
        self.ckpt_facts: dict = {}
        self.result_record: dict | None = None
        self.result_file: str | None = None
        self.given_root_dir: str | None = None  # trainer.default_root_dir as given, for a fit without a logger
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        batch_counts_as_ints(parser)  # --trainer.limit_train_batches 1 is one batch, as in Lightning
        # Best checkpoint (by val/acc1) under <run dir>/checkpoints/ (top-k: k files, best.ckpt the best of
        # them; `BestCheckpoint`). last.ckpt is step_checkpoint's.
        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/acc1",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best",
                "checkpoint.save_last": False,  # last.ckpt is written by step_checkpoint, where it resumes exactly
                "checkpoint.enable_version_counter": False,  # best.ckpt is replaced, not versioned
            }
        )
        # last.ckpt every N optimiser steps, at every epoch boundary and on SIGTERM/SIGINT (atomically), so
        # that a killed run loses at most N steps: `mixer fit ... --ckpt_path last` continues it exactly.
        parser.add_lightning_class_args(ResumeCheckpoint, "step_checkpoint")
        parser.set_defaults(
            {
                "step_checkpoint.every_n_train_steps": 500,
                "step_checkpoint.save_top_k": 0,
                "step_checkpoint.save_last": True,
                "step_checkpoint.enable_version_counter": False,
            }
        )
        parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
        # images/s, MFU and the data-wait fraction (`mixer_lightning.callbacks.throughput`); --throughput.peak_flops
        # for MFU on a GPU the built-in table does not know.
        parser.add_lightning_class_args(ThroughputMonitor, "throughput")
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        # Progress: Lightning's bar in a terminal, a plain line every N steps in a log (`mixer_lightning.cli.console`).
        parser.add_argument(
            "--progress.mode",
            type=Literal["auto", "bar", "lines"],
            default="auto",
            help="auto: the progress bar in a terminal, plain lines when stdout is a file or pipe",
        )
        parser.add_argument(
            "--progress.every_n_steps",
            type=int,
            default=50,
            help="lines mode: a line every N optimiser steps (and one per validation)",
        )
        for name in LINKED_FROM_DATA:
            parser.link_arguments("data", f"model.{name}", compute_fn=attrgetter(name), apply_on="instantiate")

    # ------------------------------------------------------------------------------ parsing

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """The arguments completed (`evaluation_arguments`), the config files put before the flags
        (`configs_first`: a flag wins wherever it stands) and checked before
        jsonargparse reads them; then ``--ckpt_path`` resolved and checked (`resolve_checkpoint`) before
        Lightning reads the checkpoint's hyper-parameters, which it does right after this."""
        given = sys.argv[1:] if args is None else args  # `run` puts the arguments in sys.argv
        if isinstance(given, (list, tuple)):
            completed = configs_first(evaluation_arguments(list(given)))
            if args is None:  # where Lightning's DDP launcher finds them for the other processes
                sys.argv[1:] = completed
            else:
                args = completed
            given = completed
        listed = list(given) if isinstance(given, (list, tuple)) else []
        self.explicit_data = explicit_data_arguments(check_config_files(listed), listed)
        self.written_callables = None  # temporary (issue 44): the optimizer default None makes carried_over moot
        if self.written_callables is not None and any(str(a).startswith("--print_config") for a in listed):
            # --print_config prints while parsing: the defaults a switch carried over are settled as flags first
            settled = carried_over.settled_flags(parser, listed, self.written_callables)
            if args is None:
                sys.argv[1:] = [*sys.argv[1:], *settled]
            else:
                args = [*args, *settled]
        parser_cache.remember_parsers(parser)  # for `mixer COMMAND --misspelt.flag` without Lightning
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as error:
            command = given[0] if given and given[0] in SUBCOMMANDS else None
            suggestion = suggest_argument(error, subcommand_parser(parser, command) or parser, command)
            if suggestion is None:
                raise
            raise suggestion from error
        self.kept = resolve_checkpoint(self.config, self.ckpt_facts)
        checks.check_seed(self.config)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        restore_arguments(config, self.kept)  # Lightning re-parsed the model from the checkpoint
        carried_over.reset_carried_over(config, self.written_callables, announce=first_process())
        if self.subcommand == "fit" and first_process():
            check_pinned_version(config)
            self.claim.loggerless = loggerless_run(config, **TRAINER_DEFAULTS["logger"]["init_args"])
            if self.claim.loggerless is not None:  # the trainer's folder; the saved config keeps the user's value
                self.given_root_dir = config.trainer.get("default_root_dir")
                config.trainer.default_root_dir = str(self.claim.loggerless)
        checks.check_trainer_settings(config)
        if not config.get("ckpt_path"):  # a checkpoint's run recorded the preprocessing it used
            apply_pretrained_defaults(config, self.explicit_data)
        if self.subcommand in EVALUATIONS:
            self.evaluated_run = evaluate_in_run(config)
        if first_process() and self.evaluated_run is None:
            check_run_root(config, self.claim.loggerless)
        check_xla_installed(config)

    def trainer_callbacks(self, config: dict[str, Any], callbacks: list) -> list:
        """The project's console (`mixer_lightning.cli.console`: the run header, plain-text progress in
        logs), the data facts written into checkpoints (fit), and no checkpoint callbacks when nothing is
        trained (validate/test/predict: they would only restore and warn about their state, "dirpath has
        changed")."""
        command = self.subcommand
        settings = self.config_init[command] if command else self.config_init
        if config.get("logger") is False or config.get("logger") == []:
            # --trainer.logger false: nothing to log the learning rate to (Lightning refuses the monitor then).
            callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
        if command in EVALUATIONS:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
            given = config.get("callbacks")
            given = given if isinstance(given, list) else [] if given is None else [given]
            config["callbacks"] = [c for c in given if not isinstance(c, ModelCheckpoint)]
            config["enable_checkpointing"] = False
        else:
            seed = settings.get("seed_everything")  # the number Lightning seeded with (false: not seeded)
            seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
            callbacks = [*callbacks, DataFacts(seed), SlurmRequeue()]  # SLURM: `mixer_lightning.safety.slurm`
        ckpt = settings.get("ckpt_path")
        self.header = RunHeader(
            command or "",
            ckpt_path=ckpt if ckpt and ckpt not in SPECIAL_CKPT_PATHS else None,
            results=results.RESULTS.get(command or ""),
        )
        callbacks.append(self.header)
        callbacks.append(SignalStops())
        progress = settings.get("progress") or {}
        if config.get("enable_progress_bar", True) is not False:
            line = progress_callback(progress.get("mode") or "auto", progress.get("every_n_steps") or 50)
            mine = [c for c in (config.get("callbacks") or []) if isinstance(c, ProgressBar)]
            if line is not None and not mine:
                callbacks.append(line)
        return callbacks

    def instantiate_trainer(self, **kwargs):
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except (ValueError, MisconfigurationException) as error:  # e.g. FSDP on the CPU, a GPU that is not there
            raise checks.trainer_error(error) from None
        except ImportError as error:  # an accelerator, strategy or plugin whose package is missing
            raise ConfigError(
                "trainer",
                f"a package it needs is not installed: {' '.join(str(error).split())}",
                "install it, or choose another accelerator/strategy (e.g. --config configs/trainer/cpu.yaml)",
            ) from None
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not FSDP's sharded IO, nor a user's
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    # ------------------------------------------------------------------------------ running

    def _ckpt_path(self) -> Any:
        return self.config_init[self.subcommand].get("ckpt_path")

    def _claim(self) -> None:
        resuming = self.config[self.subcommand].get("ckpt_path") if self.subcommand == "fit" else None
        self.claim.claim(self.trainer, self.subcommand, self.evaluated_run, resuming)

    def _parse_ckpt_path(self) -> None:  # temporary (issue 44): legacy hyper-parameters upgraded first
        import torch

        from mixer_lightning.models.registry import upgrade_hparams

        command = self.config.get("subcommand")
        path = self.config[command].get("ckpt_path") if command else None
        if not path or not Path(path).is_file():
            return
        hparams = torch.load(path, weights_only=True, map_location="cpu").get("hyper_parameters") or {}
        hparams = upgrade_hparams(hparams)
        hparams.pop("_instantiator", None)
        if hparams:
            self.config = self.parser.parse_object({command: {"model": hparams}}, self.config)

    def before_fit(self) -> None:
        checks.check_ckpt_file(self._ckpt_path(), self.model)
        checks.check_optimizers(self.model, str(self.trainer.precision))
        self._claim()
        if self.claim.loggerless is not None:
            self.config[self.subcommand].trainer.default_root_dir = self.given_root_dir

    def _choose_results(self) -> None:
        """The checkpoint's record and the results file (never another checkpoint's), shown in the header."""
        if first_process():
            self.result_record = results.checkpoint_record(self._ckpt_path(), self.claim.run_dir, self.ckpt_facts)
            self.result_file = results.stage_file(
                self.claim.run_dir,
                self.subcommand,
                self.result_record,
                results.limited_evaluation(self.trainer, self.subcommand),
            )
            if self.header is not None:
                self.header.results = self.result_file

    def _saved_config(self) -> str | None:
        return next((c.config_filename for c in self.trainer.callbacks if isinstance(c, SaveConfig)), None)

    def before_validate(self) -> None:
        checks.check_ckpt_file(self._ckpt_path(), self.model)
        self._claim()
        self._choose_results()

    def before_test(self) -> None:
        checks.check_ckpt_file(self._ckpt_path(), self.model)
        self._claim()
        self._choose_results()

    def before_predict(self) -> None:
        checks.check_ckpt_file(self._ckpt_path(), self.model)
        checks.check_prediction_output(self.trainer)
        self._claim()
        results.choose_prediction_file(self.trainer, self.datamodule, self.claim.run_dir, self.header)

    def after_fit(self) -> None:
        results.write_fit_summary(self.trainer)

    def after_validate(self) -> None:
        results.write_stage_metrics(
            self.trainer, "validate", self.result_file, self.result_record, self._saved_config()
        )

    def after_test(self) -> None:
        results.write_stage_metrics(self.trainer, "test", self.result_file, self.result_record, self._saved_config())


def check_xla_installed(config: Any) -> None:
    """``accelerator: tpu`` (configs/trainer/tpu.yaml) or an XLA strategy without torch_xla: one line before
    the model is built (Lightning raises a ModuleNotFoundError from the Trainer, after it)."""
    trainer = config.trainer
    named = [
        str(getattr(value, "class_path", None) or value)
        for value in (trainer.get("accelerator"), trainer.get("strategy"))
        if value is not None
    ]
    xla = [n for n in named if n.lower() == "tpu" or n.lower().startswith("xla") or "XLA" in n.rsplit(".", 1)[-1]]
    if xla and importlib.util.find_spec("torch_xla") is None:
        import torch

        raise ConfigError(
            "trainer.accelerator" if xla[0] == named[0] else "trainer.strategy",
            f"{xla[0]!r} needs torch_xla, which is not installed",
            f"on a TPU VM, pip install 'torch_xla[tpu]' matching torch {torch.__version__.split('+')[0]}; elsewhere "
            "use another accelerator (e.g. --config configs/trainer/cpu.yaml instead of configs/trainer/tpu.yaml)",
        )


class SignalStops(Callback):
    """The moment a stop by signal outside training names (`mixer_lightning.cli.signals`), and the other
    processes of a DDP launch stopped with this one, as Lightning does for a KeyboardInterrupt."""

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        stop_context("after training ended (its checkpoints are saved)")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if not isinstance(exception, (Stopped, Interrupted)):
            # Lightning tears a failed run down (loggers, DataLoader workers) before it re-raises: a signal
            # there cuts that short, and its line must name the failure it hides, not the moment before training.
            stop_context(f"while the run was ending on an error ({error_summary(exception)})")
        launcher = trainer.strategy.launcher
        if isinstance(exception, Interrupted) and hasattr(launcher, "procs"):  # the processes this one started
            launcher.kill(signal.SIGTERM if sys.platform == "win32" else signal.SIGKILL)


def run(argv: list[str]) -> None:
    """``mixer fit|validate|test|predict ...`` with the arguments `argv`."""
    # A stop by signal before training (setup, the sanity check) or before an evaluation's results: one line.
    stop_context(
        "before training started (nothing new to resume)" if argv[0] == "fit" else "before its results were written"
    )
    # LightningCLI reads the arguments from sys.argv, where Lightning's DDP launcher also finds them
    # to start the other processes (`[python, sys.argv[0], *sys.argv[1:]]`): they must be there.
    saved_argv, sys.argv = sys.argv, [sys.argv[0], *argv]
    claim = RunClaim()
    try:
        with warnings.catch_warnings():  # the warning filters a run adds (quiet_libraries, ...) end with it
            quiet_libraries()
            MixerCLI(
                ClassifierModule,
                LightningDataModule,  # ImageDataModule, or PredictionData (image files, facts from a checkpoint)
                subclass_mode_model=False,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # the optimiser and schedule are model arguments
                save_config_callback=SaveConfig,
                trainer_defaults=TRAINER_DEFAULTS,
                seed_everything_default=0,
                parser_kwargs={
                    "description": DESCRIPTION,
                    "epilog": "project commands (mixer COMMAND --help):\n" + summary(),
                    "prog": "mixer",
                    "formatter_class": HelpFormatter,
                    "exit_on_error": False,
                    "allow_abbrev": False,
                    # Argument errors are raised (one line, `mixer_lightning.errors.translate_library_error`),
                    # not printed after the whole usage text; no abbreviations (--trainer.max_epoch is a
                    # mistake, said so with a did-you-mean, not silently --trainer.max_epochs).
                    **{name: {"exit_on_error": False, "allow_abbrev": False} for name in SUBCOMMANDS},
                },
                claim=claim,
            )
        end_process_group()
    except BaseException:
        claim.remove_if_empty()  # a run that failed before its first checkpoint leaves no empty version_N/
        claim.remove_evaluation_config()  # nor a failed evaluation its config.<command>N.yaml in the run
        raise
    finally:
        claim.release()
        sys.argv = saved_argv
