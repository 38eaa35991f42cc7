"""What the ``mixer`` command relies on in Lightning's `LightningCLI` (and in jsonargparse, and Lightning's
loggers) beyond their public API, each place of which lives in `mixer_lightning.cli.adapter`: one test
per reliance, so that a release that changes one fails here, naming what changed."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from mixer_lightning.cli.adapter import (
    BATCH_COUNTS,
    LightningAdapter,
    batch_counts_as_ints,
    logger_version,
    option_keys,
    pin_logger_version,
    subcommand_parser,
    versioned,
)
from mixer_lightning.tasks import ClassifierModule


class Marker(Callback):
    pass


@pytest.fixture(autouse=True)
def _no_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightningCLI warns when it is given arguments while sys.argv has some (pytest's)."""
    monkeypatch.setattr(sys, "argv", ["mixer"])


def test_the_trainer_is_built_by_the_private_method_with_the_class_args_callbacks(tmp_path: Path) -> None:
    """`LightningAdapter._instantiate_trainer`: LightningCLI builds the Trainer in
    ``_instantiate_trainer(config, callbacks)``, given the trainer's config and the callbacks of
    ``add_lightning_class_args``, and appends the SaveConfigCallback after them."""
    assert list(inspect.signature(LightningCLI._instantiate_trainer).parameters) == ["self", "config", "callbacks"]
    seen: dict = {}

    class CLI(LightningAdapter):
        def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
            parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")

        def trainer_callbacks(self, config: dict, callbacks: list) -> list:
            seen["config"], seen["callbacks"] = dict(config), list(callbacks)
            return [*callbacks, Marker()]

    cli = CLI(BoringModel, run=False, args=["--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"])
    assert "max_epochs" in seen["config"] and [type(c) for c in seen["callbacks"]] == [ModelCheckpoint]
    kinds = [type(c) for c in cli.trainer.callbacks]
    assert Marker in kinds and SaveConfigCallback in kinds and kinds.index(Marker) < kinds.index(SaveConfigCallback)


def test_the_checkpoint_is_read_after_parse_arguments_and_before_before_instantiate_classes(tmp_path: Path) -> None:
    """`mixer_lightning.cli.resume`: LightningCLI reads the hyper-parameters of ``--ckpt_path`` over the
    model's config (the checkpoint's model wins) right after ``parse_arguments``, where the command
    checks the file and the resumed model, and before ``before_instantiate_classes``, where it puts back
    what the checkpoint leaves out."""
    ckpt = tmp_path / "run.ckpt"
    torch.save({"hyper_parameters": {"_class_path": "mixer_lightning.tasks.MLPMixerModule", "channels": 24}}, ckpt)
    seen = []

    class Stop(Exception):
        pass

    class CLI(LightningCLI):
        def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
            super().parse_arguments(parser, args)
            seen.append(self.config.fit.model.init_args.channels)

        def before_instantiate_classes(self) -> None:
            seen.append(self.config.fit.model.init_args.channels)
            raise Stop

    arguments = ["fit", "--model", "mixer_lightning.tasks.MLPMixerModule", "--model.channels", "16"]
    with pytest.raises(Stop):
        CLI(ClassifierModule, subclass_mode_model=True, args=[*arguments, "--ckpt_path", str(ckpt)])
    assert seen == [16, 24]


def test_save_config_callback_keeps_the_attributes_save_config_uses() -> None:
    """`mixer_lightning.cli.adapter.SaveConfig` replaces ``SaveConfigCallback.setup`` and relies on its
    attributes (``already_saved``, ``config_filename``, ``overwrite``, ``parser``, ``config``) and on
    ``save_config``; `mixer_lightning.cli.rundirs.name_config` sets ``config_filename``."""
    parser = LightningArgumentParser()
    config = parser.parse_args([])
    callback = SaveConfigCallback(parser, config)
    assert (callback.already_saved, callback.config_filename, callback.overwrite) == (False, "config.yaml", False)
    assert callback.parser is parser and callback.config is config and callable(callback.save_config)
    assert list(inspect.signature(SaveConfigCallback.setup).parameters) == ["self", "trainer", "pl_module", "stage"]


def test_a_subcommand_parser_and_its_flags_are_found() -> None:
    """`subcommand_parser` and `option_keys` (the did-you-mean of an unknown flag): a jsonargparse parser
    keeps its subcommands' parsers in ``_subcommands_action._name_parser_map``, as LightningCLI adds
    them, and every parser its arguments in ``_actions``."""
    parser, fit = LightningArgumentParser(), LightningArgumentParser()
    fit.add_argument("--trainer.max_epochs", type=int, default=1)
    parser.add_subcommands().add_subcommand("fit", fit)
    assert subcommand_parser(parser, "fit") is fit
    assert subcommand_parser(parser, None) is None and subcommand_parser(fit, "fit") is None
    assert "trainer.max_epochs" in option_keys(fit)


@pytest.mark.parametrize("logger_class", [TensorBoardLogger, CSVLogger])
def test_a_logger_writes_into_the_version_pinned_in_its_private_attribute(tmp_path: Path, logger_class: type) -> None:
    """`mixer_lightning.cli.rundirs.RunClaim` creates the next free version_N itself (atomically), then
    pins the logger to it: Lightning's TensorBoard and CSV loggers keep their ``version`` argument in
    ``_version`` (None: the next free one, resolved when first asked)."""
    logger = logger_class(save_dir=str(tmp_path), name="run")
    assert versioned(logger) and logger_version(logger) is None
    pin_logger_version(logger, 7)
    assert logger.version == 7 and Path(logger.log_dir) == tmp_path / "run" / "version_7"


def test_batch_counts_are_type_hinted_arguments_tried_in_union_order() -> None:
    """`batch_counts_as_ints`: jsonargparse tries the subtypes of an argument's ``_typehint`` union in
    order; Lightning's hint of the batch counts is a union of int and float (which typing may hand out
    float first). With the int first, ``1`` is one batch and ``0.5`` still half the epoch."""
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(Trainer, "trainer")
    hints = {a.dest: getattr(a, "_typehint", None) for a in parser._actions}
    assert all({int, float} <= set(hints[f"trainer.{name}"].__args__) for name in BATCH_COUNTS)
    batch_counts_as_ints(parser)
    values = [
        f"--trainer.{name}={value}"
        for name, value in zip(BATCH_COUNTS, ["1", "2", "0.5", "1.0", "1", "1"], strict=True)
    ]
    trainer = parser.parse_args(values).trainer
    got = [(getattr(trainer, name), type(getattr(trainer, name))) for name in BATCH_COUNTS]
    assert got == [(1, int), (2, int), (0.5, float), (1.0, float), (1, int), (1, int)]
