"""One run of ``mixer fit|validate|test|predict`` (`Run`), resolved once from the parsed config before any class
is built, and what it leaves in its directory ``<save_dir>/<name>/version_N/``:

- ``ckpt_path``: ``last`` is the last.ckpt of the pinned version, else of the highest version_N (`find_last_run`);
  a requeued SLURM job's fit, the last.ckpt of the run its first start made (`slurm.requeued_run`); the
  checkpoint is read once (`tasks.loading.read_checkpoint`), and what the command needs of it kept;
- a fit resumed from a checkpoint inside a run goes on in that run; validate/test/predict of one write into it:
  their config as ``config.<command>N.yaml``, their results naming the checkpoint they are of (path, epoch, step,
  sha256), never in place of another checkpoint's (`results_name`); a fit writes ``fit_summary.json``;
- one writer per run: ``mixer fit`` holds ``<run>/.mixer.lock`` while it runs (`lock_run`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from itertools import chain, count
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from lightning.pytorch.utilities import rank_zero_info

from mixer_lightning.callbacks.checkpoints import RUN_KEY, ResumeCheckpoint
from mixer_lightning.callbacks.slurm import command_key, job_id, mark_run, requeued_run
from mixer_lightning.errors import ConfigError, ResourceError
from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import remove_orphans, sha256_file, write_text
from mixer_lightning.seam import ignore_warning

EVALUATIONS = ("validate", "test", "predict")
LOCK_NAME = ".mixer.lock"
RESULTS = {"validate": "val_metrics.json", "test": "test_metrics.json"}
# The module's arguments, beside the optimiser's, that a resumed fit must give as its run trained with them.
TRAINING_ARGUMENTS = ("scheduler_interval", "label_smoothing", "layer_decay")
# What a command keeps of the checkpoint it reads (the optimiser's state is Lightning's to restore).
KEPT = ("state_dict", "hyper_parameters", "data", "epoch", "global_step", RUN_KEY)


class Run:
    """What a command's run is: `resolve` (the parsed config: ``ckpt_path`` and the checkpoint, read once),
    `configure` (the config before the classes are built: the run's logger version, root and config file),
    `start` (the built trainer: the run directory, its lock; the checkpoint checked against the model) and
    `finish` (the results). `held`: the locks taken, released by the caller however the command ends."""

    def __init__(self) -> None:
        self.command, self.ckpt_path, self.key = "", None, ""  # key: `slurm.command_key` of the config as given
        self.checkpoint: dict[str, Any] | None = None  # read once; its state_dict dropped once checked
        self.directory: Path | None = None  # the run continued or evaluated; a new fit's once its logger has one
        self.config_name, self.given_optimiser, self.held = "config.yaml", {}, []
        self.record: dict | None = None  # the checkpoint an evaluation's results are of
        self.results: Path | None = None
        self.limited = False  # an evaluation of part of the split
        self.resumable = False  # the checkpoint read holds Lightning's training state, not only weights

    @property
    def fingerprint(self) -> Any:
        """The data and optimiser settings of the run a fit resumes (`RunFingerprint`)."""
        return (self.checkpoint or {}).get(RUN_KEY)

    def read(self, path: Any) -> dict[str, Any]:
        """The checkpoint at `path`, read the first time it is asked for."""
        from mixer_lightning.tasks.loading import read_checkpoint

        if self.checkpoint is None or self.ckpt_path != str(path):
            checkpoint = read_checkpoint(path)
            self.ckpt_path, self.checkpoint = str(path), {key: checkpoint[key] for key in KEPT if key in checkpoint}
            self.resumable = "optimizer_states" in checkpoint and "pytorch-lightning_version" in checkpoint
        return self.checkpoint

    def resolve(self, command: str, config: Any) -> None:
        """``ckpt_path`` as a file (``last``, a requeued SLURM job's run) and the checkpoint read; before Lightning
        parses its hyper-parameters over the model: a missing, damaged or untrusted file is one line first."""
        self.command = command
        if command == "fit":
            self.key = command_key(config)
            if config.get("ckpt_path") in (None, "last"):
                resume_requeued_run(config, self.key)
        # Lightning parses the checkpoint's hyper-parameters over the model next, the optimiser's included: a
        # resume would drop a changed --model.optimizer.lr unseen. The config's are kept to be compared.
        self.given_optimiser = {key: config.model.get(key) for key in ("optimizer", "lr_scheduler")}
        if config.get("ckpt_path") == "last":
            logger = logger_args(config, "'last' needs a logger with a save_dir to find the run in")
            version = logger.get("version")
            version = version if isinstance(version, str) or version is None else f"version_{version}"
            config.ckpt_path = str(find_last_run(experiment_dir(logger), version))
        if config.get("ckpt_path"):
            self.read(config.ckpt_path)
            self.directory = run_dir_of_checkpoint(config.ckpt_path)
            if command == "fit" and not self.resumable:  # (Lightning's restore: a KeyError on its version key)
                raise ConfigError("ckpt_path", f"{config.ckpt_path!r} holds weights, not a run to resume",
                                  f"start from them with --model.init_from {config.ckpt_path}")  # fmt: skip
            if command == "validate":  # a validation split carved from train must be the run's own held-out images
                recorded, data = self.fingerprint or {}, config.data.get("init_args") or {}
                if data.get("dataset") == recorded.get("data.dataset") and data.get("val_split"):
                    for key in ("val_split", "split_seed"):
                        if f"data.{key}" in recorded and data.get(key) != recorded[f"data.{key}"]:
                            raise ConfigError(f"data.{key}", f"the run held out its validation images with {recorded[f'data.{key}']!r}, not {data.get(key)!r}: others include images it trained on", "give the run's value")  # fmt: skip
            if command == "fit":  # Lightning would replace these by the checkpoint's, unseen (as the optimiser's)
                trained = self.checkpoint.get("hyper_parameters") or {}
                for key in TRAINING_ARGUMENTS:
                    if key in trained and config.model.get(key) != trained[key]:
                        raise ConfigError(f"model.{key}", f"the run trained with {trained[key]!r}, not {config.model.get(key)!r}",
                                          f"resume with its value, or start anew from its weights: --model.init_from {config.ckpt_path}")  # fmt: skip

    def configure(self, config: Any) -> bool:
        """Complete the config before the classes are built: the fit's optimiser as given (`RunFingerprint`
        compares them), a checkpoint read as data, a resumed or evaluated run's logger version, root and config
        file name. False: the command has no run to record its config in."""
        command, ckpt, run = self.command, config.get("ckpt_path"), self.directory
        for key, given in self.given_optimiser.items() if command == "fit" and ckpt else ():
            config.model[key] = given
        if config.get("weights_only") is None:
            config.weights_only = True  # a checkpoint is data: tensors and plain containers, never code
        if command in EVALUATIONS:  # weights only: the callbacks that wrote the checkpoint are a fit's business
            ignore_warning("checkpoint_callbacks")
        logger = logger_args(config) if command in ("fit", "test") else None  # (val/* would join the fit's curves)
        ours = run is not None and logger is not None and experiment_dir(logger).resolve() == run.resolve().parent
        if ours:
            logger.version = run.name
        if run is not None and (ours or command in EVALUATIONS):
            self.config_name = config_name(run, command)
        if run is not None and command in EVALUATIONS:  # the results go into the checkpoint's own run
            config.trainer.logger = config.trainer.logger if ours else False
            config.trainer.default_root_dir = str(run)
        return not (run is None and command in EVALUATIONS and config.trainer.get("logger") in (False, None, []))

    def start(self, trainer: Any, model: Any) -> None:
        """With the trainer built: the checkpoint checked against the model, then the fit's run directory
        (refused if it holds a run it does not continue; locked; marked for a requeue) or the evaluation's
        results file."""
        self.check_fits(model)
        if self.command == "fit":
            self.start_fit(trainer)
        elif self.command in RESULTS:
            limit = getattr(trainer, "limit_val_batches" if self.command == "validate" else "limit_test_batches")
            self.limited = not (isinstance(limit, float) and limit == 1.0)
            checkpoint, ckpt = self.checkpoint or {}, self.ckpt_path
            self.record = checkpoint_record(ckpt, self.directory, checkpoint) if ckpt else None
            folder = self.directory or Path(run_directory(trainer) or trainer.default_root_dir)
            self.results = folder / results_name(folder, self.command, self.record, self.limited)

    def check_fits(self, model: Any) -> None:
        """A checkpoint of another model or data (10 classes tested on 3) is one line, not torch's size table."""
        from mixer_lightning.tasks.loading import describe_mismatch

        weights = (self.checkpoint or {}).pop("state_dict", None)  # needed no longer: Lightning loads its own
        net = {key[len("net.") :]: value for key, value in (weights or {}).items() if key.startswith("net.")}
        mismatch = describe_mismatch(model.net, net) if weights is not None else None  # the network only
        if mismatch:
            raise ConfigError("ckpt_path", f"{self.ckpt_path!r} does not fit the model and data configured: {mismatch}",
                              "give the config it was trained with (its run's config.yaml)")  # fmt: skip

    def start_fit(self, trainer: Any) -> None:
        if trainer.fast_dev_run:  # no logger, no run directory
            return
        self.directory = Path(run_directory(trainer))  # a broadcast under DDP: every process asks
        resume = next((c for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), None)
        if resume is not None and resume.dirpath is None:
            resume.dirpath = str(self.directory / "checkpoints")
        if self.ckpt_path:
            ignore_warning("checkpoint_folder")
        if not trainer.is_global_zero:
            return
        if (self.directory / "config.yaml").exists() and not self.ckpt_path:
            raise ConfigError(
                "trainer.logger.init_args.version",
                f"{str(self.directory)!r} holds a run already; it is not overwritten",
                "resume it with --ckpt_path last, or choose another version (or none: the next free one)",
            )
        # A checkpoint folder of the user's own belongs to one run: a new fit would replace another's best.ckpt
        # (the counter that versions file names is off: best.ckpt is a fixed name), which its summary names.
        best = trainer.checkpoint_callback
        folder = Path(best.dirpath) if best is not None and best.dirpath and "://" not in str(best.dirpath) else None
        if folder is not None and not self.ckpt_path and any(folder.glob("*.ckpt")):
            raise ConfigError("checkpoint.dirpath", f"{str(folder)!r} holds another run's checkpoints; they are kept",
                              "give a folder of this run's own, or none (the run's checkpoints/)")  # fmt: skip
        if not self.directory.exists():  # a run that fails while it is set up leaves no directory behind
            self.held.append(NewRun(self.directory))
        if self.directory.is_dir():  # a run resumed, or a version pinned: one writer at a time
            self.held.append(lock_run(self.directory))
            for path in (self.directory, self.directory / "checkpoints"):
                remove_orphans(path)
        if folder is not None:
            self.held.append(lock_run(folder, "checkpoint.dirpath"))
            ignore_warning("checkpoint_folder")  # its lock file: it holds no other run's checkpoints (above)
        mark_run(self.directory, self.key)  # under SLURM: by which the requeued job's same command finds this run

    def finish(self, trainer: Any, metrics: dict[str, float], evaluated: dict | None) -> None:
        """Write an evaluation's results (`metrics`, the images `evaluated`) into its results file."""
        content = {**metrics, **(evaluated or {}), "checkpoint": self.record}
        content["config"] = self.config_name if self.directory is not None else None
        content["partial"] = self.limited if content.get("partial") is None else content["partial"]
        if trainer.is_global_zero and not trainer.fast_dev_run:
            write_json(self.results, content)
            print(f"{'Validation' if self.command == 'validate' else 'Test'} metrics: {self.results}", flush=True)


def logger_args(config: Any, problem: str | None = None) -> Any:
    """The init args of the run's versioned logger (TensorBoard, CSV: a ``save_dir``), or None; with `problem`,
    None is a `ConfigError` on ``ckpt_path``."""
    init_args = getattr(config.trainer.get("logger"), "init_args", None)
    if init_args is not None and init_args.get("save_dir") is not None:
        return init_args
    if problem:
        raise ConfigError("ckpt_path", problem, "give the path of the checkpoint instead")
    return None


def experiment_dir(logger: Any) -> Path:
    return Path(logger.save_dir) / str(logger.get("name") or "")


def resume_requeued_run(config: Any, key: str) -> None:
    """A SLURM job requeued after a preemption resumes the run this command (its config's digest `key`) made in
    the job's first start, from its last.ckpt."""
    logger = logger_args(config)
    run = requeued_run(experiment_dir(logger), key) if logger is not None else None
    if run is not None and (run / "checkpoints" / "last.ckpt").is_file():
        logger.version, config.ckpt_path = run.name, str(run / "checkpoints" / "last.ckpt")
        rank_zero_info(f"SLURM job {job_id()} requeued: resuming {run}")


def run_dir_of_checkpoint(path: Any) -> Path | None:
    """The run a checkpoint lies in (``RUN/checkpoints/NAME.ckpt`` beside ``RUN/config.yaml``), or None."""
    path = Path(str(path))
    run = path.parent.parent
    return run if path.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def version_number(name: str) -> int | None:
    found = re.fullmatch(r"version_(\d+)", name)
    return int(found.group(1)) if found else None


def find_last_run(experiment: Path, version: str | None = None) -> Path:
    """The ``checkpoints/last.ckpt`` that ``--ckpt_path last`` means: the pinned `version`'s, else that of the
    run with the highest version_N (runs are numbered in the order they started)."""
    if version is not None:
        last = experiment / version / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise ConfigError(
                "ckpt_path", f"'last': {str(last)!r} does not exist", "drop --ckpt_path to start this run"
            )
        return last
    runs = [p.parent.parent for p in experiment.glob("*/checkpoints/last.ckpt")]
    numbered = [run for run in runs if version_number(run.name) is not None]
    if not runs or len(numbered) < len(runs) and len(runs) > 1:
        problem = "no run" if not runs else "several runs with names of their own"
        raise ConfigError(
            "ckpt_path",
            f"'last': {problem} under {str(experiment)!r} with a checkpoints/last.ckpt",
            "give the checkpoint's path, or pin the run with --trainer.logger.init_args.version",
        )
    return max(runs, key=lambda run: version_number(run.name) or 0) / "checkpoints" / "last.ckpt"


def config_name(run_dir: Path, command: str) -> str:
    """The file the config of `command` is saved as in `run_dir`: config.yaml for a new run, else
    ``config.resume<N>.yaml`` (fit) or ``config.<command><N>.yaml``, never replacing one."""
    if not (run_dir / "config.yaml").exists():
        return "config.yaml"
    stem = "resume" if command == "fit" else command
    return next(name for n in count(1) if not (run_dir / (name := f"config.{stem}{n}.yaml")).exists())


def lock_run(run_dir: Path, field: str = "trainer.logger") -> FileLock:
    """Hold ``<run_dir>/.mixer.lock``: a second process writing the same run is refused in one line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / LOCK_NAME)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ResourceError(
            field, f"{str(run_dir)!r} is being written by another process", "wait for it to end"
        ) from None
    return lock


def checkpoint_record(path: str, run_dir: Path | None, checkpoint: dict[str, Any]) -> dict:
    """What identifies the `checkpoint` read from `path`: its path (relative to `run_dir` when inside it), the
    epoch and step it was saved at, and the sha256 of its bytes."""
    shown = Path(path).resolve()
    if run_dir is not None and run_dir.resolve() in shown.parents:
        shown = shown.relative_to(run_dir.resolve())
    epoch, step = checkpoint.get("epoch"), checkpoint.get("global_step")
    return {"path": str(shown), "epoch": epoch, "global_step": step, "sha256": sha256_file(path)}


def results_name(run_dir: Path, command: str, record: dict | None, limited: bool) -> str:
    """``test_metrics.json`` when free or holding this checkpoint's results (and, for a `limited` evaluation,
    only partial ones), else ``test_metrics.<checkpoint stem>[.<n>].json``."""
    base = RESULTS[command][: -len(".json")]
    stem = Path(record["path"]).stem if record else "nockpt"
    for name in chain([f"{base}.json", f"{base}.{stem}.json"], (f"{base}.{stem}.{n}.json" for n in count(1))):
        path = run_dir / name
        if not path.exists():
            return name
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        same = record is not None and (held.get("checkpoint") or {}).get("sha256") == record["sha256"]
        if same and (not limited or held.get("partial") is True):
            return name
    raise AssertionError("unreachable")


def write_json(path: Path, content: dict) -> None:
    write_text(path, json.dumps(content, indent=2) + "\n", field=path.name)


class NewRun:
    """A run directory `mixer fit` is about to create. Released at the end of the command: removed (with the
    folders made for it) if it never got its ``config.yaml``, which Lightning saves before training starts; such
    a run failed while its data or model were set up, and holds only the logger's empty event stream."""

    def __init__(self, path: Path):
        self.path, self.made = path, [p for p in (path, *path.parents) if not p.exists()]

    def release(self) -> None:
        if self.path.is_dir() and not (self.path / "config.yaml").exists() and not any(self.path.rglob("*.ckpt")):
            shutil.rmtree(self.path)
            for folder in self.made[1:]:  # the experiment folder made for it, if nothing else went there
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()


def fit_summary(trainer: Any, val_metrics: dict[str, float], run: Path) -> dict[str, Any]:
    """``fit_summary.json``: the run's length and last validation figures, its throughput, the best checkpoint,
    and the checkpoint whose test is the run's figure (relative to the run, as test_metrics.json names its own):
    last.ckpt where best.ckpt was chosen on the test images (`validated_on`: test), else best.ckpt."""
    from mixer_lightning.callbacks.throughput import SpeedMonitor

    best = trainer.checkpoint_callback
    summary = {"epochs": trainer.current_epoch, "steps": trainer.global_step, **val_metrics}
    summary["parameters"] = sum(p.numel() for p in trainer.lightning_module.parameters())  # as the run header
    throughput = next((c for c in trainer.callbacks if isinstance(c, SpeedMonitor)), None)
    if throughput is not None and throughput.summary(trainer.world_size) is not None:
        summary["throughput"] = throughput.summary(trainer.world_size)
    if best is not None and best.best_model_path:
        summary.update(
            best_checkpoint=best.best_model_path, monitor=best.monitor, best_score=float(best.best_model_score)
        )
        if len(best.best_k_models) > 1:
            summary["best_k"] = {path: float(score) for path, score in best.best_k_models.items()}
    on_test = bool(getattr(trainer.datamodule, "validates_on_test", None))
    last = next((c.last_model_path for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), "")
    tested = last if on_test else summary.get("best_checkpoint")
    summary.update({"test_checkpoint": os.path.relpath(tested, run)} if tested else {})
    summary["validated_on"] = "test" if on_test else "val"
    return summary
