"""The Lightning side of the ``mixer`` command: ``fit|validate|test|predict`` through `MixerCLI`.

Imported only when one of those runs, so that the project's own commands (``mixer width``, ...) start
without importing Lightning.
"""

from __future__ import annotations

import json
import sys
from operator import attrgetter
from pathlib import Path

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from mixer_lightning.callbacks import PredictionWriter
from mixer_lightning.checkpointing import SPECIAL_CKPT_PATHS, AtomicCheckpointIO, check_checkpoint, find_last_run
from mixer_lightning.commands import HelpFormatter, summary
from mixer_lightning.config_files import load_configs
from mixer_lightning.data import ImageDataModule
from mixer_lightning.errors import ConfigError
from mixer_lightning.tasks import ClassifierModule
from mixer_lightning.tasks.loading import read_checkpoint
from mixer_lightning.trust import check_class_paths

# Facts of the data that the model must agree with, copied into every model's init arguments.
LINKED_FROM_DATA = ("num_classes", "image_size", "in_chans")

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "mixer"},
    },
}


class MixerCLI(LightningCLI):
    """LightningCLI with the project's callbacks and the data → model links."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Best (by val/acc1) and last checkpoints under <run dir>/checkpoints/.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/acc1",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best",
                "checkpoint.save_last": True,
                "checkpoint.enable_version_counter": False,  # best.ckpt / last.ckpt are replaced, not versioned
            }
        )
        # A checkpoint every N optimiser steps as well (last.ckpt, written atomically), so that a killed
        # run loses at most N steps: `mixer fit ... --ckpt_path last` continues it.
        parser.add_lightning_class_args(ModelCheckpoint, "step_checkpoint")
        parser.set_defaults(
            {
                "step_checkpoint.every_n_train_steps": 500,
                "step_checkpoint.save_top_k": 0,
                "step_checkpoint.save_last": True,
                "step_checkpoint.enable_version_counter": False,
            }
        )
        parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        for name in LINKED_FROM_DATA:
            parser.link_arguments(
                "data", f"model.init_args.{name}", compute_fn=attrgetter(name), apply_on="instantiate"
            )

    def _parse_ckpt_path(self) -> None:
        """Resolve ``--ckpt_path last`` and check the checkpoint file before Lightning reads its
        hyper-parameters into the config (the checkpoint's architecture wins over the config's)."""
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else None
        path = config.get("ckpt_path") if config is not None else None
        if subcommand == "fit" and path == "last":
            self._resume_last_run(config)
            path = config.ckpt_path
        if path and path not in SPECIAL_CKPT_PATHS and path != "last":
            # Missing, truncated, not a checkpoint, pickled code, a class outside the families: one-line
            # errors, before Lightning parses (and jsonargparse imports) the names in its hyper-parameters.
            read_checkpoint(path)
        super()._parse_ckpt_path()

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Check the class paths of every config file given (``--config``, or a file for a group such as
        ``--model m.yaml``) before jsonargparse imports them (`mixer_lightning.trust`)."""
        given = sys.argv[1:] if args is None else args  # `run` puts the arguments in sys.argv
        for value in given if isinstance(given, (list, tuple)) else []:
            name = str(value).split("=", 1)[-1]
            if name.endswith((".yaml", ".yml", ".json")) and Path(name).is_file():
                check_class_paths(load_configs([name], "config"), "config", repr(name))
        super().parse_arguments(parser, args)

    def _resume_last_run(self, config) -> None:
        """``--ckpt_path last``: continue the most recent run of this experiment, in its own run
        directory (same logger version), from its last.ckpt; its config.yaml is kept and this run's
        config is saved beside it as config.resume<N>.yaml."""
        logger = config.trainer.get("logger")
        init_args = getattr(logger, "init_args", None) if logger not in (None, True, False) else None
        if init_args is None or "save_dir" not in init_args:
            raise ConfigError("ckpt_path", "'last' needs a logger with a save_dir to find the run in",
                              "give the path of the checkpoint instead")  # fmt: skip
        experiment = Path(init_args.save_dir) / str(init_args.get("name") or "")
        last = find_last_run(experiment)
        if last is None:
            raise ConfigError(
                "ckpt_path",
                f"'last': no run under {str(experiment)!r} has a checkpoints/last.ckpt",
                "drop --ckpt_path to start a new run, or give a checkpoint path",
            )
        run_dir = last.parent.parent
        init_args.version = run_dir.name
        config.ckpt_path = str(last)
        resumes = len(list(run_dir.glob("config.resume*.yaml")))
        self.save_config_kwargs["config_filename"] = f"config.resume{resumes + 1}.yaml"
        print(f"Resuming {run_dir} from {last}")

    def instantiate_trainer(self, **kwargs):
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except (ValueError, MisconfigurationException) as error:  # e.g. FSDP on the CPU, a GPU that is not there
            problem = str(error).strip().splitlines()[0].rstrip("!.")
            fix = None
            if "gpu backend" in problem.lower() or "cuda" in problem.lower() and "not available" in problem.lower():
                fix = "use --trainer.accelerator cpu (or auto), or run on a machine with a CUDA GPU"
            raise ConfigError("trainer", problem, fix) from None
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not FSDP's sharded IO, nor a user's
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def _check_ckpt_path(self) -> None:
        path = self.config_init[self.subcommand].get("ckpt_path")
        if path and path not in SPECIAL_CKPT_PATHS:
            check_checkpoint(path, self.model)

    def before_fit(self) -> None:
        self._check_ckpt_path()

    def before_validate(self) -> None:
        self._check_ckpt_path()

    def before_test(self) -> None:
        self._check_ckpt_path()

    def before_predict(self) -> None:
        self._check_ckpt_path()

    def _write_json(self, name: str, content: dict) -> None:
        """Write `content` to ``<run dir>/<name>`` (what `mixer sweep report` and scripts read)."""
        log_dir = self.trainer.log_dir  # a broadcast under DDP: every process must ask, not only rank 0
        if self.trainer.is_global_zero and not self.trainer.fast_dev_run and log_dir:
            path = Path(log_dir) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content, indent=2) + "\n")

    def _stage_metrics(self, stage: str) -> dict[str, float]:
        return {k: float(v) for k, v in self.trainer.callback_metrics.items() if k.startswith(f"{stage}/")}

    def after_fit(self) -> None:
        checkpoint = self.trainer.checkpoint_callback
        summary: dict = {"epochs": self.trainer.current_epoch, "steps": self.trainer.global_step}
        summary.update(self._stage_metrics("val"))
        log_dir = self.trainer.log_dir  # a broadcast under DDP: every process must ask, not only rank 0
        if checkpoint is not None and checkpoint.best_model_path:
            summary.update(best_checkpoint=checkpoint.best_model_path, monitor=checkpoint.monitor)
            summary["best_score"] = float(checkpoint.best_model_score)
            if self.trainer.is_global_zero:
                print(f"Run directory: {log_dir}")
                print(
                    f"Best checkpoint ({checkpoint.monitor} = {summary['best_score']:.4f}): {checkpoint.best_model_path}"
                )
        self._write_json("fit_summary.json", summary)

    def after_validate(self) -> None:
        self._write_json("val_metrics.json", self._stage_metrics("val"))

    def after_test(self) -> None:
        self._write_json("test_metrics.json", self._stage_metrics("test"))


def _epilog() -> str:
    return "project commands (mixer COMMAND --help):\n" + summary()


def run(argv: list[str]) -> None:
    """``mixer fit|validate|test|predict ...`` with the arguments `argv`."""
    # LightningCLI reads the arguments from sys.argv, where Lightning's DDP launcher also finds them
    # to start the other processes (`[python, sys.argv[0], *sys.argv[1:]]`): they must be there.
    saved_argv, sys.argv = sys.argv, [sys.argv[0], *argv]
    try:
        MixerCLI(
            ClassifierModule,
            ImageDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,  # the optimiser and schedule are model arguments
            save_config_kwargs={"overwrite": True},
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=0,
            parser_kwargs={"epilog": _epilog(), "prog": "mixer", "formatter_class": HelpFormatter},
        )
    finally:
        sys.argv = saved_argv
