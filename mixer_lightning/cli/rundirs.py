"""The run directory a ``mixer fit|validate|test|predict`` writes, claimed only after every input is
checked (docs/reliability.md):

- a new run takes the next free ``version_N`` by creating it (`mixer_lightning.safety.rundir`); a
  pinned version that holds a run is resumed (``--ckpt_path``) or refused, never overwritten;
- ``fit`` holds the run's lock while it runs (one writer per run);
- validate/test/predict of a checkpoint inside a run directory write their results into that run;
- the config this command saves never replaces another's (config.yaml, config.resume<N>.yaml,
  config.<command><N>.yaml);
- a run that fails before its first checkpoint removes the directory it created.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import SaveConfigCallback

from mixer_lightning.callbacks.checkpoints import SPECIAL_CKPT_PATHS
from mixer_lightning.callbacks.slurm import mark_run
from mixer_lightning.cli.adapter import logger_version, pin_logger_version, versioned
from mixer_lightning.errors import ConfigError, ResourceError, process_rank
from mixer_lightning.safety.atomic import remove_orphans
from mixer_lightning.safety.rundir import RunLock, create_next_version, holds_a_run, version_number


def first_process() -> bool:
    """Whether this is the process that owns the run directory: global rank 0 (Lightning reads RANK,
    LOCAL_RANK, SLURM_PROCID from the environment), and on the first node of a multi-node launch."""
    first_node = all(os.environ.get(name, "0") in ("", "0") for name in ("NODE_RANK", "GROUP_RANK"))
    return process_rank() == 0 and first_node


def run_dir_of_checkpoint(path: Any) -> Path | None:
    """The run directory a checkpoint lies in (``RUN/checkpoints/NAME.ckpt`` beside ``RUN/config.yaml``), or None."""
    if not path or str(path) in (*SPECIAL_CKPT_PATHS, "last"):
        return None
    path = Path(path)
    run = path.parent.parent
    return run if path.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def logger_args(config: Any) -> Any:
    """The ``init_args`` of the run's first logger when it has a ``save_dir`` (where runs are found), else None."""
    logger = config.trainer.get("logger")
    if isinstance(logger, list):
        logger = logger[0] if logger else None
    init_args = getattr(logger, "init_args", None) if logger not in (None, True, False) else None
    return init_args if init_args is not None and "save_dir" in init_args else None


def check_pinned_version(config: Any) -> None:
    """A pinned version (``trainer.logger.init_args.version``) that holds a run is resumed (--ckpt_path)
    or refused, never overwritten."""
    init_args = logger_args(config)
    version = init_args.get("version") if init_args is not None else None
    if version is None or config.get("ckpt_path"):
        return
    name = version if isinstance(version, str) else f"version_{version}"
    run_dir = Path(init_args.save_dir) / str(init_args.get("name") or "") / name
    if holds_a_run(run_dir):
        raise ConfigError(
            "trainer.logger.init_args.version",
            f"{str(run_dir)!r} holds a run already; it is not overwritten",
            "resume it with --ckpt_path last, or choose another version (or none: the next free one)",
        )


def evaluate_in_run(config: Any) -> Path | None:
    """validate/test/predict of a checkpoint inside a run directory: the results go there (test_metrics.json,
    predictions.csv, config.<command>N.yaml), not into a new version_N, so no logger is needed. Returns that run."""
    run = run_dir_of_checkpoint(config.get("ckpt_path"))
    # Evaluation restores the weights only: Lightning's note that the checkpoint's callbacks (of the
    # training) are absent is about resuming training, which this is not.
    warnings.filterwarnings("ignore", message=r".*when using `ckpt_path`, callbacks used to create")
    if run is not None:
        config.trainer.logger = False
        config.trainer.default_root_dir = str(run)
    return run


def loggerless_run(config: Any, save_dir: str, name: str) -> Path | None:
    """``fit`` with ``trainer.logger: false`` (no metric logs) gets a run directory all the same,
    ``<default_root_dir>/<save_dir>/<name>/version_N`` (the next free N): its config, checkpoints and
    summaries go there, not into the working directory, where a second run would meet the first's
    config.yaml. To be the trainer's ``default_root_dir`` (Lightning's folder when there is no logger);
    created by `RunClaim.claim` once every input is checked. None when the run has a logger."""
    trainer = config.trainer
    logger = trainer.get("logger")
    if not (logger is False or logger == []) or trainer.get("fast_dev_run"):
        return None
    experiment = Path(trainer.get("default_root_dir") or ".") / save_dir / name
    taken = [version_number(p.name) for p in experiment.iterdir()] if experiment.is_dir() else []
    return experiment / f"version_{max((n for n in taken if n is not None), default=-1) + 1}"


def check_run_root(config: Any, loggerless: Path | None = None) -> None:
    """The folders run directories go into (the logger's ``save_dir`` and ``save_dir/name``, or those of
    a `loggerless_run`) are folders, or can be made: a file in their place is one line naming the
    field, before anything is written (mkdir would fail after the model and data are built)."""
    init_args = logger_args(config)
    if config.trainer.get("fast_dev_run"):
        return
    if init_args is not None:
        save_dir = Path(init_args.save_dir)
        levels = [(save_dir, "trainer.logger.init_args.save_dir")]
        if init_args.get("name"):
            levels.append((save_dir / str(init_args.name), "trainer.logger.init_args.name"))
    elif loggerless is not None:
        levels = [(loggerless.parent, "trainer.default_root_dir")]
    else:
        return
    for path, field in levels:
        existing = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), None)
        if existing is not None and not existing.is_dir():
            kind = "a file" if existing.is_file() else "not a folder"
            raise ConfigError(
                field,
                f"{str(existing)!r} is {kind}, not a folder for run directories",
                f"give a folder for run directories, or move {str(existing)!r} away",
            )


class RunClaim:
    """The run directory one command writes: claimed (`claim`) after every input is checked, released
    (`release`) at the end, and removed (`remove_if_empty`) if the run fails before its first checkpoint."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self.created: Path | None = None  # the run directory this process created
        self.created_root: Path | None = None  # the outermost folder above it this process created
        self.lock: RunLock | None = None
        self.loggerless: Path | None = None  # the run directory of a fit without a logger (`loggerless_run`)
        self.checkpoint_callbacks: list = []  # the trainer's, which may write outside the run directory
        self.claimed_at: float | None = None
        self.evaluation_config: tuple[Any, Path] | None = None  # (SaveConfig, its file) in an evaluated run

    def claim(self, trainer: Any, command: str, evaluated_run: Path | None, resuming: str | None) -> None:
        """Claim the directory `command` writes: `evaluated_run` (validate/test/predict of a checkpoint in a
        run), or the logger's version (created now if new, the next free version_N, atomically); locked for
        fit; `resuming` is the checkpoint a fit continues from."""
        if evaluated_run is not None:
            self.run_dir = evaluated_run
            if first_process() and not trainer.fast_dev_run:
                saver = name_config(trainer, evaluated_run, command, existing=True)
                if saver is not None:
                    self.evaluation_config = (saver, evaluated_run / saver.config_filename)
            return
        if not first_process() or trainer.fast_dev_run:
            return
        self.checkpoint_callbacks, self.claimed_at = list(trainer.checkpoint_callbacks), time.time()
        logger = trainer.loggers[0] if trainer.loggers else None
        if logger is None and self.loggerless is not None:
            run_dir = self.loggerless
        elif logger is None or not versioned(logger):
            return  # a logger without versioned directories (e.g. W&B): Lightning's default_root_dir
        else:
            root = Path(logger.root_dir)
            version = logger_version(logger)
            run_dir = (
                root / (version if isinstance(version, str) else f"version_{version}") if version is not None else None
            )
        root = run_dir.parent if run_dir is not None else root
        missing = [folder for folder in (root, *root.parents) if not folder.exists()]
        self.created_root = missing[-1] if missing else None
        if logger is None:
            try:
                run_dir.mkdir(parents=True)
            except FileExistsError:  # another run took this version since `loggerless_run` chose it
                raise ResourceError(
                    "trainer.default_root_dir",
                    f"{str(run_dir)!r} was taken by another run started at the same time",
                    "run the command again (it takes the next free version)",
                ) from None
            self.created = run_dir
        elif run_dir is None:
            run_dir = create_next_version(root)
            pin_logger_version(logger, int(run_dir.name.split("_")[1]))
            self.created = run_dir
        elif not run_dir.is_dir():
            run_dir.mkdir(parents=True)
            self.created = run_dir
        self.run_dir = run_dir
        existing = self.created is None and (run_dir / "config.yaml").exists()
        if command == "fit":
            self.lock = RunLock(run_dir).acquire()
            for folder in (run_dir, run_dir / "checkpoints"):
                remove_orphans(folder)
            mark_run(run_dir)  # under SLURM: the job id, by which a requeued job finds this run
        name_config(trainer, run_dir, command, existing)
        if command == "fit" and resuming and existing:
            print(f"Resuming {run_dir} from {resuming}")
            # The checkpoints folder holds this run's own checkpoints: Lightning's "exists and is not
            # empty" is about another run's, which a resume is not.
            warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def wrote_checkpoints(self) -> bool:
        """Whether a checkpoint callback of this run wrote a checkpoint, wherever its ``dirpath`` is
        (``--checkpoint.dirpath`` elsewhere): files it names, written since the run was claimed."""
        for callback in self.checkpoint_callbacks:
            paths = [getattr(callback, "best_model_path", ""), getattr(callback, "last_model_path", "")]
            paths += list(getattr(callback, "best_k_models", {}) or {})
            for path in filter(None, paths):
                try:
                    if os.stat(path).st_mtime >= (self.claimed_at or 0) - 1:  # coarse file-system clocks
                        return True
                except OSError:
                    continue
        return False

    def remove_evaluation_config(self) -> None:
        """A validate/test/predict of a run that failed removes the config.<command>N.yaml it saved there:
        the run holds the configs of evaluations that gave results only."""
        if self.evaluation_config is not None:
            saver, path = self.evaluation_config
            if saver.already_saved:  # this invocation wrote it (a name taken meanwhile is refused, not written)
                path.unlink(missing_ok=True)

    def remove_if_empty(self) -> None:
        """Remove the run directory this process created (and the empty folders above it it made) when the
        run wrote no checkpoint, there or elsewhere: a run that failed before its first leaves no empty
        ``version_N/``, and one that did keeps its config and logs beside its checkpoints."""
        run_dir = self.created
        if run_dir is None or not run_dir.is_dir() or any(run_dir.rglob("*.ckpt")) or self.wrote_checkpoints():
            return
        shutil.rmtree(run_dir, ignore_errors=True)
        if self.created_root is None:
            return
        for folder in run_dir.parents:
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()
            if folder == self.created_root:
                break


def name_config(trainer: Any, run_dir: Path, command: str, existing: bool) -> Any:
    """The name of the config `command` saves in `run_dir`: config.yaml for a new run, else
    config.resume<N>.yaml (fit) or config.<command><N>.yaml, never replacing one. Returns the callback
    that saves it (None: none)."""
    stem = "resume" if command == "fit" else command
    name = "config.yaml"
    if existing:
        number = 1
        while (run_dir / f"config.{stem}{number}.yaml").exists():
            number += 1
        name = f"config.{stem}{number}.yaml"
    saver = None
    for callback in trainer.callbacks:
        if isinstance(callback, SaveConfigCallback):
            callback.config_filename, saver = name, callback
    return saver
