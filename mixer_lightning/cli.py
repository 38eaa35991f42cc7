"""The ``mixer`` command: Lightning's ``fit|validate|test|predict`` plus the project's own commands.

`main` is both the console script and the entry point the tests drive::

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.fast_dev_run", "true"])
"""

from __future__ import annotations

import json
import os
import sys
from argparse import RawDescriptionHelpFormatter
from operator import attrgetter
from pathlib import Path

from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from mixer_lightning.callbacks import PredictionWriter
from mixer_lightning.commands import COMMANDS, run_command, summary
from mixer_lightning.data import ImageDataModule
from mixer_lightning.errors import find_config_error
from mixer_lightning.tasks import ClassifierModule

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
            }
        )
        parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        for name in LINKED_FROM_DATA:
            parser.link_arguments(
                "data", f"model.init_args.{name}", compute_fn=attrgetter(name), apply_on="instantiate"
            )

    def _write_json(self, name: str, content: dict) -> None:
        """Write `content` to ``<run dir>/<name>`` (what `mixer sweep report` and scripts read)."""
        if self.trainer.is_global_zero and not self.trainer.fast_dev_run and self.trainer.log_dir:
            path = Path(self.trainer.log_dir) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content, indent=2) + "\n")

    def _stage_metrics(self, stage: str) -> dict[str, float]:
        return {k: float(v) for k, v in self.trainer.callback_metrics.items() if k.startswith(f"{stage}/")}

    def after_fit(self) -> None:
        checkpoint = self.trainer.checkpoint_callback
        summary: dict = {"epochs": self.trainer.current_epoch, "steps": self.trainer.global_step}
        summary.update(self._stage_metrics("val"))
        if checkpoint is not None and checkpoint.best_model_path:
            summary.update(best_checkpoint=checkpoint.best_model_path, monitor=checkpoint.monitor)
            summary["best_score"] = float(checkpoint.best_model_score)
            if self.trainer.is_global_zero:
                print(f"Run directory: {self.trainer.log_dir}")
                print(
                    f"Best checkpoint ({checkpoint.monitor} = {summary['best_score']:.4f}): {checkpoint.best_model_path}"
                )
        self._write_json("fit_summary.json", summary)

    def after_validate(self) -> None:
        self._write_json("val_metrics.json", self._stage_metrics("val"))

    def after_test(self) -> None:
        self._write_json("test_metrics.json", self._stage_metrics("test"))


class _HelpFormatter(RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help, keeping the epilog's line breaks (the table of project commands)."""


def _epilog() -> str:
    return "project commands (mixer COMMAND --help):\n" + summary()


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
        # LightningCLI reads `argv` from `args`; it warns when sys.argv holds arguments as well.
        saved_argv, sys.argv = sys.argv, sys.argv[:1]
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
                parser_kwargs={"epilog": _epilog(), "prog": "mixer", "formatter_class": _HelpFormatter},
                args=argv,
            )
        finally:
            sys.argv = saved_argv
    except Exception as error:
        config_error = find_config_error(error)
        if config_error is None or debug:
            raise
        print(f"mixer: error: {config_error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
