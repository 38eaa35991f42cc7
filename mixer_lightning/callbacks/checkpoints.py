"""Checkpoints a run can trust: written atomically (`AtomicCheckpointIO`), ``best.ckpt`` the best of the
files kept (`BestCheckpoint`), ``last.ckpt`` where a resumed run continues bit for bit and a stop on SIGTERM
(`ResumeCheckpoint`), each saying what data and optimiser it was trained with, which a resumed fit must give
again (`fingerprint.RunFingerprint`). Reading them, checked against the model, is `mixer_lightning.tasks.loading`."""

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
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
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


def monitor_mode(monitor: str | None) -> str:
    """The `BestCheckpoint` mode that keeps the best of `monitor` where none is given: ``max`` of an accuracy,
    ``min`` of a loss; another metric must say which it is."""
    name = (monitor or "").rsplit("/", 1)[-1]
    if monitor is None or "acc" in name:
        return "max"
    if "loss" in name:
        return "min"
    raise ConfigError("checkpoint.mode", f"is {monitor!r} better high or low?", "give --checkpoint.mode max or min")
