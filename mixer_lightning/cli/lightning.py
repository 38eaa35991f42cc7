"""``mixer fit|validate|test|predict``: `MixerCLI`, a LightningCLI on its public hooks.

What it adds to Lightning's: the project's callbacks (best and resumable checkpoints, the run header and
plain progress lines, throughput, SLURM requeue), the data facts linked into the model, and a `Run`
(`mixer_lightning.callbacks.run`), resolved once from the parsed config: ``--ckpt_path last`` (the latest run,
resumed in its own directory), evaluations of a checkpoint written into its run with results that name the
checkpoint, one writer per run, and no code from configs or checkpoints (the import policy, `weights_only`).
Imported only when one of these commands runs: the project's own commands start without Lightning.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import sys
import warnings
from contextlib import nullcontext
from typing import Any, Literal

from jsonargparse.typing import PositiveFloat, PositiveInt
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_only

from mixer_lightning.callbacks import DataFacts, PredictionWriter
from mixer_lightning.callbacks.checkpoints import (
    BEST_NAME,
    AtomicCheckpointIO,
    BestCheckpoint,
    ResumeCheckpoint,
    monitor_mode,
)
from mixer_lightning.callbacks.console import RunHeader, line_progress
from mixer_lightning.callbacks.fingerprint import RunFingerprint
from mixer_lightning.callbacks.run import EVALUATIONS, Run, fit_summary, write_json
from mixer_lightning.callbacks.slurm import SlurmRequeue, requeue_on_signal
from mixer_lightning.callbacks.throughput import SpeedMonitor
from mixer_lightning.cli.defaults import completed_arguments, config_keys, pretrained_data_defaults
from mixer_lightning.commands import HelpFormatter, summary
from mixer_lightning.commands.quiet import quiet_libraries
from mixer_lightning.data import ImageDataModule  # (also the data module's short class name in configs)
from mixer_lightning.errors import ConfigError
from mixer_lightning.errors import argument_error as one_line_argument_error
from mixer_lightning.hardware import set_threads, threads_of_command
from mixer_lightning.safety.atomic import check_output_file
from mixer_lightning.safety.distributed import end_process_group
from mixer_lightning.seam import batch_counts_as_ints, option_names
from mixer_lightning.tasks import ClassifierModule

LINKED_FROM_DATA = ("num_classes", "image_size", "in_chans")  # what the network must agree with
TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "mixer", "default_hp_metric": False},
    },
    "enable_model_summary": False,  # the run header names the model and its parameter count
}


class MixerCLI(LightningCLI):
    """LightningCLI with the project's callbacks and its `Run` (module docstring), which the hooks hand on."""

    def __init__(self, *args: Any, run: Run, **kwargs: Any) -> None:
        self.run = run
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        batch_counts_as_ints(parser)  # --trainer.limit_train_batches 1 is one batch, as in Lightning
        # best.ckpt by val/acc1 (top-k: k files, best.ckpt the best; mode: `monitor_mode`); last.ckpt is step_checkpoint's,
        # written only where a resumed run continues exactly, and on SIGTERM: `mixer fit ... --ckpt_path last` goes on.
        parser.add_class_arguments(BestCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/acc1", "checkpoint.mode": None, "checkpoint.filename": "best"})
        parser.set_defaults({"checkpoint.enable_version_counter": False})
        parser.add_class_arguments(ResumeCheckpoint, "step_checkpoint")
        parser.add_class_arguments(LearningRateMonitor, "lr_monitor")
        parser.add_class_arguments(SpeedMonitor, "throughput")
        parser.add_class_arguments(PredictionWriter, "prediction_writer")
        parser.add_argument("--progress.mode", type=Literal["auto", "bar", "lines"], default="auto",
                            help="auto: the progress bar in a terminal, plain lines when stdout is a file or pipe")  # fmt: skip
        parser.add_argument("--progress.every_n_steps", type=PositiveInt, default=50, help="lines: one every N steps")
        parser.add_argument("--threads", type=PositiveInt | None, default=None,
                            help="torch's CPU threads per process (default: $OMP_NUM_THREADS if set, else the usable "
                            "CPUs shared among this machine's processes, less the cores other work keeps busy)")  # fmt: skip
        parser.add_argument("--progress.every_n_seconds", type=PositiveFloat, default=60.0,
                            help="lines: one as soon as this long has passed since the last (a slow epoch)")  # fmt: skip
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")

    def parse_arguments(self, parser: Any, args: Any) -> None:
        try:
            super().parse_arguments(parser, args)
        except argparse.ArgumentError as error:
            raise argument_error(error, self, sys.argv[1:] if args is None else list(args)) from None
        self.run.resolve(self.config.subcommand, self.config[self.config.subcommand])

    def before_instantiate_classes(self) -> None:
        config = self.config[self.config.subcommand]
        if not self.run.configure(config):
            self.save_config_callback = None  # no run to record it in: not a config.yaml in the working directory
        self.save_config_kwargs["config_filename"] = self.run.config_name
        best = config.checkpoint  # top-k under one fixed name: each file would replace the one before
        best.mode = best.mode or monitor_mode(best.monitor)
        if best.save_top_k not in (0, 1) and "{" not in (best.filename or "{") and best.filename != BEST_NAME:
            raise ConfigError("checkpoint.filename", f"{best.filename!r} names one file for {best.save_top_k} checkpoints",
                              "put {epoch} in it, or keep the default")  # fmt: skip
        if not config.get("ckpt_path"):
            pretrained_data_defaults(config)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        command, config = self.subcommand, self.config_init[self.subcommand]
        given = config.trainer.get("callbacks") or []
        ours = [RunHeader(command, ckpt_path=config.get("ckpt_path"))]
        if config.trainer.get("enable_progress_bar") is not False:
            ours += line_progress(config.progress)
        if command == "fit":
            seed = config.get("seed_everything")  # the int LightningCLI seeded with (False: not seeded)
            seed = None if isinstance(seed, bool) else seed
            ours += [RunFingerprint(self.run.fingerprint, config.get("ckpt_path"), seed), config.checkpoint]
            ours += [config.step_checkpoint, config.throughput, DataFacts(seed), SlurmRequeue()]
            ours += [config.lr_monitor] if config.trainer.get("logger") not in (False, None, []) else []
        elif command == "predict":
            ours.append(config.prediction_writer)
        try:
            trainer = super().instantiate_trainer(
                **kwargs, callbacks=[*(given if isinstance(given, list) else [given]), *ours]
            )
        except (ValueError, MisconfigurationException) as error:  # FSDP on a CPU, a GPU that is not there
            raise ConfigError("trainer", " ".join(str(error).split()), "see `mixer fit --help`") from None
        # SLURM gives each task its own CPUs (--cpus-per-task); Lightning's launcher and torchrun share the machine's
        shared = 1 if isinstance(getattr(trainer.strategy, "cluster_environment", None), SLURMEnvironment) else None
        set_threads(config.get("threads"), shared or trainer.num_devices, print if rank_zero_only.rank == 0 else None)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not FSDP's sharded IO, nor a user's own
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    # ---------------------------------------------------------------------------------------------- running

    def before_fit(self) -> None:
        self.run.start(self.trainer, self.model)

    def after_fit(self) -> None:
        trainer, best, run_dir = self.trainer, self.trainer.checkpoint_callback, self.run.directory
        if trainer.is_global_zero and not trainer.fast_dev_run and run_dir:
            summary = fit_summary(trainer, metrics(trainer, "val"), run_dir)
            write_json(run_dir / "fit_summary.json", summary)
            if best is not None and best.best_model_path:
                print(f"Best checkpoint ({best.monitor} = {summary['best_score']:.4f}): {best.best_model_path}")
            if summary.get("test_checkpoint"):
                why = " (best.ckpt was chosen on the test split)" if summary["validated_on"] == "test" else ""
                print(f"Test it: mixer test --ckpt_path {run_dir / summary['test_checkpoint']}{why}", flush=True)

    def before_predict(self) -> None:
        self.run.start(self.trainer, self.model)
        writer = next((c for c in self.trainer.callbacks if isinstance(c, PredictionWriter)), None)
        if writer is not None and writer.output:  # another file is never replaced unless told
            check_output_file(
                writer.output, "prediction_writer.output", writer.overwrite, "--prediction_writer.overwrite true"
            )

    before_validate = before_test = before_fit

    def after_validate(self) -> None:
        header = next((c for c in self.trainer.callbacks if isinstance(c, RunHeader)), None)
        stage = "val" if self.subcommand == "validate" else "test"
        self.run.finish(self.trainer, metrics(self.trainer, stage), header.evaluated if header else None)

    after_test = after_validate


def metrics(trainer: Any, stage: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(f"{stage}/")}


def argument_error(error: argparse.ArgumentError, cli: Any, args: list[str]) -> ConfigError:
    """jsonargparse's error in its own words (`errors.argument_error`) on the flag or config key it names; a key
    the command takes in no form gets the closest one it does (``trainer.max_epoch``: ``trainer.max_epochs``;
    ``model.channels``: ``model.net.channels``; ``model.init_args.optimizer``: ``model.optimizer``, the model being
    no subclass). Keys under a class whose arguments are not listed here (``trainer.logger``) are jsonargparse's."""
    command = args[0] if args and args[0] in ("fit", *EVALUATIONS) else None
    taken = option_names(cli, command) if command else []
    line = one_line_argument_error(error, args, taken)
    if line.field not in {arg[2:].split("=")[0] for arg in args}:  # not a flag's (--k v, --k=v): a --config key?
        in_file = one_line_argument_error(error, [f"--{key}" for key in config_keys(args)])
        line = in_file if in_file.field != "arguments" else line
    candidates = [*taken, *(f"model.net.{name}" for name in class_arguments("model.net"))]
    candidates += [f"data.{name}" for name in class_arguments("data")]
    word, parts = line.field, line.field.split(".")
    # init_args follows a class (--data.init_args.x: an option with none under it); after a group (model), a mistake
    kept: list[str] = []
    for part in parts:
        group = ".".join(kept)
        kept += [] if part == "init_args" and any(key.startswith(f"{group}.") for key in taken) else [part]
    short = ".".join(kept)
    bare = ".".join(part for part in parts if part != "init_args")
    listed = {key.rsplit(".", 1)[0] for key in candidates}  # the groups whose arguments are listed
    opened = [key for key in taken if bare.startswith(f"{key}.") and key not in listed]  # jsonargparse's to judge
    close = [short] if short != word else []
    if not close and not opened and word != "arguments" and bare not in candidates:
        close = difflib.get_close_matches(bare, candidates, n=1)
        if not close and "." in bare:  # a misspelt group: dataa.batch_size
            head, _, rest = bare.partition(".")
            group = difflib.get_close_matches(head, sorted({key.split(".")[0] for key in candidates}), n=1)
            close = [f"{group[0]}.{rest}"] if group and group[0] != head else []
    fix = f"see `mixer {command} --help`" if command else "see `mixer --help`"
    return ConfigError(word, line.problem, f"did you mean {close[0]!r}? {fix}" if close and close[0] != word else fix)


def class_arguments(group: str) -> list[str]:
    """The arguments of the classes a config gives as `group`: every registered family's network (``model.net``)
    or the project's data module (``data``)."""
    if group == "data":
        return list(inspect.signature(ImageDataModule).parameters)
    from mixer_lightning.models import get_entry, list_models

    classes = {get_entry(name).constructor for name in list_models()}
    return sorted({name for cls in classes for name in inspect.signature(cls).parameters})


def run(argv: list[str]) -> None:
    """``mixer fit|validate|test|predict`` with `argv`. LightningCLI reads sys.argv, where Lightning's DDP launcher
    also finds the arguments to start the other processes with: they are put there."""
    run = Run()
    saved, sys.argv = sys.argv, [sys.argv[0], *completed_arguments(argv, run)]
    try:
        # Under SLURM, the requeue signal outside training (data being indexed, the fit's files written) too.
        with (
            warnings.catch_warnings(),
            threads_of_command(),
            requeue_on_signal() if argv[:1] == ["fit"] else nullcontext(),
        ):
            quiet_libraries()
            MixerCLI(
                ClassifierModule,
                LightningDataModule,  # ImageDataModule, or PredictionData (image files; facts from a checkpoint)
                subclass_mode_model=False,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # the optimiser and schedule are model arguments
                trainer_defaults=TRAINER_DEFAULTS,
                seed_everything_default=0,
                parser_kwargs={
                    "prog": "mixer",
                    "description": "mixer-lightning: MLP-Mixers and their wide, sparse relatives in Lightning",
                    "epilog": "project commands (mixer COMMAND --help):\n" + summary(),
                    "formatter_class": HelpFormatter,
                    **{name: {"exit_on_error": False, "allow_abbrev": False} for name in ("fit", *EVALUATIONS)},
                    "exit_on_error": False,
                    "allow_abbrev": False,
                },
                run=run,
            )
        end_process_group()
    finally:
        for lock in run.held:
            lock.release()
        sys.argv = saved
