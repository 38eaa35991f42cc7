"""``mixer fit|validate|test|predict``: `MixerCLI`, a LightningCLI on its public hooks.

What it adds to Lightning's: the project's callbacks (best and resumable checkpoints, the run header and
plain progress lines, throughput, SLURM requeue), the data facts linked into the model, ``--ckpt_path last``
(the latest run, resumed in its own directory), evaluations of a checkpoint written into its run with
results that name the checkpoint, one writer per run, and no code from configs or checkpoints (the import
policy, `weights_only`). Imported only when one of these commands runs: the project's own commands start
without Lightning.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import sys
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

from jsonargparse.typing import PositiveFloat, PositiveInt
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from mixer_lightning.callbacks import DataFacts, PredictionWriter
from mixer_lightning.callbacks.checkpoints import (
    BEST_NAME,
    RUN_KEY,
    AtomicCheckpointIO,
    BestCheckpoint,
    ResumeCheckpoint,
    RunFingerprint,
)
from mixer_lightning.callbacks.console import RunHeader, line_progress
from mixer_lightning.callbacks.slurm import (
    SlurmRequeue,
    command_key,
    job_id,
    mark_run,
    requeue_on_signal,
    requeued_run,
)
from mixer_lightning.callbacks.throughput import SpeedMonitor
from mixer_lightning.cli import runs
from mixer_lightning.cli.defaults import EVALUATIONS, completed_arguments, pretrained_data_defaults
from mixer_lightning.cli.entry import given_keys
from mixer_lightning.commands import HelpFormatter, summary
from mixer_lightning.commands.quiet import quiet_libraries
from mixer_lightning.data import ImageDataModule  # (also the data module's short class name in configs)
from mixer_lightning.errors import ConfigError
from mixer_lightning.errors import argument_error as one_line_argument_error
from mixer_lightning.hardware import set_threads, threads_of_command
from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import check_output_file, remove_orphans
from mixer_lightning.safety.distributed import end_process_group
from mixer_lightning.seam import batch_counts_as_ints, ignore_warning, option_names
from mixer_lightning.tasks import ClassifierModule
from mixer_lightning.tasks.loading import describe_mismatch, read_checkpoint

LINKED_FROM_DATA = ("num_classes", "image_size", "in_chans")  # what the network must agree with
TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "mixer", "default_hp_metric": False},
    },
    "enable_model_summary": False,  # the run header names the model and its parameter count
}


class MixerCLI(LightningCLI):
    """LightningCLI with the project's callbacks and run directories (module docstring). `held` collects the
    run locks this command takes, released by `run` however the command ends."""

    def __init__(self, *args: Any, held: list, **kwargs: Any) -> None:
        self.held, self.evaluated, self.record, self.limited = held, None, None, False
        self.command_key = ""  # `slurm.command_key` of a fit's config as given (before a resume changes it)
        self.given_optimiser: dict = {}  # the config's optimiser and schedule, before the checkpoint's replace them
        self.resumed_run = None  # the fingerprint of the checkpoint a fit resumes (`RunFingerprint`)
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        batch_counts_as_ints(parser)  # --trainer.limit_train_batches 1 is one batch, as in Lightning
        # best.ckpt by val/acc1 (top-k: k files, best.ckpt the best); last.ckpt is step_checkpoint's, written only
        # where a resumed run continues exactly, and on SIGTERM: `mixer fit ... --ckpt_path last` goes on.
        parser.add_class_arguments(BestCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/acc1", "checkpoint.mode": "max", "checkpoint.filename": "best"})
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
        config = self.config[self.config.subcommand]
        if self.config.subcommand == "fit":
            self.command_key = command_key(config)
            if config.get("ckpt_path") in (None, "last"):
                resume_requeued_run(config, self.command_key)
        # Lightning parses the checkpoint's hyper-parameters over the model next, the optimiser's included: a
        # resume would drop a changed --model.optimizer.lr unseen. The config's are kept to be compared.
        self.given_optimiser = {key: config.model.get(key) for key in ("optimizer", "lr_scheduler")}
        if config.get("ckpt_path") == "last":
            logger = logger_args(config, "'last' needs a logger with a save_dir to find the run in")
            experiment = Path(logger.save_dir) / str(logger.get("name") or "")
            version = logger.get("version")
            version = version if isinstance(version, str) or version is None else f"version_{version}"
            config.ckpt_path = str(runs.find_last_run(experiment, version))
        if config.get("ckpt_path"):
            # Missing, damaged or untrusted: one line before Lightning reads it; kept until the model exists.
            checkpoint = read_checkpoint(config.ckpt_path)
            self.checkpoint_weights = (config.ckpt_path, checkpoint["state_dict"])
            self.resumed_run = checkpoint.get(RUN_KEY)

    def check_checkpoint_fits(self) -> None:
        """A checkpoint of another model or data (10 classes tested on 3) is one line, not torch's size table."""
        path, weights = self.__dict__.pop("checkpoint_weights", (None, None))
        net = {key[len("net.") :]: value for key, value in (weights or {}).items() if key.startswith("net.")}
        mismatch = describe_mismatch(self.model.net, net) if weights is not None else None  # the network only
        if mismatch:
            raise ConfigError("ckpt_path", f"{path!r} does not fit the model and data configured: {mismatch}",
                              "give the config it was trained with (its run's config.yaml)")  # fmt: skip

    def before_instantiate_classes(self) -> None:
        command, config = self.config.subcommand, self.config[self.config.subcommand]
        if command == "fit" and config.get("ckpt_path"):  # built as given; `RunFingerprint` compares them
            for key, given in self.given_optimiser.items():
                config.model[key] = given
        if config.get("weights_only") is None:
            config.weights_only = True  # a checkpoint is data: tensors and plain containers, never code
        ckpt = config.get("ckpt_path")
        evaluated = runs.run_dir_of_checkpoint(ckpt) if ckpt and command in EVALUATIONS else None
        if command in EVALUATIONS:  # weights only: the callbacks that wrote the checkpoint are a fit's business
            ignore_warning("checkpoint_callbacks")
        if evaluated is not None:  # the results go into the checkpoint's own run; test/* to its logger too
            logger = logger_args(config) if command == "test" else None  # (val/* would join the fit's curves)
            experiment = Path(logger.save_dir, str(logger.get("name") or "")) if logger is not None else None
            if experiment is not None and experiment.resolve() == evaluated.resolve().parent:
                logger.version = evaluated.name
            else:
                config.trainer.logger = False
            config.trainer.default_root_dir = str(evaluated)
            self.save_config_kwargs["config_filename"] = runs.config_name(evaluated, command)
        elif command == "fit" and ckpt and runs.run_dir_of_checkpoint(ckpt) is not None:
            run = runs.run_dir_of_checkpoint(ckpt)  # a resumed run goes on in its own directory
            logger = logger_args(config)
            if logger is not None and Path(logger.save_dir) / str(logger.get("name") or "") == run.parent:
                logger.version = run.name
                self.save_config_kwargs["config_filename"] = runs.config_name(run, command)
        elif command in EVALUATIONS and config.trainer.get("logger") in (False, None, []):
            self.save_config_callback = None  # no run to record it in: not a config.yaml in the working directory
        self.evaluated = evaluated
        best = config.checkpoint  # top-k under one fixed name: each file would replace the one before
        if best.save_top_k not in (0, 1) and "{" not in (best.filename or "{") and best.filename != BEST_NAME:
            raise ConfigError("checkpoint.filename", f"{best.filename!r} names one file for {best.save_top_k} checkpoints",
                              "put {epoch} in it, or keep the default")  # fmt: skip
        if not ckpt:
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
            ours += [RunFingerprint(self.resumed_run, config.get("ckpt_path"), seed), config.checkpoint]
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
        self.check_checkpoint_fits()
        if self.trainer.fast_dev_run:  # no logger, no run directory
            return
        run_dir = Path(run_directory(self.trainer))  # a broadcast under DDP: every process asks
        if not self.trainer.is_global_zero:
            return
        resuming = self.config_init.fit.get("ckpt_path")
        if (run_dir / "config.yaml").exists() and not resuming:
            raise ConfigError(
                "trainer.logger.init_args.version",
                f"{str(run_dir)!r} holds a run already; it is not overwritten",
                "resume it with --ckpt_path last, or choose another version (or none: the next free one)",
            )
        if not run_dir.exists():  # a run that fails while it is set up leaves no directory behind
            self.held.append(runs.NewRun(run_dir))
        if run_dir.is_dir():  # a run resumed, or a version pinned: one writer at a time
            self.held.append(runs.lock_run(run_dir))
            for folder in (run_dir, run_dir / "checkpoints"):
                remove_orphans(folder)
        mark_run(run_dir, self.command_key)  # under SLURM: by which the requeued job's same command finds this run
        if resuming:
            ignore_warning("checkpoint_folder")

    def after_fit(self) -> None:
        trainer, best = self.trainer, self.trainer.checkpoint_callback
        log_dir = run_directory(trainer)  # a broadcast under DDP: every process asks
        if trainer.is_global_zero and not trainer.fast_dev_run and log_dir:
            summary = runs.fit_summary(trainer, metrics(trainer, "val"), Path(log_dir))
            runs.write_json(Path(log_dir) / "fit_summary.json", summary)
            if best is not None and best.best_model_path:
                print(f"Best checkpoint ({best.monitor} = {summary['best_score']:.4f}): {best.best_model_path}")
            if summary.get("test_checkpoint"):
                why = " (best.ckpt was chosen on the test split)" if summary["validated_on"] == "test" else ""
                print(f"Test it: mixer test --ckpt_path {Path(log_dir, summary['test_checkpoint'])}{why}", flush=True)

    def _evaluation(self, command: str) -> None:
        """Choose the results file: in the evaluated run, this checkpoint's (`runs.results_name`)."""
        ckpt = self.config_init[command].get("ckpt_path")
        self.record = runs.checkpoint_record(ckpt, self.evaluated) if ckpt and Path(ckpt).is_file() else None
        limit = getattr(self.trainer, "limit_val_batches" if command == "validate" else "limit_test_batches")
        self.limited = not (isinstance(limit, float) and limit == 1.0)
        folder = self.evaluated or Path(run_directory(self.trainer) or self.trainer.default_root_dir)
        self.results = folder / runs.results_name(folder, command, self.record, self.limited)

    def _write_results(self, command: str) -> None:
        stage = "val" if command == "validate" else "test"
        header = next((c for c in self.trainer.callbacks if isinstance(c, RunHeader)), None)
        content = {**metrics(self.trainer, stage), **((header.evaluated or {}) if header else {})}
        saved = self.save_config_kwargs.get("config_filename", "config.yaml") if self.evaluated else None
        content.update(checkpoint=self.record, config=saved)
        content["partial"] = self.limited if content.get("partial") is None else content["partial"]
        if self.trainer.is_global_zero and not self.trainer.fast_dev_run:
            runs.write_json(self.results, content)
            print(f"{'Validation' if stage == 'val' else 'Test'} metrics: {self.results}", flush=True)

    def before_predict(self) -> None:
        self.check_checkpoint_fits()
        writer = next((c for c in self.trainer.callbacks if isinstance(c, PredictionWriter)), None)
        if writer is not None and writer.output:  # another file is never replaced unless told
            check_output_file(
                writer.output, "prediction_writer.output", writer.overwrite, "--prediction_writer.overwrite true"
            )

    def before_validate(self) -> None:
        self.check_checkpoint_fits()
        self._evaluation("validate")

    def before_test(self) -> None:
        self.check_checkpoint_fits()
        self._evaluation("test")

    def after_validate(self) -> None:
        self._write_results("validate")

    def after_test(self) -> None:
        self._write_results("test")


def metrics(trainer: Any, stage: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(f"{stage}/")}


def logger_args(config: Any, problem: str | None = None) -> Any:
    """The init args of the run's versioned logger (TensorBoard, CSV: a ``save_dir``), or None; with `problem`,
    None is a `ConfigError` on ``ckpt_path``."""
    init_args = getattr(config.trainer.get("logger"), "init_args", None)
    if init_args is not None and init_args.get("save_dir") is not None:
        return init_args
    if problem:
        raise ConfigError("ckpt_path", problem, "give the path of the checkpoint instead")
    return None


def resume_requeued_run(config: Any, key: str) -> None:
    """A SLURM job requeued after a preemption resumes the run this command (its config's digest `key`) made in
    the job's first start, from its last.ckpt."""
    logger = logger_args(config)
    run = requeued_run(Path(logger.save_dir) / str(logger.get("name") or ""), key) if logger is not None else None
    if run is not None and (run / "checkpoints" / "last.ckpt").is_file():
        logger.version, config.ckpt_path = run.name, str(run / "checkpoints" / "last.ckpt")
        rank_zero_info(f"SLURM job {job_id()} requeued: resuming {run}")


def argument_error(error: argparse.ArgumentError, cli: Any, args: list[str]) -> ConfigError:
    """jsonargparse's error in its own words (`errors.argument_error`) on the flag it names; a flag the command
    takes in no form gets the closest one it does (``trainer.max_epoch``: ``trainer.max_epochs``; ``model.channels``:
    ``model.net.channels``; ``model.init_args.optimizer.lr``: ``model.optimizer.lr``, the model is no subclass)."""
    command = args[0] if args and args[0] in ("fit", *EVALUATIONS) else None
    taken = option_names(cli, command) if command else []
    line = one_line_argument_error(error, given_keys(args), taken)
    candidates = [*taken, *(f"model.net.{name}" for name in class_arguments("model.net"))]
    candidates += [f"data.{name}" for name in class_arguments("data")]
    word = line.field
    short = ".".join(part for part in word.split(".") if part != "init_args")  # data.init_args.x is data.x
    close = []
    if word != "arguments" and short not in candidates:
        close = difflib.get_close_matches(short, candidates, n=1)
        if short != word and any(short.startswith(f"{key}.") for key in taken):
            close = [short]  # the arguments of a class given as a flag: --model.optimizer.lr
        elif not close and "." in word:  # a misspelt group: dataa.batch_size
            head, _, rest = short.partition(".")
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
    saved, sys.argv = sys.argv, [sys.argv[0], *completed_arguments(argv)]
    held: list = []
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
                held=held,
            )
        end_process_group()
    finally:
        for lock in held:
            lock.release()
        sys.argv = saved
