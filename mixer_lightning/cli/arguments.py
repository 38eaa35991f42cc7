"""The arguments of ``mixer fit|validate|test|predict`` before jsonargparse reads them:

- `configs_first`: the ``--config`` files move in front of every flag, so that a flag wins over a
  config file wherever it stands;
- `evaluation_arguments`: validate/test/predict of a checkpoint complete themselves from it (its run's
  config.yaml, or its model class and data facts);
- `check_config_files`: every config file given is readable UTF-8 YAML naming only trusted classes,
  checked before jsonargparse imports what it names.
"""

from __future__ import annotations

import json
from pathlib import Path

from mixer_lightning.cli.rundirs import run_dir_of_checkpoint
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.checkpoints import SPECIAL_CKPT_PATHS
from mixer_lightning.safety.config_files import load_configs
from mixer_lightning.safety.trust import check_class_paths
from mixer_lightning.tasks.loading import read_checkpoint

SUBCOMMANDS = ("fit", "validate", "test", "predict")
EVALUATIONS = ("validate", "test", "predict")
# Facts of the data that the model must agree with, copied into every model's init arguments.
LINKED_FROM_DATA = ("num_classes", "image_size", "in_chans")


def option_values(args: list[str]) -> dict[str, str]:
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


def configs_first(args: list[str]) -> list[str]:
    """`args` with every ``--config X``, ``--config=X`` and ``-c X`` moved right after the subcommand,
    in their own order; the other arguments keep theirs.

    jsonargparse applies arguments left to right and a config file sets every key it holds, so a flag
    before a ``--config`` was applied and then silently overwritten: ``mixer test --ckpt_path BEST
    --config RUN/config.yaml`` tested an untrained model (the run's config says ``ckpt_path: null``),
    and a model flag before the ``--config`` naming the model class was parsed against the default
    class. Flags win over config files wherever they stand; among config files, the later wins."""
    if not args or args[0] not in SUBCOMMANDS:
        return args
    configs: list[str] = []
    rest: list[str] = []
    i = 1
    while i < len(args):
        arg = args[i]
        if arg in ("--config", "-c") and i + 1 < len(args):
            configs += [arg, args[i + 1]]
            i += 2
            continue
        (configs if arg.startswith("--config=") else rest).append(arg)
        i += 1
    return [args[0], *configs, *rest]


def evaluation_arguments(args: list[str]) -> list[str]:
    """The arguments of ``mixer validate|test|predict`` completed from the checkpoint they evaluate:

    - without ``--config``, a ``--ckpt_path`` inside a run directory brings that run's ``config.yaml``
      (checked like any config file given: `check_config_files`);
    - ``predict`` of image files (``--data.predict_root``) without ``--config`` reads them with
      `mixer_lightning.data.predict.PredictionData`, made of the facts the checkpoint carries (its
      ``data`` entry): no data config, no training data needed;
    - a checkpoint outside any run directory brings its model class (its hyper-parameters the rest,
      as for any ``--ckpt_path``).
    Other arguments are returned unchanged; the user's own flags come last, so they win."""
    if not args or args[0] not in EVALUATIONS:
        return args
    options = option_values(args[1:])
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


def check_config_files(given: list[str]) -> list[str]:
    """Check every config file in the arguments `given` (``--config``, or a file for a group such as
    ``--model m.yaml``) before jsonargparse reads it: readable UTF-8 YAML mapping, class paths in
    trusted packages (`mixer_lightning.safety.trust`), since jsonargparse imports them. Returns the files."""
    files = []
    values = [str(value) for value in given]
    for i, value in enumerate(values):
        # Every --config file whatever its name, and any other YAML/JSON file given for a group
        # (--model m.yaml), is read and checked here for the friendly early line. What guarantees
        # that nothing untrusted is imported, from any file however named or nested, is
        # jsonargparse's import-path policy (`mixer_lightning.safety.trust.enforce_import_policy`).
        is_config = value.startswith("--config=") or (i > 0 and values[i - 1] in ("--config", "-c"))
        name = value.split("=", 1)[1] if value.startswith("--config=") else value
        if is_config and Path(name).exists() and not Path(name).is_file():
            raise ConfigError("config", f"{name!r} is not a regular file", "give the path of a YAML file")
        if Path(name).is_file() and (is_config or name.lower().endswith((".yaml", ".yml", ".json"))):
            check_class_paths(load_configs([name], "config"), "config", repr(name))
            files.append(name)
    return files
