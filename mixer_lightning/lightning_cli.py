"""The Lightning side of the ``mixer`` command: ``fit|validate|test|predict`` through `MixerCLI`.

Imported only when one of those runs, so that the project's own commands (``mixer width``, ...) start
without importing Lightning.

What a run may write, and when (see docs/reliability.md):

1. Every input is checked before the run directory exists: the config files (readable UTF-8 YAML,
   trusted class paths), the arguments (jsonargparse, one line on error), the seed, the checkpoint
   and what it may change on resume, the model (built), the optimiser and schedule (built once on
   the side), the trainer, the output paths.
2. The run directory is then claimed: a new run takes the next free ``version_N`` by creating it; an
   existing one is only written by a run that resumes it (``--ckpt_path``), under its lock.
3. A run that fails before its first checkpoint removes the directory it created: no empty
   ``version_N/`` is left behind.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
import re
import shutil
import sys
import warnings
from argparse import ArgumentError
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from mixer_lightning.atomic import check_output_file, remove_orphans, write_text
from mixer_lightning.callbacks import DataFacts, PredictionWriter
from mixer_lightning.checkpointing import SPECIAL_CKPT_PATHS, AtomicCheckpointIO, ResumeCheckpoint, check_checkpoint
from mixer_lightning.commands import HelpFormatter, summary
from mixer_lightning.config_files import load_configs
from mixer_lightning.console import RunHeader, progress_callback, quiet_libraries, relative
from mixer_lightning.data import ImageDataModule  # noqa: F401  (registers the data module for short class names)
from mixer_lightning.errors import ConfigError, translate_library_error
from mixer_lightning.loggers import check_logger_available, run_directory
from mixer_lightning.preprocessing import apply_defaults, data_defaults, hub_preprocessing
from mixer_lightning.rundir import RunLock, create_next_version, find_last_run, holds_a_run
from mixer_lightning.tasks import ClassifierModule
from mixer_lightning.tasks.loading import family_module, read_checkpoint
from mixer_lightning.trust import check_class_paths

# Facts of the data that the model must agree with, copied into every model's init arguments.
LINKED_FROM_DATA = ("num_classes", "image_size", "in_chans")
# Model arguments a resumed run may give differently from its checkpoint: the checkpoint holds the
# trained weights (init_from is not read again) and the optimiser/schedule states.
RESUME_MAY_DIFFER = (*LINKED_FROM_DATA, "init_from", "optimizer", "lr_scheduler")
SUBCOMMANDS = ("fit", "validate", "test", "predict")
# Words of torch.optim's ValueErrors -> the argument they are about.
OPTIMIZER_WORDS = (
    ("learning rate", "lr"),
    ("weight_decay", "weight_decay"),
    ("epsilon", "eps"),
    ("beta", "betas"),
    ("momentum", "momentum"),
    ("dampening", "dampening"),
)

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "mixer"},
    },
    # The run header (`mixer_lightning.console.RunHeader`) says what runs and its parameter count;
    # Lightning's table of every submodule (metrics included) is a flag away.
    "enable_model_summary": False,
}
EVALUATIONS = ("validate", "test", "predict")
RESULTS = {"validate": "val_metrics.json", "test": "test_metrics.json"}
DESCRIPTION = (
    "mixer-lightning: MLP-Mixers and their wide, sparse relatives (Tolstikhin et al. 2021; Hayase & "
    "Karakida 2024) in PyTorch Lightning"
)


def _plain(value: Any) -> Any:
    """`value` with tuples as lists and namespaces as dicts, for comparing a config with hparams."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _first_process() -> bool:
    """Whether this is the process that owns the run directory: global rank 0 (Lightning reads RANK,
    LOCAL_RANK, SLURM_PROCID from the environment), and on the first node of a multi-node launch."""
    first_node = all(os.environ.get(name, "0") in ("", "0") for name in ("NODE_RANK", "GROUP_RANK"))
    return rank_zero_only.rank == 0 and first_node


def _signature_defaults(cls: type) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if parameter.default is not inspect.Parameter.empty:
                    defaults[name] = parameter.default
    return defaults


def run_dir_of_checkpoint(path: Any) -> Path | None:
    """The run directory a checkpoint lies in (``RUN/checkpoints/NAME.ckpt`` beside ``RUN/config.yaml``), or None."""
    if not path or str(path) in (*SPECIAL_CKPT_PATHS, "last"):
        return None
    path = Path(path)
    run = path.parent.parent
    return run if path.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def _option_values(args: list[str]) -> dict[str, str]:
    """``--name value`` and ``--name=value`` of `args`, the last one winning ('' for a bare flag)."""
    values: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        else:
            following = args[i + 1] if i + 1 < len(args) else ""
            name, value = arg, following if not following.startswith("--") else ""
        values[name] = value
    return values


def evaluation_arguments(args: list[str]) -> list[str]:
    """The arguments of ``mixer validate|test|predict`` completed from the checkpoint they evaluate:

    - without ``--config``, a ``--ckpt_path`` inside a run directory brings that run's ``config.yaml``
      (checked like any config file given: `MixerCLI.parse_arguments`);
    - ``predict`` of image files (``--data.predict_root``) without ``--config`` reads them with
      `mixer_lightning.data.predict.PredictionData`, made of the facts the checkpoint carries (its
      ``data`` entry): no data config, no training data needed;
    - a checkpoint outside any run directory brings its model class (its hyper-parameters the rest,
      as for any ``--ckpt_path``).
    Other arguments are returned unchanged; the user's own flags come last, so they win."""
    if not args or args[0] not in EVALUATIONS:
        return args
    options = _option_values(args[1:])
    if any(name in options for name in ("--config", "-c", "-h", "--help")):
        return args
    ckpt = options.get("--ckpt_path")
    if not ckpt or ckpt in (*SPECIAL_CKPT_PATHS, "last", "best"):
        return args
    run = run_dir_of_checkpoint(ckpt)
    files = args[0] == "predict" and ("--data.predict_root" in options or "--data.init_args.predict_root" in options)
    checkpoint = read_checkpoint(ckpt) if run is None or (files and "--data" not in options) else None
    added: list[str] = ["--config", str(run / "config.yaml")] if run is not None else []
    facts = checkpoint.get("data") if checkpoint is not None else None
    if files and "--data" not in options and isinstance(facts, dict) and facts:
        from mixer_lightning.data.predict import PredictionData

        added += ["--data", "mixer_lightning.data.predict.PredictionData"]
        for key, value in PredictionData.arguments_from(facts).items():
            added += [f"--data.{key}", value if isinstance(value, str) else json.dumps(value)]
    elif run is None and "--data" not in options:
        why = "carries no data facts (a checkpoint from before they were written) and " if files else ""
        raise ConfigError(
            "config",
            f"none given, and {ckpt!r} {why}lies in no run directory (no config.yaml beside its checkpoints/ folder)",
            "give --config, e.g. the config it was trained with",
        )
    if run is None and "--model" not in options:
        class_path = (checkpoint.get("hyper_parameters") or {}).get("_class_path") if checkpoint is not None else None
        if not class_path:
            raise ConfigError("config", f"none given, and {ckpt!r} names no model class", "give --config or --model")
        added += ["--model", str(class_path)]
    return [args[0], *added, *args[1:]]


def _init_parameters(cls: type) -> list[str]:
    """The keyword arguments of `cls` (its ``__init__`` and, through ``**kwargs``, its bases')."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names += [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return list(dict.fromkeys(names))


def _closest(word: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _option_keys(parser: Any) -> list[str]:
    """The dotted keys a (sub)command parser accepts as flags (``trainer.max_epochs``, ``data``, ...)."""
    keys = []
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and not option.endswith((".help", "--help")):
                keys.append(option[2:])
    return keys


def suggest_argument(error: BaseException, parser: Any, command: str | None) -> ConfigError | None:
    """jsonargparse's error for an unknown flag or config key as one line with a did-you-mean
    (``model.chanels`` → ``channels``, ``trainer.max_epoch`` → ``max_epochs``), or None to let
    `mixer_lightning.errors.translate_library_error` say it."""
    message = str(error)
    help_ = f"see `mixer {command} --help`" if command else "see `mixer --help`"
    option = re.search(r"Option '([^']+)' is not accepted", message)
    if option is not None:  # a class (the model, the optimiser, a callback) has no such argument
        before = message[: option.start()]
        after = message[option.end() :]
        got = re.search(r"class_path='([\w.]+)'", after)
        given = re.findall(r"Problem with given class_path '([\w.]+)'", before)
        class_path = got.group(1) if got else given[-1] if given else None
        keys = re.findall(r'Parser key "([^"]+)"', before)
        field = ".".join(keys)
        if got:  # a callable/class argument inside the class of the first key (model.optimizer)
            field += ".init_args"
        field = f"{field}.{option.group(1)}" if field else option.group(1)
        cls = None
        if class_path:
            module, _, name = class_path.rpartition(".")
            try:
                cls = getattr(importlib.import_module(module), name)  # already imported by jsonargparse
            except (ImportError, AttributeError):
                cls = None
        problem = f"{class_path.rsplit('.', 1)[-1] if class_path else 'the class'} has no option {option.group(1)!r}"
        close = _closest(option.group(1), _init_parameters(cls)) if cls is not None else None
        fix = f"did you mean {close!r}? {help_}" if close else help_
        return ConfigError(field, problem, fix)
    required = re.search(r"the following arguments are required: (.*)", message)
    if (
        required
        and command
        and {f"{command}.model", f"{command}.data"} & {a.strip() for a in required.group(1).split(",")}
    ):
        fix = (
            "give --config CONFIG.yaml, e.g. configs/quickstart.yaml"
            if command == "fit"
            else "give --ckpt_path RUN/checkpoints/best.ckpt (the run's config.yaml comes with it) or --config"
        )
        return ConfigError("config", "none given (the model and the data are set by a config)", fix)
    translated = translate_library_error(error, command)
    if not isinstance(translated, ConfigError) or "no such option" not in translated.problem:
        return None
    key = translated.field.lstrip("-")
    known = _option_keys(parser)
    close = _closest(key, known)
    if close is None and "." in key:  # a mistyped group: dataa.batch_size -> data.batch_size
        head, _, rest = key.partition(".")
        group = _closest(head, sorted({k.split(".", 1)[0] for k in known}))
        close = f"{group}.{rest}" if group else None
    if close is None or close == key:
        return None
    return ConfigError(key, translated.problem, f"did you mean {close!r}? {help_}")


def _explicit_data_arguments(config_files: list[str], args: list[str]) -> set[str]:
    """The data module's arguments that the config files (``data.init_args``) or the flags
    (``--data.X``, ``--data.init_args.X``) set."""
    explicit: set[str] = set()
    for name in config_files:
        data = (load_configs([name], "config") or {}).get("data")
        if isinstance(data, dict):
            explicit |= {k for k in (data.get("init_args") or {})} | {
                k for k in data if k not in ("class_path", "init_args")
            }
    for arg in args:
        found = re.match(r"--data\.(?:init_args\.)?(\w+)", arg)
        if found:
            explicit.add(found.group(1))
    return explicit


class SaveConfig(SaveConfigCallback):
    """Lightning's SaveConfigCallback, writing through the atomic writer; the file name is chosen by
    `MixerCLI._claim_run_dir` so that it never replaces another run's (or invocation's) config."""

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
            write_text(path, self.parser.dump(self.config, skip_none=False), field="config")
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


class MixerCLI(LightningCLI):
    """LightningCLI with the project's callbacks, the data → model links, and runs that never lose or
    overwrite what is on disk (module docstring)."""

    _run_dir: Path | None = None
    _created_run_dir: Path | None = None
    _lock: RunLock | None = None
    _created_root: Path | None = None
    # validate/test/predict of a checkpoint inside a run directory: the results go there (no new run).
    _evaluated_run: Path | None = None
    # The data arguments the user's config files and flags set (the others may take pretrained defaults).
    _explicit_data: set[str] = set()
    _header: RunHeader | None = None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Best checkpoint (by val/acc1) under <run dir>/checkpoints/. last.ckpt is step_checkpoint's.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
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
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        # Progress: Lightning's bar in a terminal, a plain line every N steps in a log (`mixer_lightning.console`).
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
            parser.link_arguments(
                "data", f"model.init_args.{name}", compute_fn=attrgetter(name), apply_on="instantiate"
            )

    # ------------------------------------------------------------------------------ parsing

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Check every config file given (``--config``, or a file for a group such as ``--model m.yaml``)
        before jsonargparse reads it: readable UTF-8 YAML mapping, class paths in trusted packages
        (`mixer_lightning.trust`), since jsonargparse imports them."""
        given = sys.argv[1:] if args is None else args  # `run` puts the arguments in sys.argv
        if isinstance(given, (list, tuple)):
            completed = evaluation_arguments(list(given))
            if args is None:  # where Lightning's DDP launcher finds them for the other processes
                sys.argv[1:] = completed
            else:
                args = completed
            given = completed
        files = []
        values = [str(value) for value in given] if isinstance(given, (list, tuple)) else []
        for i, value in enumerate(values):
            # Every --config file whatever its name, and any other YAML/JSON file given for a group
            # (--model m.yaml), is read and checked here for the friendly early line. What guarantees
            # that nothing untrusted is imported, from any file however named or nested, is
            # jsonargparse's import-path policy (`mixer_lightning.trust.enforce_import_policy`).
            is_config = value.startswith("--config=") or (i > 0 and values[i - 1] == "--config")
            name = value.split("=", 1)[1] if value.startswith("--config=") else value
            if is_config and Path(name).exists() and not Path(name).is_file():
                raise ConfigError("config", f"{name!r} is not a regular file", "give the path of a YAML file")
            if Path(name).is_file() and (is_config or name.lower().endswith((".yaml", ".yml", ".json"))):
                check_class_paths(load_configs([name], "config"), "config", repr(name))
                files.append(name)
        self._explicit_data = _explicit_data_arguments(files, list(given) if isinstance(given, (list, tuple)) else [])
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as error:
            command = given[0] if given and given[0] in SUBCOMMANDS else None
            subparser = parser._subcommands_action._name_parser_map.get(command) if command else parser
            suggestion = suggest_argument(error, subparser or parser, command)
            if suggestion is None:
                raise
            raise suggestion from error

    def _set_seed(self) -> None:
        try:
            super()._set_seed()
        except ValueError as error:  # numpy's seeds are 0 .. 2**32 - 1
            raise ConfigError("seed_everything", str(error), "give a seed in 0..4294967295") from None

    def _logger_args(self, config) -> Any:
        logger = config.trainer.get("logger")
        if isinstance(logger, list):
            logger = logger[0] if logger else None
        init_args = getattr(logger, "init_args", None) if logger not in (None, True, False) else None
        return init_args if init_args is not None and "save_dir" in init_args else None

    def _parse_ckpt_path(self) -> None:
        """Resolve ``--ckpt_path last``, check the checkpoint file, and refuse a resume that would
        silently change the model, before Lightning reads the checkpoint's hyper-parameters over the
        config (the checkpoint's model wins over the config's)."""
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else None
        path = config.get("ckpt_path") if config is not None else None
        if path == "last":  # fit: resume that run in its directory; validate/test/predict: evaluate it
            self._resume_last_run(config, resume=subcommand == "fit")
            path = config.ckpt_path
        if path == "best":  # Lightning's "best" is the best checkpoint of a fit in this same process
            raise ConfigError(
                "ckpt_path",
                "'best' names no file here (Lightning's 'best' is that of a fit in the same process)",
                "give the path, e.g. runs/NAME/version_N/checkpoints/best.ckpt",
            )
        if path and path not in SPECIAL_CKPT_PATHS and path != "last":
            # Missing, truncated, not a checkpoint, pickled code, a class outside the families: one-line
            # errors, before Lightning parses (and jsonargparse imports) the names in its hyper-parameters.
            checkpoint = read_checkpoint(path)
            if subcommand == "fit":
                self._check_resumed_model(config, checkpoint, path)
        kept = self._arguments_not_in_checkpoints(config)
        super()._parse_ckpt_path()
        if kept:  # Lightning re-parses the model from the checkpoint's hyper-parameters, which leave these out
            init_args = self.config[subcommand].model.init_args
            for name, value in kept.items():
                init_args[name] = value

    @staticmethod
    def _arguments_not_in_checkpoints(config) -> dict:
        """The model's optimiser and schedule as the config gives them. The checkpoint's hyper-parameters
        leave them out (`ClassifierModule` ignores them), and jsonargparse resets a nested class from a
        config file to its default when Lightning re-parses the model from those hyper-parameters: a
        resumed SGD run would otherwise be rebuilt with AdamW and fail to load its optimiser state."""
        if config is None or not config.get("ckpt_path") or config.get("model") is None:
            return {}
        init_args = config.model.get("init_args")
        if init_args is None:
            return {}
        return {name: init_args[name] for name in ("optimizer", "lr_scheduler") if name in init_args}

    def _check_resumed_model(self, config, checkpoint: dict, path: str) -> None:
        """A run resumed from `checkpoint` trains the checkpoint's model: a model argument given with
        another value (``--model.channels 32`` on a 64-channel run) is refused, naming the flag."""
        hparams = checkpoint.get("hyper_parameters") or {}
        saved = hparams.get("_class_path")
        model = config.get("model")
        if not saved or model is None:
            return
        cls = family_module(saved, "ckpt_path", repr(path))
        given_class = str(model.get("class_path") or "")
        if given_class and given_class.rsplit(".", 1)[-1] != cls.__name__:
            raise ConfigError(
                "model.class_path",
                f"{given_class} differs from the {cls.__name__} of the checkpoint being resumed ({path})",
                "a resumed run keeps its model: use the run's config.yaml, or start a new run from the weights "
                "with model.init_from",
            )
        defaults = _signature_defaults(cls)
        init_args = _plain(model.get("init_args") or {})
        for name, value in init_args.items():
            if name in RESUME_MAY_DIFFER or name.startswith("_") or name not in hparams:
                continue
            if value == _plain(hparams[name]) or (name in defaults and value == _plain(defaults[name])):
                continue  # the same, or not given (a default): the checkpoint's value is used
            raise ConfigError(
                f"model.{name}",
                f"is {value!r}, but the run being resumed has {hparams[name]!r} ({path})",
                f"a resumed run keeps its model: drop --model.{name}, or start a new run from the weights with "
                "model.init_from",
            )

    def _resume_last_run(self, config, resume: bool = True) -> None:
        """``--ckpt_path last``: the last.ckpt of the pinned version, else of the highest version_N
        (`mixer_lightning.rundir.find_last_run`); `resume` (fit) continues the run in its own directory."""
        init_args = self._logger_args(config)
        if init_args is None:
            raise ConfigError(
                "ckpt_path",
                "'last' needs a logger with a save_dir to find the run in",
                "give the path of the checkpoint instead",
            )
        experiment = Path(init_args.save_dir) / str(init_args.get("name") or "")
        version = init_args.get("version")
        version = None if version is None else version if isinstance(version, str) else f"version_{version}"
        last = find_last_run(experiment, version)
        if resume:
            init_args.version = last.parent.parent.name
        config.ckpt_path = str(last)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        if self.subcommand == "fit" and _first_process():
            # A pinned version that holds a run is resumed (--ckpt_path) or refused, never overwritten.
            init_args = self._logger_args(config)
            version = init_args.get("version") if init_args is not None else None
            if version is not None and not config.get("ckpt_path"):
                name = version if isinstance(version, str) else f"version_{version}"
                run_dir = Path(init_args.save_dir) / str(init_args.get("name") or "") / name
                if holds_a_run(run_dir):
                    raise ConfigError(
                        "trainer.logger.init_args.version",
                        f"{str(run_dir)!r} holds a run already; it is not overwritten",
                        "resume it with --ckpt_path last, or choose another version (or none: the next free one)",
                    )
        trainer = config.get("trainer") or {}
        accumulate = trainer.get("accumulate_grad_batches")
        if accumulate is not None and accumulate < 1:  # Lightning divides by it
            raise ConfigError(
                "trainer.accumulate_grad_batches", f"must be >= 1, got {accumulate}", "give 1 (no accumulation) or more"
            )
        every = trainer.get("check_val_every_n_epoch")
        if every is not None and every < 1:  # Lightning takes the epoch modulo it
            raise ConfigError(
                "trainer.check_val_every_n_epoch",
                f"must be >= 1 (or null), got {every}",
                "give 1 to validate every epoch",
            )
        checkpoint = config.get("checkpoint")
        if checkpoint is not None and checkpoint.get("save_last"):
            checkpoint.save_last = False  # last.ckpt is step_checkpoint's (resumable moments only)
        check_logger_available(trainer.get("logger"))
        if not config.get("ckpt_path"):  # a checkpoint's run recorded the preprocessing it used
            self._pretrained_data_defaults(config)
        if self.subcommand in EVALUATIONS:
            run = run_dir_of_checkpoint(config.get("ckpt_path"))
            # Evaluation restores the weights only: Lightning's note that the checkpoint's callbacks (of the
            # training) are absent is about resuming training, which this is not.
            warnings.filterwarnings("ignore", message=r".*when using `ckpt_path`, callbacks used to create")
            if run is not None:
                # The results go into the checkpoint's run directory (test_metrics.json, predictions.csv,
                # config.<command>N.yaml), not into a new version_N: the logger is not needed for them.
                self._evaluated_run = run
                trainer.logger = False
                trainer.default_root_dir = str(run)

    def _pretrained_data_defaults(self, config) -> None:
        """``model.init_from`` names hub weights: their preprocessing (timm's ``pretrained_cfg``: mean, std,
        interpolation, crop_pct) becomes the data's defaults where the config does not set them; a config
        that sets one differently keeps it, with one warning line (`mixer_lightning.preprocessing`)."""
        model, data = config.get("model"), config.get("data")
        init_from = (model.get("init_args") or {}).get("init_from") if model is not None else None
        data_args = data.get("init_args") if data is not None else None
        if not init_from or data_args is None:
            return
        defaults = {k: v for k, v in data_defaults(hub_preprocessing(str(init_from))).items() if k in data_args}
        applied, warning = apply_defaults(data_args, defaults, self._explicit_data, str(init_from))
        if not _first_process():
            return
        if applied:
            shown = ", ".join(f"{k}={list(v) if isinstance(v, (list, tuple)) else v}" for k, v in applied.items())
            print(f"data   {shown} (the preprocessing of {init_from})", flush=True)
        if warning:
            print(f"mixer: warning: {warning}", file=sys.stderr, flush=True)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        """Lightning's, with the project's console (`mixer_lightning.console`: the run header, plain-text
        progress in logs), the data facts written into checkpoints (fit), and no checkpoint callbacks
        when nothing is trained (validate/test/predict: they would only restore and warn about their
        state, "dirpath has changed")."""
        command = self.subcommand
        settings = self.config_init[command] if command else self.config_init
        if command in EVALUATIONS:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
            given = config.get("callbacks")
            given = given if isinstance(given, list) else [] if given is None else [given]
            config["callbacks"] = [c for c in given if not isinstance(c, ModelCheckpoint)]
            config["enable_checkpointing"] = False
        else:
            callbacks = [*callbacks, DataFacts()]
        ckpt = settings.get("ckpt_path")
        self._header = RunHeader(
            command or "",
            ckpt_path=ckpt if ckpt and ckpt not in SPECIAL_CKPT_PATHS else None,
            results=RESULTS.get(command or ""),
        )
        callbacks.append(self._header)
        progress = settings.get("progress") or {}
        if config.get("enable_progress_bar", True) is not False:
            line = progress_callback(progress.get("mode") or "auto", progress.get("every_n_steps") or 50)
            from lightning.pytorch.callbacks.progress import ProgressBar

            mine = [c for c in (config.get("callbacks") or []) if isinstance(c, ProgressBar)]
            if line is not None and not mine:
                callbacks.append(line)
        return super()._instantiate_trainer(config, callbacks)

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

    # ------------------------------------------------------------------------------ running

    def _run_subcommand(self, subcommand: str) -> None:
        """Run `subcommand`; on failure remove the run directory this process created if it holds no
        checkpoint; always release the run's lock."""
        try:
            super()._run_subcommand(subcommand)
        except BaseException:
            self._remove_created_run_dir()
            raise
        finally:
            if self._lock is not None:
                self._lock.release()

    def _remove_created_run_dir(self) -> None:
        run_dir = self._created_run_dir
        if run_dir is None or not run_dir.is_dir() or any(run_dir.rglob("*.ckpt")):
            return
        shutil.rmtree(run_dir, ignore_errors=True)
        if self._created_root is None:
            return
        for folder in run_dir.parents:  # the folders this run made above it, if they are empty
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()
            if folder == self._created_root:
                break

    def _check_ckpt_path(self) -> None:
        path = self.config_init[self.subcommand].get("ckpt_path")
        if path and path not in SPECIAL_CKPT_PATHS:
            check_checkpoint(path, self.model)

    def _check_optimizers(self) -> None:
        """Build the optimiser and schedule once on the side: a negative learning rate or weight decay is
        a one-line error now, before the run directory exists, not a traceback after it."""
        configure = getattr(self.model, "configure_optimizers", None)
        if not isinstance(self.model, ClassifierModule) or configure is None:
            return
        try:
            configure()
        except ValueError as error:  # torch.optim: "Invalid learning rate: -0.1", "Invalid weight_decay value: -1"
            problem = str(error).splitlines()[0].rstrip(".")
            argument = next((name for words, name in OPTIMIZER_WORDS if words in problem.lower()), None)
            field = f"model.optimizer.init_args.{argument}" if argument else "model.optimizer"
            raise ConfigError(
                field,
                problem[0].lower() + problem[1:],
                "give a value the optimiser accepts (learning rate and weight decay >= 0)",
            ) from None
        except TypeError as error:
            raise ConfigError(
                "model.optimizer",
                str(error).splitlines()[0],
                "check the arguments of model.optimizer and model.lr_scheduler",
            ) from None

    def _claim_run_dir(self) -> None:
        """The run directory this command writes: created now if new (the next free version_N, atomic),
        resumed if pinned; locked for fit (one writer per run); its config file name never replaces
        another's (config.yaml, config.resume<N>.yaml, config.<command><N>.yaml)."""
        if self._evaluated_run is not None:
            self._run_dir = self._evaluated_run
            if _first_process() and not self.trainer.fast_dev_run:
                self._name_config(self._evaluated_run, existing=True)
            return
        if not _first_process() or not self.trainer.loggers or self.trainer.fast_dev_run:
            return
        logger = self.trainer.loggers[0]
        if not hasattr(logger, "_version") or not hasattr(logger, "root_dir"):
            return  # a logger without versioned directories (e.g. W&B): Lightning's default_root_dir
        root = Path(logger.root_dir)
        missing = [folder for folder in (root, *root.parents) if not folder.exists()]
        self._created_root = missing[-1] if missing else None  # the outermost folder this run makes
        version = logger._version
        if version is None:
            run_dir = create_next_version(root)
            logger._version = int(run_dir.name.split("_")[1])
            self._created_run_dir = run_dir
        else:
            run_dir = root / (version if isinstance(version, str) else f"version_{version}")
            if not run_dir.is_dir():
                run_dir.mkdir(parents=True)
                self._created_run_dir = run_dir
        self._run_dir = run_dir
        existing = self._created_run_dir is None and (run_dir / "config.yaml").exists()
        if self.subcommand == "fit":
            self._lock = RunLock(run_dir).acquire()
            for folder in (run_dir, run_dir / "checkpoints"):
                remove_orphans(folder)
        self._name_config(run_dir, existing)
        if self.subcommand == "fit" and self.config[self.subcommand].get("ckpt_path") and existing:
            print(f"Resuming {run_dir} from {self.config[self.subcommand].ckpt_path}")
            # The checkpoints folder holds this run's own checkpoints: Lightning's "exists and is not
            # empty" is about another run's, which a resume is not.
            warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty")

    def _name_config(self, run_dir: Path, existing: bool) -> None:
        """The name of the config this command saves in `run_dir`: config.yaml for a new run, else
        config.resume<N>.yaml (fit) or config.<command><N>.yaml, never replacing one."""
        stem = "resume" if self.subcommand == "fit" else self.subcommand
        name = "config.yaml"
        if existing:
            number = 1
            while (run_dir / f"config.{stem}{number}.yaml").exists():
                number += 1
            name = f"config.{stem}{number}.yaml"
        for callback in self.trainer.callbacks:
            if isinstance(callback, SaveConfigCallback):
                callback.config_filename = name

    def _check_prediction_output(self) -> None:
        for callback in self.trainer.callbacks:
            if isinstance(callback, PredictionWriter) and callback.output:
                check_output_file(
                    callback.output,
                    "prediction_writer.output",
                    callback.overwrite,
                    "--prediction_writer.overwrite true",
                )

    def before_fit(self) -> None:
        self._check_ckpt_path()
        self._check_optimizers()
        self._claim_run_dir()

    def before_validate(self) -> None:
        self._check_ckpt_path()
        self._claim_run_dir()

    def before_test(self) -> None:
        self._check_ckpt_path()
        self._claim_run_dir()

    def before_predict(self) -> None:
        self._check_ckpt_path()
        self._check_prediction_output()
        self._claim_run_dir()
        files = getattr(self.datamodule, "predict_root", None) is not None
        for callback in self.trainer.callbacks:
            if isinstance(callback, PredictionWriter) and _first_process() and not self.trainer.fast_dev_run:
                folder = self._run_dir or Path(self.trainer.default_root_dir)
                callback.resolved = callback.target(str(folder), files)
                if self._header is not None:
                    self._header.results = f"predictions: {callback.resolved.name}"

    def _write_json(self, name: str, content: dict, announce: str | None = None) -> None:
        """Write `content` to ``<run dir>/<name>`` (what `mixer sweep report` and scripts read), atomically;
        with `announce`, say where (``Test metrics: runs/x/version_0/test_metrics.json``)."""
        log_dir = run_directory(self.trainer)  # a broadcast under DDP: every process must ask, not only rank 0
        if self.trainer.is_global_zero and not self.trainer.fast_dev_run and log_dir:
            write_text(Path(log_dir) / name, json.dumps(content, indent=2) + "\n", field=name)
            if announce:
                print(f"{announce}: {relative(Path(log_dir) / name)}", flush=True)

    def _stage_metrics(self, stage: str) -> dict[str, float]:
        return {k: float(v) for k, v in self.trainer.callback_metrics.items() if k.startswith(f"{stage}/")}

    def after_fit(self) -> None:
        checkpoint = self.trainer.checkpoint_callback
        summary: dict = {"epochs": self.trainer.current_epoch, "steps": self.trainer.global_step}
        summary.update(self._stage_metrics("val"))
        log_dir = run_directory(self.trainer)  # a broadcast under DDP: every process must ask, not only rank 0
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
        self._write_json("val_metrics.json", self._stage_metrics("val"), "Validation metrics")

    def after_test(self) -> None:
        self._write_json("test_metrics.json", self._stage_metrics("test"), "Test metrics")


def _epilog() -> str:
    return "project commands (mixer COMMAND --help):\n" + summary()


def run(argv: list[str]) -> None:
    """``mixer fit|validate|test|predict ...`` with the arguments `argv`."""
    # LightningCLI reads the arguments from sys.argv, where Lightning's DDP launcher also finds them
    # to start the other processes (`[python, sys.argv[0], *sys.argv[1:]]`): they must be there.
    saved_argv, sys.argv = sys.argv, [sys.argv[0], *argv]
    try:
        with warnings.catch_warnings():  # the warning filters a run adds (quiet_libraries, ...) end with it
            quiet_libraries()
            MixerCLI(
                ClassifierModule,
                LightningDataModule,  # ImageDataModule, or PredictionData (image files, facts from a checkpoint)
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # the optimiser and schedule are model arguments
                save_config_callback=SaveConfig,
                trainer_defaults=TRAINER_DEFAULTS,
                seed_everything_default=0,
                parser_kwargs={
                    "description": DESCRIPTION,
                    "epilog": _epilog(),
                    "prog": "mixer",
                    "formatter_class": HelpFormatter,
                    "exit_on_error": False,
                    "allow_abbrev": False,
                    # Argument errors are raised (one line, `mixer_lightning.errors.translate_library_error`),
                    # not printed after the whole usage text; no abbreviations (--trainer.max_epoch is a
                    # mistake, said so with a did-you-mean, not silently --trainer.max_epochs).
                    **{name: {"exit_on_error": False, "allow_abbrev": False} for name in SUBCOMMANDS},
                },
            )
    finally:
        sys.argv = saved_argv
