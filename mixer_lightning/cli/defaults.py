"""What a ``mixer fit|validate|test|predict`` command line is completed with before jsonargparse parses it: an
evaluation of a checkpoint takes its run's config (or, outside a run, the network its hyper-parameters name),
and hub weights given as ``model.init_from`` bring their preprocessing as the data's defaults."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mixer_lightning.callbacks.run import EVALUATIONS, Run, run_dir_of_checkpoint
from mixer_lightning.errors import ConfigError


def completed_arguments(argv: list[str], run: Run) -> list[str]:
    """validate/test/predict of a checkpoint without ``--config``: its run's config.yaml first (the user's flags
    after it win); outside a run, the network its hyper-parameters name; image files to predict read as the
    checkpoint's evaluation images (`PredictionData`, from the data facts it carries). The checkpoint is read
    by `run`, which keeps it for the command."""
    options, _ = _options().parse_known_args(argv[1:])
    if argv[0] not in EVALUATIONS or options.config or not options.ckpt_path or options.ckpt_path == "last":
        return argv
    folder = run_dir_of_checkpoint(options.ckpt_path)
    added = ["--config", str(folder / "config.yaml")] if folder is not None else []
    checkpoint = run.read(options.ckpt_path) if folder is None or options.predict_root else None
    facts = (checkpoint or {}).get("data")
    if argv[0] == "predict" and options.predict_root and isinstance(facts, dict) and not options.data:
        from mixer_lightning.data.predict import PredictionData

        added += ["--data", "mixer_lightning.data.predict.PredictionData"]
        for key, value in PredictionData.arguments_from(facts).items():
            added += [f"--data.{key}", value if isinstance(value, str) else json.dumps(value)]
    elif folder is None and not options.data:
        raise ConfigError("config", f"none given, and {options.ckpt_path!r} lies in no run directory", "give --config")
    if folder is None:
        hparams = checkpoint["hyper_parameters"]
        added += ["--model.net", json.dumps(hparams.get("net"))] if hparams.get("net") else []
    return [argv[0], *added, *argv[1:]]


def _options() -> argparse.ArgumentParser:
    """The arguments `completed_arguments` reads, by argparse (the one parse before jsonargparse's)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-c", "--config", action="append")
    parser.add_argument("--ckpt_path")
    parser.add_argument("--data")
    parser.add_argument("--data.predict_root", "--data.init_args.predict_root", dest="predict_root")
    return parser


def pretrained_data_defaults(config: Any) -> None:
    """``model.init_from`` naming hub weights: their preprocessing (mean, std, interpolation, crop) becomes the
    data's where the config leaves the data module's own default."""
    init_from, data = config.model.get("init_from"), config.get("data")
    if not init_from or data is None or not hasattr(data, "init_args"):
        return
    from mixer_lightning.weights.preprocessing import data_defaults, hub_preprocessing

    given = set_data_keys(sys.argv[1:])
    applied = {}
    for key, value in data_defaults(hub_preprocessing(str(init_from))).items():
        if key in data.init_args and key not in given:
            data.init_args[key] = tuple(value) if isinstance(value, list) else value
            applied[key] = value
    if applied:
        print(f"data   {', '.join(f'{k}={v}' for k, v in applied.items())} (the preprocessing of {init_from})")


def set_data_keys(argv: list[str]) -> set[str]:
    """The data arguments a flag or a ``--config`` file of `argv` sets (a value equal to the default included)."""
    keys = {arg[2:].split("=")[0].rsplit(".", 1)[-1] for arg in argv if arg.startswith("--data.")}
    parts = [key.split(".") for key in config_keys(argv)]
    return keys | {part[2] for part in parts if len(part) == 3 and part[:2] == ["data", "init_args"]}


def config_keys(argv: list[str]) -> list[str]:
    """The dotted keys (``trainer.max_epochs``) of the values that the ``--config`` files of `argv` set."""

    def keys(value: Any, prefix: str = "") -> list[str]:
        items = value.items() if isinstance(value, dict) else ()
        return [k for key, sub in items for k in (keys(sub, f"{prefix}{key}.") or [f"{prefix}{key}"])]

    found = []
    for path in _options().parse_known_args(argv[1:])[0].config or []:
        try:
            found += keys(yaml.safe_load(Path(path).read_text()) if Path(path).is_file() else None)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):  # jsonargparse says what is wrong with it
            continue
    return found
