"""The arguments of ``mixer fit|validate|test|predict`` before jsonargparse reads them:

- `configs_first`: the ``--config`` files move in front of every flag, so that a flag wins over a
  config file wherever it stands;
- `evaluation_arguments`: validate/test/predict of a checkpoint complete themselves from it (its run's
  config.yaml, or its model class and data facts);
- `check_config_files`: every config file given is readable UTF-8 YAML naming only trusted classes,
  checked before jsonargparse imports what it names;
- `check_argument_values`: no value, and no string in a config file or a file named inside one, names
  a FIFO, a device or a socket, and no value is a YAML text beyond bounds (issue 25, RC15).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from mixer_lightning.cli.rundirs import run_dir_of_checkpoint
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.checkpoints import SPECIAL_CKPT_PATHS
from mixer_lightning.safety.config_files import load_configs, special_file_kind, yaml_bounds_problem
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
        why = "carries no data facts (mean, std, image size) and " if files else ""
        raise ConfigError(
            "config",
            f"none given, and {ckpt!r} {why}lies in no run directory (no config.yaml beside its checkpoints/ folder)",
            "give --config, e.g. the config it was trained with",
        )
    if run is None and "--model" not in options:  # temporary (issue 44, H3): the network the checkpoint names
        net = ((checkpoint.get("hyper_parameters") or {}) if checkpoint is not None else {}).get("net")
        if not net:
            raise ConfigError("config", f"none given, and {ckpt!r} names no network", "give --config")
        added += ["--model.net", json.dumps(net)]
    return [args[0], *added, *args[1:]]


# Files named inside config files are followed this many files deep, and read when at most this large
# (what jsonargparse would take for a config; a larger file is data, which it does not read as one).
NESTED_FILES_DEPTH = 8
NESTED_FILE_BYTES = 1 << 20


def check_argument_values(given: list[str]) -> None:
    """Refuse, in one line naming the option, any value of `given` (the arguments after the subcommand)
    that names a FIFO, a character or block device or a socket, or that is a YAML text beyond the bounds
    of `mixer_lightning.safety.config_files.yaml_bounds_problem`; the same for every string inside the
    small files the values name (config files and the files named inside them, recursively).

    jsonargparse reads as a config any existing file given to ``-c``, to a group or class-typed option
    (``--data FILE``, ``--trainer.callbacks FILE``) or named as such a value inside a config, FIFOs
    included: it would wait for a writer, forever. A value that cannot name a file (a name over 255
    bytes, ENAMETOOLONG) is only a value."""
    if not isinstance(given, (list, tuple)):
        return
    values = [str(value) for value in given]
    seen: set[str] = set()
    for i in range(1, len(values)):
        option, value = _option_value(values, i)
        if option is None:
            continue
        field = "config" if option in ("-c", "--config") else option.lstrip("-") or "arguments"
        if not _check_path(value, field, Path("."), None, 0, seen):
            problem = yaml_bounds_problem(value)
            if problem is not None:
                raise ConfigError(field, f"the value {problem}", "fix the value")


def _option_value(values: list[str], i: int) -> tuple[str | None, str]:
    """(option, value) when ``values[i]`` is a value (``--name value``, ``--name=value``, a value after no
    option: option ``arguments``), else (None, "")."""
    value = values[i]
    if value.startswith("--") and "=" in value:
        return tuple(value.split("=", 1))  # type: ignore[return-value]
    if value.startswith("-") and value != "-":
        return None, ""
    before = values[i - 1]
    option = before if before.startswith("-") and before != "-" and "=" not in before else "arguments"
    return option, value


def _check_path(value: str, field: str, base: Path, named_in: Path | None, depth: int, seen: set[str]) -> bool:
    """Whether `value` names an existing file or folder (relative to the folder of the file it is written
    in, `base`, as jsonargparse resolves it, or to the working directory); a FIFO, device or socket is a
    `ConfigError` on `field`, and a small file is read for the strings it holds (`_check_file`)."""
    if not value or len(value) > 4096 or "\n" in value or "\0" in value:
        return False
    where = f" (named in {str(named_in)!r})" if named_in is not None else ""
    found = False
    for candidate in dict.fromkeys([base / value, Path(value)]):
        kind = special_file_kind(candidate)
        if kind is not None:  # a FIFO blocks jsonargparse's read, a device never ends it
            fix = "give the path of a YAML file" if field == "config" else "give the path of a regular file or a folder"
            raise ConfigError(field, f"{value!r}{where} is {kind} (not a regular file)", fix)
        if os.path.isfile(candidate):
            _check_file(candidate, field, depth, seen)
            found = True
        found = found or os.path.isdir(candidate)
    return found


def _check_file(path: Path, field: str, depth: int, seen: set[str]) -> None:
    """The YAML text of the small file `path` within bounds, and each string in it checked (`_check_path`)
    with `field` followed by its key; anything that is no UTF-8 YAML is left to whoever reads it."""
    try:
        real = os.path.realpath(path)
        if real in seen or depth >= NESTED_FILES_DEPTH or os.path.getsize(path) > NESTED_FILE_BYTES:
            return
        seen.add(real)
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return
    problem = yaml_bounds_problem(text)
    if problem is not None:
        raise ConfigError(field, f"{str(path)!r} {problem}", "fix the file")
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    top = "" if field == "config" else field
    for key, string in _strings(tree, top):
        _check_path(string, key or field, path.parent, path, depth + 1, seen)


def _strings(tree: Any, where: str) -> Iterator[tuple[str, str]]:
    """(dotted key, value) of every string in the parsed YAML `tree` (within bounds: at most
    `MAX_YAML_VALUES` values)."""
    if isinstance(tree, str):
        yield where, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _strings(value, f"{where}[{i}]")


def check_config_files(given: list[str]) -> list[str]:
    """Check every config file in the arguments `given` (``--config``, or a file for a group such as
    ``--model m.yaml``) before jsonargparse reads it: readable UTF-8 YAML mapping, class paths in
    trusted packages (`mixer_lightning.safety.trust`), since jsonargparse imports them; and every value
    and every string of the files they name (`check_argument_values`). Returns the config files."""
    check_argument_values(given)
    files = []
    values = [str(value) for value in given]
    for i, value in enumerate(values):
        # Every --config file whatever its name, and any other YAML/JSON file given for a group
        # (--model m.yaml), is read and checked here for the friendly early line. What guarantees
        # that nothing untrusted is imported, from any file however named or nested, is
        # jsonargparse's import-path policy (`mixer_lightning.safety.trust.enforce_import_policy`).
        is_config = value.startswith("--config=") or (i > 0 and values[i - 1] in ("--config", "-c"))
        name = value.split("=", 1)[1] if value.startswith("--config=") else value
        # os.path, not pathlib: a value with a name over 255 bytes is no file (pathlib raises ENAMETOOLONG)
        if is_config and os.path.exists(name) and not os.path.isfile(name):
            raise ConfigError("config", f"{name!r} is not a regular file", "give the path of a YAML file")
        if os.path.isfile(name) and (is_config or name.lower().endswith((".yaml", ".yml", ".json"))):
            check_class_paths(load_configs([name], "config"), "config", repr(name))
            files.append(name)
    return files
