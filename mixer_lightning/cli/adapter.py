"""Every place the ``mixer`` command reaches into Lightning's `LightningCLI` (or jsonargparse, or a
Lightning logger) beyond their documented API: one module, so that a Lightning upgrade is checked
here and in ``tests/test_lightning_adapter.py``, which fails if a release changes what each relies on.

Each entry names the Lightning behaviour it relies on or changes. Everything else of `MixerCLI`
(`mixer_lightning.cli.lightning`) uses LightningCLI's public hooks: ``add_arguments_to_parser``,
``parse_arguments``, ``before_instantiate_classes``, ``instantiate_trainer``, ``before_<command>``
and ``after_<command>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from mixer_lightning.errors import ConfigError
from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import write_text


class LightningAdapter(LightningCLI):
    """`LightningCLI` with its one private method that `MixerCLI` changes turned into a hook."""

    def trainer_callbacks(self, config: dict[str, Any], callbacks: list) -> list:
        """The callbacks the Trainer is built with (default: Lightning's own list)."""
        return callbacks

    # Lightning: `LightningCLI._instantiate_trainer(config, callbacks)` builds the Trainer from the trainer's
    # config and the callbacks added with ``parser.add_lightning_class_args`` (`instantiate_trainer` gathers
    # them), appending them and the SaveConfigCallback to ``config["callbacks"]``. Changed: the list is
    # `trainer_callbacks(config, callbacks)`, which may also edit ``config`` (no checkpoint callbacks when
    # nothing is trained; the run header and the progress lines added).
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        return super()._instantiate_trainer(config, self.trainer_callbacks(config, callbacks))


class SaveConfig(SaveConfigCallback):
    """Lightning's SaveConfigCallback, writing through the atomic writer; the file name is chosen by
    `mixer_lightning.cli.rundirs.RunClaim` so that it never replaces another run's (or invocation's)
    config.

    Lightning: `SaveConfigCallback.setup` writes ``self.parser.dump(self.config)`` to
    ``<log_dir>/<self.config_filename>`` once (``self.already_saved``), refusing an existing file unless
    ``self.overwrite``, then calls ``self.save_config``. Changed: the file is written atomically
    (`mixer_lightning.safety.atomic.write_text`) and a refusal is a one-line `ConfigError`."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = run_directory(trainer)  # a broadcast under DDP: every process must ask
        if trainer.is_global_zero and log_dir:
            path = Path(log_dir) / self.config_filename
            if path.exists() and not self.overwrite:
                raise ConfigError(
                    "config", f"{str(path)!r} exists; it is not overwritten", "choose another run directory"
                )
            write_text(
                path,
                resolved_header(pl_module) + self.parser.dump(self.resolved_config(pl_module), skip_none=False),
                field="config",
            )
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

    def resolved_config(self, pl_module: Any) -> Any:
        """The run's config with what the network solved from other arguments written in (S of a Mixer
        given by Ω, `ClassifierModule.resolved_arguments`), so config.yaml says what was trained."""
        net = (getattr(pl_module, "hparams", None) or {}).get("net")  # temporary (issue 44)
        values = (net.get("init_args") or {}) if isinstance(net, dict) else {}
        if not values or "model" not in self.config:
            return self.config
        config = self.config.clone()
        for key, value in values.items():
            if f"model.net.init_args.{key}" in config:
                config[f"model.net.init_args.{key}"] = value
        return config


def resolved_header(pl_module: Any) -> str:
    """A comment line with the widths the paper compares models by (H&K Sec. 4.1: S, C, m, Ω, p)."""
    architecture = getattr(pl_module, "architecture", None)
    widths = architecture() if callable(architecture) else {}
    if not widths:
        return ""
    text = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in widths.items())
    return f"# resolved widths (Hayase & Karakida Sec. 4.1): {text}\n"


# Trainer arguments where an int counts batches and a float is a fraction of the epoch (Lightning:
# ``limit_train_batches=1`` is one batch, ``1.0`` the whole epoch).
BATCH_COUNTS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "val_check_interval",
    "overfit_batches",
)


def batch_counts_as_ints(parser: Any, group: str = "trainer") -> None:
    """Parse the `BATCH_COUNTS` of `parser`'s trainer as an int first, then a float: ``--trainer.
    limit_train_batches 1`` (or ``limit_train_batches: 1`` in a file) is one batch, not the whole epoch.

    jsonargparse: an argument from a type hint is an ``ActionTypeHint`` whose ``_typehint`` union is
    tried in order. Lightning annotates ``Optional[Union[int, float]]``, but typing caches unions as
    equal regardless of order, so the hint ``get_type_hints`` returns is ``Union[float, int, None]``
    whenever another library built that union first (it does, on import): ``1`` parsed as ``1.0``."""
    for action in parser._actions:
        name = action.dest.split(".", 1)[1] if action.dest.startswith(f"{group}.") else None
        hint = getattr(action, "_typehint", None)
        arguments = getattr(hint, "__args__", None)
        if name not in BATCH_COUNTS or not isinstance(arguments, tuple) or not {int, float} <= set(arguments):
            continue
        rest = [argument for argument in arguments if argument not in (int, float)]
        action._typehint = Union[tuple([int, float, *rest])]  # noqa: UP007 (a typing.Union keeps this order)


def subcommand_parser(parser: Any, command: str | None) -> Any:
    """The parser of `command` (``fit``, ...) inside LightningCLI's parser, or None.

    argparse: a parser with subcommands keeps them in ``_subcommands_action._name_parser_map``
    (jsonargparse's ``_ActionSubCommands``); LightningCLI builds one such parser per subcommand."""
    action = getattr(parser, "_subcommands_action", None)
    return action._name_parser_map.get(command) if action is not None and command else None


def option_keys(parser: Any) -> list[str]:
    """The dotted keys a (sub)command parser accepts as flags (``trainer.max_epochs``, ``data``, ...).

    argparse: every argument is an action in ``parser._actions`` with its ``option_strings``."""
    keys = []
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and not option.endswith((".help", "--help")):
                keys.append(option[2:])
    return keys


def versioned(logger: Any) -> bool:
    """Whether `logger` writes into ``root_dir/version_N`` folders whose N can be pinned (TensorBoard, CSV)."""
    return hasattr(logger, "_version") and hasattr(logger, "root_dir")


def logger_version(logger: Any) -> int | str | None:
    """The version `logger` was given (None: Lightning picks the next free one when it first writes).

    Lightning: TensorBoardLogger and CSVLogger keep the ``version`` argument in ``_version`` and resolve
    None lazily (``version`` property: the next free ``version_N`` under ``root_dir``)."""
    return logger._version


def pin_logger_version(logger: Any, number: int) -> None:
    """Make `logger` write into ``root_dir/version_<number>`` (a folder this run has just created)."""
    logger._version = number
