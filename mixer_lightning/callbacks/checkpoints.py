"""Checkpoints a run can trust: written atomically (`AtomicCheckpointIO`), ``best.ckpt`` the best of the
files kept (`BestCheckpoint`), ``last.ckpt`` where a resumed run continues bit for bit and a stop on SIGTERM
(`ResumeCheckpoint`), each saying what data and optimiser it was trained with, which a resumed fit must give
again (`RunFingerprint`). Reading them, checked against the model, is `mixer_lightning.tasks.loading`."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from jsonargparse.typing import NonNegativeInt
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from mixer_lightning import seam
from mixer_lightning.errors import ConfigError, Stopped
from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import atomic_write, remove_orphans

# The best checkpoint's name (the CLI's default `checkpoint.filename`).
BEST_NAME = "best"
# Where `ResumeCheckpoint` took a checkpoint, when Lightning's loop state needs adapting at load time.
POSITION_KEY = "mixer_resume_position"
# What a run trains on and with (`RunFingerprint`): ``{flag: value}``.
RUN_KEY = "mixer_run"
# The data arguments that choose which images train and validate (a copy of the data elsewhere is the same data).
SPLIT_ARGUMENTS = ("dataset", "val_split", "split_seed", "train_subset")


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local writes are atomic; the temporary files of killed writers are
    removed from a folder at its first write. (Lightning stages a file in the system's temporary folder
    and moves it: a copy, not a rename, when that folder is on another filesystem.)"""

    def __init__(self) -> None:
        super().__init__()
        self.cleaned: set[Path] = set()

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: fsspec's own transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        target = Path(path)
        if target.parent not in self.cleaned:
            remove_orphans(target.parent)
            self.cleaned.add(target.parent)
        with atomic_write(target, "wb", field="checkpoint") as f:
            torch.save(checkpoint, f)


class BestCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint` (same arguments) with ``best.ckpt`` in its folder always the best of
    the files kept (a hard link, or a copy where links fail, replaced atomically), so that
    ``--ckpt_path RUN/checkpoints/best.ckpt`` works whatever ``save_top_k`` is. With the filename
    ``best`` and ``save_top_k`` above 1 the k files are named ``epoch=E-step=S.ckpt`` (one fixed name
    would make every top-k candidate replace the one before)."""

    linked: str | None = None  # the file best.ckpt was last made from

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key: runs saved by it (or by older versions of this class) resume their best state.
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.filename == BEST_NAME and self.save_top_k not in (0, 1):
            self.filename = "{epoch}-{step}"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A run moved or copied elsewhere resumes its best state (Lightning drops it when the folder differs, and
        looks up best.ckpt at the old path): the files it names are rebased onto this folder where they lie here."""
        saved, here = state_dict.get("dirpath"), self.dirpath
        if saved and here and saved != here:
            move = lambda path: os.path.join(here, os.path.relpath(path, saved)) if path else path  # noqa: E731
            if state_dict.get("best_model_path") and os.path.isfile(move(state_dict["best_model_path"])):
                state_dict = {
                    **state_dict,
                    "dirpath": here,
                    **{key: move(state_dict.get(key)) for key in ("best_model_path", "kth_best_model_path", "last_model_path")},
                    "best_k_models": {move(path): score for path, score in (state_dict.get("best_k_models") or {}).items()},
                }  # fmt: skip
        super().load_state_dict(state_dict)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        self.link_best(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        self.link_best(trainer)

    def link_best(self, trainer: Trainer) -> None:
        """Make ``best.ckpt`` the file `best_model_path` names, atomically (a reader sees the old or the new)."""
        best = self.best_model_path
        if not best or best == self.linked or not self.dirpath or "://" in str(best):
            return
        if os.path.dirname(os.path.abspath(best)) != os.path.abspath(self.dirpath):  # another run's: not ours to link
            return
        self.linked = best
        link = Path(self.dirpath) / f"{BEST_NAME}{self.FILE_EXTENSION}"
        # (samefile: renaming a name onto another name of the same file does nothing, leaving the staged one)
        if trainer.is_global_zero and not (link.exists() and os.path.samefile(best, link)):
            staged = link.with_name(f".{link.name}.tmp-{os.getpid()}")  # `remove_orphans` knows the pattern
            staged.unlink(missing_ok=True)
            try:
                os.link(best, staged)
            except OSError:  # a filesystem without hard links
                shutil.copyfile(best, staged)
            os.replace(staged, link)
        trainer.strategy.barrier()


def as_epoch_boundary(loops: dict) -> None:
    """Rewrite the loop state of a checkpoint taken as an epoch starts (``on_train_epoch_start``) into
    "the previous epoch is complete, the next has not begun", which Lightning resumes by starting that
    epoch afresh (at ``on_train_epoch_start`` the epoch is counted "ready", which Lightning would read as
    a restart inside it)."""
    progress = loops.get("fit_loop", {}).get("epoch_progress", {})
    for counts in (progress.get("total"), progress.get("current")):
        if isinstance(counts, dict):
            counts["ready"] = counts.get("started", counts["ready"])


class ResumeCheckpoint(Checkpoint):
    """``last.ckpt`` in `dirpath` (default: the run directory's ``checkpoints``), which ``--ckpt_path last``
    resumes, written only where a resumed run goes on exactly as an uninterrupted one would (weights,
    optimiser, schedule, RNG streams, data order, every logged figure):

    - every `every_n_train_steps` optimiser steps (0: never) inside an epoch, but not after its last batch
      (Lightning resumes that state by skipping the epoch's validation and end), not before a validation
      inside the epoch, not after a batch that only accumulated gradients;
    - as each epoch starts (after the previous one's validation, epoch figures and scheduler step), and
      when training ends;
    - on SIGTERM (or `request_stop`: SLURM's requeue signal, `mixer_lightning.callbacks.slurm`), at the next
      of these moments; the run then stops with `Stopped` (exit status 128 + the signal).

    The loggers are flushed with each checkpoint; a resumed run has TensorBoard drop what the interrupted
    process logged after its checkpoint (a ``purge_step``), so its curves are an uninterrupted run's.
    """

    best_model_path = ""  # Lightning's checkpoint callbacks name their files here: this one keeps no best

    def __init__(self, dirpath: str | None = None, every_n_train_steps: NonNegativeInt = 500) -> None:
        self.dirpath, self.every_n_train_steps = dirpath, every_n_train_steps
        self.last_model_path = ""
        self.stop_signal: int | None = None
        self.saved_step: int | None = None  # the global step last.ckpt was last saved at by this process
        self.start_step: int | None = None  # the global step this process started training at
        self.log_step: int | None = None  # the logger step a run resumed from the checkpoint being saved goes on at
        self.purge_step: int | None = None  # that step, read from the checkpoint this run resumes
        self.boundary = False  # the checkpoint being saved is taken at an epoch boundary
        self.previous_handler: Any = None
        self.pid: int | None = None  # the trainer's process (a forked DataLoader worker leaves the stop to it)

    # ------------------------------------------------------------------------------- saving

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self.dirpath = trainer.strategy.broadcast(
                self.dirpath or os.path.join(run_directory(trainer) or trainer.default_root_dir, "checkpoints")
            )
            last = os.path.join(self.dirpath, "last.ckpt")
            self.last_model_path = last if os.path.isfile(last) else ""  # a resumed run's, until it saves its own

    def state_dict(self) -> dict[str, Any]:
        return {"log_step": self.log_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.purge_step = state_dict.get("log_step")

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.boundary:
            as_epoch_boundary(checkpoint["loops"])
            checkpoint[POSITION_KEY] = "epoch_boundary"

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if checkpoint.get(POSITION_KEY) == "epoch_boundary" and trainer.state.fn == "fit" and trainer.max_steps != -1:
            seam.restart_after_last_batch(checkpoint["loops"])

    def due(self, trainer: Trainer) -> bool:
        """Whether a checkpoint now would hold new training of this process."""
        return (
            not trainer.fast_dev_run
            and self.start_step is not None
            and trainer.global_step > self.start_step
            and trainer.global_step != self.saved_step
        )

    def save(self, trainer: Trainer, log_step: int, boundary: bool = False) -> None:
        for logger in trainer.loggers:  # the figures logged so far go to disk with the checkpoint
            logger.save()
        self.log_step, self.boundary = log_step, boundary
        self.last_model_path = os.path.join(self.dirpath, "last.ckpt")
        try:
            trainer.save_checkpoint(self.last_model_path, weights_only=False)
        finally:
            self.log_step, self.boundary = None, False
        self.saved_step = trainer.global_step

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if not seam.resumable_after_batch(trainer):
            return  # the next resumable moment is a later batch or the epoch boundary (a stop waits for it)
        stop = self.stop_requested(trainer)
        every = self.every_n_train_steps
        if (stop or (every and trainer.global_step % every == 0)) and self.due(trainer):
            self.save(trainer, seam.logger_step(trainer) + 1)  # Lightning counts the batch after this hook
        if stop:
            self.stop(trainer, f"at step {trainer.global_step} (epoch {trainer.current_epoch + 1})")  # from 1

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.due(trainer):
            self.save(trainer, seam.logger_step(trainer), boundary=True)
        if self.stop_requested(trainer):
            self.stop(trainer, f"after epoch {trainer.current_epoch}, at step {trainer.global_step}")  # from 1

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.restore_handler()
        if self.due(trainer):
            self.save(trainer, seam.logger_step(trainer))

    # ------------------------------------------------------------------------------- resuming

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.apply_purge(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.apply_purge(trainer)  # strategies that restore callbacks after on_fit_start (FSDP)
        self.start_step = trainer.global_step
        if threading.current_thread() is threading.main_thread():
            self.pid = os.getpid()
            self.previous_handler = signal.signal(signal.SIGTERM, self.on_signal)  # in place of Lightning's
        if trainer.received_sigterm:  # seen by Lightning's handler before ours was in place
            self.request_stop(signal.SIGTERM)

    def apply_purge(self, trainer: Trainer) -> None:
        """Tell TensorBoard to discard what the interrupted process logged at or after the step this run goes
        on from: a SessionLog START event at that step, as ``SummaryWriter(purge_step=...)`` writes."""
        step, self.purge_step = self.purge_step, None
        if step is None or not trainer.is_global_zero:
            return
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.file_writer.add_event(
                    Event(step=step, session_log=SessionLog(status=SessionLog.START))
                )

    # ------------------------------------------------------------------------------- stopping

    def on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() == self.pid:
            self.request_stop(signum)

    def request_stop(self, signum: int) -> None:
        """Stop at the next resumable point, saving last.ckpt, as on SIGTERM."""
        if signum == self.stop_signal:
            return  # the same stop asked again (SLURM signals the job step, srun forwards it): one line
        self.stop_signal = signum
        from lightning.pytorch.utilities import rank_zero_only

        if rank_zero_only.rank == 0:
            print(
                f"mixer: {signal.Signals(signum).name} received: stopping at the next resumable point (saving last.ckpt)",
                file=sys.stderr,
                flush=True,
            )

    def stop_requested(self, trainer: Trainer) -> bool:
        stop = self.stop_signal is not None
        if trainer.world_size > 1:  # every process stops at the same step
            stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))
        return stop

    def stop(self, trainer: Trainer, when: str) -> None:
        signum = self.stop_signal or signal.SIGTERM
        self.restore_handler()
        saved = f"last.ckpt saved: {self.last_model_path}" if self.last_model_path else "no checkpoint saved"
        raise Stopped(
            signum,
            f"stopped by {signal.Signals(signum).name} {when}; {saved}; continue with the same command and "
            "--ckpt_path last",
            trainer.global_rank,
        )

    def restore_handler(self) -> None:
        if self.previous_handler is not None and os.getpid() == self.pid:
            signal.signal(signal.SIGTERM, self.previous_handler)
        self.previous_handler = None

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.restore_handler()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.restore_handler()


def plain(value: Any) -> Any:
    """`value` in the built-in types a checkpoint read with ``weights_only`` holds (jsonargparse's restricted
    types are subclasses of them), tuples as lists; None for anything else."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return next((kind(value) for kind in (bool, int, float, str) if isinstance(value, kind)), None)


def settings(factory: Any, flag: str) -> dict[str, Any]:
    """``{flag: class_path, flag.arg: value}`` of an optimiser or schedule callable (a class, or a partial of one):
    every plain argument it is built with, bound or left at its class's default."""
    import inspect

    from mixer_lightning.tasks.classifier import spec
    from mixer_lightning.tasks.initialise import network_class

    found, cls = (spec(factory), network_class(factory)) if factory is not None else (None, None)
    if found is None or cls is None:
        return {flag: None}
    defaults = {
        name: p.default for name, p in list(inspect.signature(cls).parameters.items())[1:] if p.default is not p.empty
    }
    given = {**defaults, **found["init_args"]}
    return {flag: found["class_path"], **{f"{flag}.{name}": plain(value) for name, value in given.items()}}


def fingerprint(datamodule: Any, pl_module: LightningModule) -> dict[str, Any]:
    """What makes a run the run it is beyond what Lightning restores (`RunFingerprint`): the data (the arguments
    that split it, the size of each split, the digest of a packed dataset's manifest, of an image folder's or
    shard set's training files, its class names and normalisation) and the optimiser and
    schedule (a resumed run restores their state, learning rate and weight decay included, from the checkpoint)."""
    found: dict[str, Any] = {}
    hparams = dict(getattr(datamodule, "hparams", None) or {})
    for name in SPLIT_ARGUMENTS:
        if name in hparams:
            found[f"data.{name}"] = plain(hparams[name])
    sizes = {}
    for split in ("train", "val"):
        try:
            sizes[split] = len(getattr(datamodule, f"{split}_set"))
        except (AttributeError, TypeError):  # no such split, or a stream of unknown length
            sizes[split] = None
    found["data.sizes"] = sizes
    source = getattr(datamodule, "source", None)
    if getattr(source, "content", None) is not None:  # other images under the same names and counts
        found["data.content"] = source.content
    if hasattr(datamodule, "num_classes"):  # what the labels mean, and what the network sees of the pixels
        from mixer_lightning.data.predict import class_names

        found["data.class_names"] = class_names(datamodule)
    for name in ("mean", "std"):
        if getattr(datamodule, name, None) is not None:
            found[f"data.{name}"] = [float(v) for v in getattr(datamodule, name)]
    if getattr(source, "sharded", False) and hparams.get("root"):
        from mixer_lightning.data.manifest import MANIFEST
        from mixer_lightning.safety.atomic import sha256_file

        root = Path(str(hparams["root"]))
        manifest = (root if root.is_dir() else root.parent) / MANIFEST
        found["data.manifest"] = sha256_file(manifest) if manifest.is_file() else None
    found.update(settings(getattr(pl_module, "optimizer_factory", None), "model.optimizer"))
    found.update(settings(getattr(pl_module, "lr_scheduler_factory", None), "model.lr_scheduler"))
    return found


class RunFingerprint(Callback):
    """Writes into every checkpoint, under `RUN_KEY`, the run's data and optimiser settings (`fingerprint`); a fit
    resumed from a checkpoint that wrote other ones is refused, in one line naming the flag, before the resume's
    config is saved. Lightning restores the optimiser's state (its lr and weight decay) and the schedule's from the
    checkpoint whatever the config says, and trains on whatever data the config gives: a resume with a changed
    ``lr`` or ``data.root`` would be another run recorded as this one. `resumed`: the checkpoint's fingerprint."""

    def __init__(self, resumed: Any = None, ckpt_path: str | None = None, seed: int | None = None) -> None:
        self.resumed, self.ckpt_path, self.seed = resumed, ckpt_path, seed
        self.current: dict[str, Any] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # the seed too: the sampler's order of every epoch after the resume derives from it
        self.current = {"seed_everything": self.seed, **fingerprint(trainer.datamodule, pl_module)}
        saved = self.resumed if isinstance(self.resumed, dict) else {}  # older checkpoints recorded none
        for key in (key for key in saved if key in self.current):
            if saved[key] != self.current[key]:
                other_data = ("data.sizes", "data.manifest", "data.content", "data.class_names")  # the same arguments
                field = "data.root" if key in other_data else key
                raise ConfigError(
                    field,
                    f"{self.current[key]!r} differs from {saved[key]!r} of the run being resumed ({self.ckpt_path})",
                    "a resumed run keeps its data and optimiser: give the run's value, or start a new run "
                    "(model.init_from: its weights)",
                )

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.current is not None:
            checkpoint[RUN_KEY] = self.current
