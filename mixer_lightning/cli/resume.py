"""``--ckpt_path``: which checkpoint a command starts from, and what a resumed run may change.

Runs right after the arguments are parsed (`MixerCLI.parse_arguments`), before Lightning reads the
checkpoint's hyper-parameters over the config (LightningCLI's ``_parse_ckpt_path``: the checkpoint's
model wins over the config's):

- a requeued SLURM job's ``fit`` resumes the run its first start made (`resume_requeued_run`);
- ``--ckpt_path last``: the last.ckpt of the pinned version, else of the highest version_N
  (`mixer_lightning.safety.rundir.find_last_run`); ``fit`` continues that run in its own directory;
- the checkpoint file is read and checked (one line for a missing, damaged or untrusted file) before
  jsonargparse imports the names in its hyper-parameters;
- a resumed ``fit`` continues the interrupted run or is refused: a model argument, the seed or a data
  argument that decides the trajectory, given with another value, is refused (`check_resumed_run`);
- the optimiser and schedule the config gives are kept (`arguments_not_in_checkpoints`), since the
  checkpoint's hyper-parameters leave them out.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from mixer_lightning.cli.arguments import LINKED_FROM_DATA
from mixer_lightning.cli.rundirs import first_process, logger_args, run_dir_of_checkpoint
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.checkpoints import SEED_KEY, SPECIAL_CKPT_PATHS
from mixer_lightning.safety.config_files import load_configs
from mixer_lightning.safety.rundir import find_last_run
from mixer_lightning.safety.slurm import job_id, requeued_run, restart_count
from mixer_lightning.tasks.loading import read_checkpoint

# Model arguments a resumed run may give differently from its checkpoint: the checkpoint holds the
# trained weights (init_from is not read again) and the optimiser/schedule states.
RESUME_MAY_DIFFER = (*LINKED_FROM_DATA, "init_from", "optimizer", "lr_scheduler")
# Data arguments a resumed run may give differently: how and where the same data is read, and the
# evaluation batch; none changes what is trained on, in which order, or the figures logged.
DATA_MAY_DIFFER = (
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "eval_batch_size",
    "pipeline",
    "cache_dir",
    "tensor_limit_gb",
    "download",
    "root",
    "predict_root",
)


def resolve_checkpoint(config: Any, facts: dict | None = None) -> dict:
    """Resolve and check ``--ckpt_path`` of the parsed `config` (the whole config, with ``subcommand``);
    returns the model arguments to restore after Lightning re-parses the model from the checkpoint
    (`restore_arguments`). The checkpoint's ``epoch`` and ``global_step`` go into `facts` (what an
    evaluation's results record: `mixer_lightning.cli.results.checkpoint_record`)."""
    subcommand = config.get("subcommand")
    config = config[subcommand] if subcommand else None
    path = config.get("ckpt_path") if config is not None else None
    if subcommand == "fit" and path in (None, "last"):  # a requeued SLURM job goes on with its own run
        resume_requeued_run(config)
        path = config.get("ckpt_path")
    if path == "last":  # fit: resume that run in its directory; validate/test/predict: evaluate it
        resume_last_run(config, resume=subcommand == "fit")
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
        if facts is not None:
            facts.update({key: checkpoint.get(key) for key in ("epoch", "global_step")})
        if subcommand == "fit":
            check_resumed_run(config, checkpoint, path)
    return arguments_not_in_checkpoints(config)


def arguments_not_in_checkpoints(config: Any) -> dict:
    """Temporary (issue 44): the checkpoints hold the optimiser and schedule now."""
    return {}


def restore_arguments(config: Any, kept: dict) -> None:
    """Put the arguments `arguments_not_in_checkpoints` kept back into the (re-parsed) model config."""
    if kept:
        init_args = config.model.init_args
        for name, value in kept.items():
            init_args[name] = value


def _plain(value: Any) -> Any:
    """`value` with tuples as lists and namespaces as dicts, for comparing a config with hparams."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _signature_defaults(cls: type) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if parameter.default is not inspect.Parameter.empty:
                    defaults[name] = parameter.default
    return defaults


def check_resumed_run(config: Any, checkpoint: dict, path: str) -> None:
    """A resumed ``fit`` continues exactly the interrupted run, or is refused: the same model
    (`check_resumed_model`), seed (`check_resumed_seed`) and data (`check_resumed_data`)."""
    check_resumed_model(config, checkpoint, path)
    check_resumed_seed(config, checkpoint, path)
    check_resumed_data(config, checkpoint, path)


def saved_seed(checkpoint: dict, path: str) -> int | None:
    """The seed of the run `checkpoint` belongs to: recorded in the checkpoint (`DataFacts`), else, for
    a checkpoint written before, in its run's config.yaml; None if unknown or not seeded."""
    seed = checkpoint.get(SEED_KEY)
    if seed is None and SEED_KEY not in checkpoint:
        run = run_dir_of_checkpoint(path)
        if run is not None:
            seed = load_configs([str(run / "config.yaml")], "ckpt_path").get("seed_everything")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def check_resumed_seed(config: Any, checkpoint: dict, path: str) -> None:
    """``seed_everything`` of a resumed run is that of the run (the data order and the augmentation
    streams follow it): ``true`` (a random seed) takes the run's; another number is refused."""
    saved = saved_seed(checkpoint, path)
    given = config.get("seed_everything")
    if saved is None or given is False or given == saved:
        return
    if given is True:
        config.seed_everything = saved
        return
    raise ConfigError(
        "seed_everything",
        f"is {given}, but the run being resumed has {saved} ({path})",
        f"a resumed run keeps its seed: give --seed_everything {saved}, or start a new run",
    )


def check_resumed_data(config: Any, checkpoint: dict, path: str) -> None:
    """A resumed run reads the same data in the same order: a data argument outside `DATA_MAY_DIFFER`
    given with another value than the checkpoint's ``datamodule_hyper_parameters`` is refused (the
    data module is built from the config, not from the checkpoint). ``null`` where the checkpoint has
    a value is the value resolved from the data (``image_size``: the dataset's own)."""
    saved = checkpoint.get("datamodule_hyper_parameters")
    data = config.get("data")
    if not isinstance(saved, dict) or data is None:
        return
    saved_class, given_class = str(saved.get("_class_path") or ""), str(data.get("class_path") or "")
    if saved_class and given_class and saved_class.rsplit(".", 1)[-1] != given_class.rsplit(".", 1)[-1]:
        raise ConfigError(
            "data.class_path",
            f"{given_class} differs from the {saved_class} of the run being resumed ({path})",
            "a resumed run keeps its data: use the run's config.yaml, or start a new run",
        )
    for name, value in _plain(data.get("init_args") or {}).items():
        if name in DATA_MAY_DIFFER or name.startswith("_") or name not in saved or value is None:
            continue
        if value != _plain(saved[name]):
            raise ConfigError(
                f"data.{name}",
                f"is {value!r}, but the run being resumed has {saved[name]!r} ({path})",
                f"a resumed run keeps its data and their order: give --data.{name} {_flag_value(saved[name])}, "
                "or start a new run",
            )


def _flag_value(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def check_resumed_model(config: Any, checkpoint: dict, path: str) -> None:
    """Temporary (issue 44): a resumed run's model is the checkpoint's (Lightning's _parse_ckpt_path)."""


def resume_last_run(config: Any, resume: bool = True) -> None:
    """``--ckpt_path last``: the last.ckpt of the pinned version, else of the highest version_N
    (`mixer_lightning.safety.rundir.find_last_run`); `resume` (fit) continues the run in its own directory."""
    init_args = logger_args(config)
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


def resume_requeued_run(config: Any) -> None:
    """A SLURM job requeued after a preemption (`mixer_lightning.safety.slurm`) resumes the run its first start
    made (same version_N, same TensorBoard stream) from its last.ckpt, with the same command line."""
    init_args = logger_args(config)
    if init_args is None:
        return
    run = requeued_run(Path(init_args.save_dir) / str(init_args.get("name") or ""))
    last = run / "checkpoints" / "last.ckpt" if run is not None else None
    if last is None or not last.is_file():
        return
    init_args.version = run.name
    config.ckpt_path = str(last)
    if first_process():
        print(f"SLURM job {job_id()} requeued (restart {restart_count()}): resuming {run}", flush=True)
