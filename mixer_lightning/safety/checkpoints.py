"""Checkpoints a run can trust: atomic writes, a last.ckpt that resumes exactly, stops on signals.

- `AtomicCheckpointIO` writes a checkpoint through `mixer_lightning.safety.atomic.atomic_write` (temporary
  file beside the target, fsync, rename): a process killed mid-write, or a full disk, leaves the
  previous checkpoint intact (Lightning's own save stages the file in the system temp folder and
  moves it, which is a copy, not a rename, when that folder is on another filesystem).
- `ResumeCheckpoint` writes ``last.ckpt`` only at moments a resumed run continues exactly from
  (see its docstring), and turns SIGTERM/SIGINT into a stop at the next such moment.
- `BestCheckpoint` keeps the best (or top-k) checkpoints by the monitored metric, ``best.ckpt`` always
  the best of them, with metric names such as ``val/acc1`` safe in file names.

Reading them, safely and checked against the model, is `mixer_lightning.tasks.loading` (it needs the
registered families).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from mixer_lightning.errors import Interrupted, Stopped, process_rank, stderr_line
from mixer_lightning.safety.atomic import atomic_write, fsync_directory, remove_orphans, temporary_path

# Lightning's special values of ckpt_path, resolved by Lightning itself.
SPECIAL_CKPT_PATHS = ("best", "hpc", "registry")
# Module state that is not the network: metric accumulators, filled in when absent (`ClassifierModule`).
NON_NETWORK_PREFIXES = ("train_metrics.", "train_loss.")
# SIGHUP (a closed terminal or ssh session) stops a run as SIGTERM does; there is no SIGHUP on Windows.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
# The seed of the run a checkpoint belongs to (``seed_everything``; written by `mixer_lightning.callbacks.DataFacts`).
SEED_KEY = "seed_everything"
# Where `ResumeCheckpoint` took a checkpoint, when Lightning's loop state needs adapting at load time.
POSITION_KEY = "mixer_resume_position"


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local writes are atomic (temporary file, fsync, rename); the temporary
    files of writers that were killed are removed from the folder at its first write."""

    def __init__(self) -> None:
        super().__init__()
        self._cleaned: set[Path] = set()

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: fsspec's own transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        target = Path(path)
        if target.parent not in self._cleaned:
            remove_orphans(target.parent)
            self._cleaned.add(target.parent)
        with atomic_write(target, "wb", field="checkpoint") as f:
            torch.save(checkpoint, f)


# The `checkpoint` callback's file name for the best checkpoint (the CLI's default filename).
BEST_NAME = "best"
# A ``{name}`` or ``{name:format}`` group of a checkpoint file name template (Lightning's own pattern).
_GROUP = re.compile(r"\{([^:}]*)([:}])")


class BestCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint` (same arguments) for the best checkpoints by ``monitor``:

    - ``save_top_k`` k > 1 (or -1) with the filename ``best`` keeps k files named
      ``epoch=E-step=S-val_acc1=0.1234.ckpt``: with one fixed name (and no version counter) Lightning
      writes every top-k candidate to the same path, so ``best.ckpt`` silently became the latest epoch;
    - ``best.ckpt`` is always the best of the files kept (a hard link, or a copy where links fail,
      replaced atomically), so ``--ckpt_path RUN/checkpoints/best.ckpt`` works whatever the filename;
    - a metric name's ``/`` (``{val/acc1:.3f}``) becomes ``_`` in the name Lightning inserts
      (``val_acc1=0.141``) instead of a folder ``val/``; a ``/`` written outside braces is a folder,
      as in Lightning.
    """

    _linked: str | None = None  # the checkpoint best.ckpt was last made from (by this process)

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key: a run saved before this class resumes with its best-checkpoint state.
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.filename == BEST_NAME and self.save_top_k not in (0, 1) and self.monitor:
            self.filename = "{epoch}-{step}-{" + self.monitor + ":.4f}"

    def _format_checkpoint_name(
        self,
        filename: str | None,
        metrics: dict[str, Any],
        prefix: str | None = None,
        auto_insert_metric_name: bool = True,
    ) -> str:
        if filename and auto_insert_metric_name:  # insert "name=" ourselves, with "/" made safe
            filename = _GROUP.sub(
                lambda m: f"{m.group(1).replace('/', '_')}{self.CHECKPOINT_EQUALS_CHAR}{{{m.group(1)}{m.group(2)}",
                filename,
            )
        return super()._format_checkpoint_name(filename, metrics, prefix=prefix, auto_insert_metric_name=False)

    def _update_best_and_save(self, current: Any, trainer: Trainer, monitor_candidates: dict[str, Any]) -> None:
        super()._update_best_and_save(current, trainer, monitor_candidates)
        self._point_best_at(trainer, self.best_model_path)

    def _point_best_at(self, trainer: Trainer, best: str) -> None:
        """Make ``best.ckpt`` beside `best` the same file, atomically (a reader sees the old or the new)."""
        if not best or not self.dirpath or "://" in str(best):
            return
        link = Path(self.dirpath) / f"{BEST_NAME}{self.FILE_EXTENSION}"
        if trainer.is_global_zero and not (link.exists() and (self._linked == best or os.path.samefile(best, link))):
            # (samefile: a rename onto another name of the same file would be a no-op, leaving the staged name)
            staged = temporary_path(link)
            staged.unlink(missing_ok=True)
            try:
                os.link(best, staged)
            except OSError:  # a filesystem without hard links
                shutil.copyfile(best, staged)
            os.replace(staged, link)
            fsync_directory(link.parent)
            self._linked = best
        trainer.strategy.barrier()


def _counts(progress: dict) -> list[dict]:
    return [progress[key] for key in ("total", "current") if isinstance(progress.get(key), dict)]


def as_epoch_boundary(loops: dict) -> None:
    """Rewrite the loop state of a checkpoint taken as an epoch starts (``on_train_epoch_start``) into
    "the previous epoch is complete, the next has not begun": Lightning then resumes by starting that
    epoch afresh, as an uninterrupted run does (at ``on_train_epoch_start`` the epoch is counted
    "ready" already, which Lightning would read as a restart inside it)."""
    fit = loops.get("fit_loop", {})
    for counts in _counts(fit.get("epoch_progress", {})):
        counts["ready"] = counts.get("started", counts["ready"])


def as_restart_after_last_batch(loops: dict) -> None:
    """The epoch-boundary state of `as_epoch_boundary`, for a trainer that counts steps (``max_steps``):
    Lightning then always restarts its loops, and starts the next epoch afresh only from the state
    "saved after the last batch's training step" (which it advances past: one more logger step and
    the batch marked complete), so the epoch loop is put one step before that."""
    fit = loops.get("fit_loop", {})
    batches = fit.get("epoch_loop.batch_progress", {})
    for counts in _counts(batches):
        counts["completed"] = counts["processed"] - 1
    batches["is_last_batch"] = True
    fit.get("epoch_loop.state_dict", {})["_batches_that_stepped"] -= 1
    validation = fit.get("epoch_loop.val_loop.batch_progress")
    if isinstance(validation, dict):
        validation["is_last_batch"] = True  # else Lightning counts the epoch complete twice


def inside_epoch_end(loops: dict) -> str | None:
    """Where a checkpoint not written by `ResumeCheckpoint` was taken, if it lies between an epoch's last
    training step and the epoch's end (which Lightning resumes by skipping the rest of that epoch):
    "before validation" (a step checkpoint on the last batch), "after validation" (at validation end,
    as best.ckpt is), "at the epoch end" (on_train_epoch_end, without validation); else None."""
    fit = loops.get("fit_loop", {})
    epoch = fit.get("epoch_progress", {}).get("total", {})
    batches = fit.get("epoch_loop.batch_progress", {})
    total = batches.get("total", {})
    if not epoch or not total:
        return None
    if epoch.get("processed") == epoch.get("started") and epoch.get("completed") == epoch.get("processed", 0) - 1:
        return "at the epoch end"
    if batches.get("is_last_batch") and epoch.get("processed") == epoch.get("started", 0) - 1:
        return "before validation" if total.get("completed") == total.get("processed", 0) - 1 else "after validation"
    return None


class ResumeCheckpoint(ModelCheckpoint):
    """``last.ckpt``, the checkpoint ``--ckpt_path last`` resumes, written only where a resumed run goes
    on exactly as an uninterrupted one would (weights, optimiser, schedule, RNG streams, the data
    order and every logged figure):

    - every ``every_n_train_steps`` optimiser steps inside an epoch, but never after the epoch's last
      batch: that state precedes the epoch's validation and epoch figures, and Lightning resumes it
      by skipping them (the epoch's validation is never logged, best.ckpt never sees it, and the
      training-metric accumulators run on into the next epoch); nor before a validation inside the
      epoch (``val_check_interval``), nor after a batch that only accumulated gradients;
    - at every epoch boundary, as the next epoch starts: after validation, the epoch figures, the
      reset of the accumulators and the epoch's scheduler step;
    - when training ends;
    - on SIGTERM (a scheduler pre-empting the job), SIGINT (Ctrl+C) or SIGHUP (a closed terminal): at
      the next of these moments, after which the run stops with `Stopped` (exit status 143, 130 or 129).
      A second Ctrl+C stops at once (`Interrupted`, 130). A signal inherited as ignored (``nohup``) stays so.

    Everything logged before a checkpoint is flushed to disk with it, and a resumed run tells
    TensorBoard to drop what the interrupted process logged after its checkpoint (``purge_step``),
    so the curves of a resumed run are those of an uninterrupted one.
    """

    # ModelCheckpoint's __init__ and arguments, unchanged (the CLI reads its signature); state of our own:
    _start_step: int | None = None  # global step when this process started training
    _stop_signal: int | None = None  # SIGTERM/SIGINT received
    _previous_handlers: dict[int, Any] | None = None
    _handler_pid: int | None = None  # the process whose signals the handlers stop
    _log_step_to_save: int | None = None  # the logger step a run resumed from the checkpoint being saved goes on at
    _purge_step: int | None = None  # that step, read from the checkpoint this run resumes
    _epoch_boundary = False  # the checkpoint being saved is taken at an epoch boundary

    # ------------------------------------------------------------------------------- what is saved

    @property
    def state_key(self) -> str:
        # One key whatever every_n_train_steps is: a run resumed with another interval keeps its state.
        return type(self).__name__

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["log_step"] = self._log_step_to_save  # the logger step a run resumed from here goes on at
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._purge_step = state_dict.get("log_step")

    def _save_last(self, trainer: Trainer, log_step: int, epoch_boundary: bool) -> None:
        for logger in trainer.loggers:  # the figures logged so far go to disk with the checkpoint
            flush = getattr(getattr(logger, "experiment", None), "flush", None)
            if callable(flush):
                flush()
        self._log_step_to_save, self._epoch_boundary = log_step, epoch_boundary
        try:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        finally:
            self._log_step_to_save, self._epoch_boundary = None, False

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._epoch_boundary:
            as_epoch_boundary(checkpoint["loops"])
            checkpoint[POSITION_KEY] = "epoch_boundary"

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """Called before Lightning restores its loops from `checkpoint`, which is adapted to this trainer."""
        loops = checkpoint.get("loops")
        if not isinstance(loops, dict) or trainer.state.fn != "fit":
            return
        if checkpoint.get(POSITION_KEY) == "epoch_boundary":
            if trainer.fit_loop._iteration_based_training():
                as_restart_after_last_batch(loops)
            return
        where = inside_epoch_end(loops)
        if where is None:
            return
        # Another writer's checkpoint (an older mixer-lightning, best.ckpt): Lightning goes on with the next
        # epoch; the finished epoch's training-metric accumulators must not run on into it.
        state = checkpoint.get("state_dict", {})
        for key, value in pl_module.state_dict().items():
            if key.startswith(NON_NETWORK_PREFIXES) and key in state:
                state[key] = value.detach().clone()
        epoch = loops["fit_loop"]["epoch_progress"]["current"].get("processed", 0)
        skipped = "its validation and epoch figures are" if where == "before validation" else "its epoch figures are"
        rank_zero_warn(
            f"ckpt_path: the checkpoint was written {where} of epoch {epoch}: {skipped} not redone; "
            "training goes on with the next epoch (last.ckpt of this version resumes exactly)"
        )

    def _skip(self, trainer: Trainer) -> bool:
        return bool(trainer.fast_dev_run) or trainer.sanity_checking or not self.save_last

    @staticmethod
    def _not_resumable_here(trainer: Trainer) -> bool:
        """Whether the state after this batch is one Lightning cannot resume exactly: the epoch's training
        is over (its end, and maybe validation, follow), a validation follows inside the epoch
        (``val_check_interval``: Lightning would skip it), or the batch only accumulated gradients
        (which a checkpoint does not hold)."""
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop.batch_progress.is_last_batch or epoch_loop._num_ready_batches_reached():
            return True
        if epoch_loop._should_accumulate():
            return True
        fetcher = trainer.fit_loop._data_fetcher
        return fetcher is not None and bool(epoch_loop._should_check_val_fx(fetcher))

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._not_resumable_here(trainer):
            return  # the next resumable moment: a later batch, or the epoch boundary (a stop waits for it too)
        stop = self._stop_requested(trainer)
        every = self._every_n_train_steps
        due = every >= 1 and trainer.global_step % every == 0 and trainer.global_step != self._last_global_step_saved
        if (due or stop) and not self._skip(trainer) and trainer.global_step != self._last_global_step_saved:
            # The logger step after this batch: Lightning counts it once the batch is complete.
            self._save_last(trainer, trainer.fit_loop.epoch_loop._batches_that_stepped + 1, epoch_boundary=False)
            if self.save_top_k != 0:
                self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))
        if stop:
            self._stop(trainer, f"at step {trainer.global_step} (epoch {trainer.current_epoch})")

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        trained = self._start_step is not None and trainer.global_step > self._start_step
        if trained and not self._skip(trainer) and trainer.global_step != self._last_global_step_saved:
            self._save_last(trainer, trainer.fit_loop.epoch_loop._batches_that_stepped, epoch_boundary=True)
        if self._stop_requested(trainer):
            self._stop(trainer, f"after epoch {trainer.current_epoch - 1}, at step {trainer.global_step}")

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore_handlers()
        trained = self._start_step is not None and trainer.global_step > self._start_step
        if trained and not self._skip(trainer) and trainer.global_step != self._last_global_step_saved:
            self._save_last(trainer, trainer.fit_loop.epoch_loop._batches_that_stepped, epoch_boundary=False)

    # Epoch-end saves of last.ckpt (Lightning's, after the epoch's training but before its end) are
    # exactly the ones that do not resume; best/top-k checkpoints are the `checkpoint` callback's.
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pass

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pass

    # --------------------------------------------------------------------------------- resuming

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._apply_purge(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._apply_purge(trainer)  # strategies that restore callbacks after on_fit_start (FSDP)
        self._start_step = trainer.global_step
        if trainer.received_sigterm:  # before our handler: Lightning's saw it
            self._stop_signal = signal.SIGTERM
        self._install_handlers()

    def _apply_purge(self, trainer: Trainer) -> None:
        """Tell TensorBoard to discard what the interrupted process logged at or after the step this
        run goes on from (a SessionLog START event at that step, as SummaryWriter(purge_step) writes)."""
        step, self._purge_step = self._purge_step, None
        if step is None or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if not hasattr(logger, "_kwargs") or not hasattr(logger, "_experiment"):
                continue  # not a TensorBoardLogger
            if logger._experiment is None:
                logger._kwargs["purge_step"] = step
            else:
                from tensorboard.compat.proto.event_pb2 import Event, SessionLog

                writer = logger.experiment._get_file_writer()
                writer.add_event(Event(step=step, session_log=SessionLog(status=SessionLog.START)))

    # --------------------------------------------------------------------------------- signals

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_handlers = {}
        self._handler_pid = os.getpid()
        Interrupted.unwinding = False  # a fit started from Python after an earlier one was stopped at once
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:  # nohup, a background job: whoever started us chose so
                continue
            self._previous_handlers[signum] = previous
            signal.signal(signum, self._on_signal)

    def _restore_handlers(self) -> None:
        for signum, handler in (self._previous_handlers or {}).items():
            if handler is not None:
                signal.signal(signum, handler)
        self._previous_handlers = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if frame is not None and os.getpid() != self._handler_pid:
            return  # a forked DataLoader worker, signalled with its parent (a terminal's Ctrl+C): the parent stops
        if Interrupted.unwinding:  # a stop at once is under way (`errors.Interrupted`): nothing new to ask
            return
        if self._stop_signal is not None and signum == signal.SIGINT:
            # The second Ctrl+C: stop now, keeping the last checkpoint written. Not a KeyboardInterrupt,
            # which Lightning answers with its own message and exit status 1.
            # Lightning names last_model_path before it writes: a Ctrl+C inside the first write leaves no file
            # (the write is atomic), and a kept file is of the last step saved only if this process saved it.
            kept = bool(self.last_model_path) and self._fs.exists(self.last_model_path)
            step = (
                f" of step {self._last_global_step_saved}"
                if self._last_checkpoint_saved == self.last_model_path
                else ""
            )
            saved = (
                f"last.ckpt{step} kept: {self.last_model_path}; continue with the same command and --ckpt_path last"
                if kept
                else "no checkpoint saved"
            )
            raise Interrupted(signum, f"stopped at once by SIGINT (Ctrl+C again while stopping); {saved}")
        if signum == self._stop_signal:
            return  # the same stop asked again (SLURM's SIGTERM to the job step and from srun, a hang-up twice): one line
        self._stop_signal = signum
        if process_rank() != 0:  # every process of a DDP job gets scancel's SIGTERM: the first one says so
            return
        stderr_line(
            f"mixer: {signal.Signals(signum).name} received: stopping at the next resumable point "
            f"(saving last.ckpt){'; Ctrl+C again to stop at once' if signum == signal.SIGINT else ''}"
        )

    def request_stop(self, signum: int) -> None:
        """Stop at the next resumable point, as on SIGTERM (`mixer_lightning.safety.slurm`: SLURM's requeue signal)."""
        self._on_signal(signum, None)

    def _stop_requested(self, trainer: Trainer) -> bool:
        stop = self._stop_signal is not None
        if trainer.world_size > 1:  # every process stops at the same step
            stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))
        return stop

    def _stop(self, trainer: Trainer, when: str) -> None:
        signum = self._stop_signal or signal.SIGTERM
        self._restore_handlers()
        saved = f"last.ckpt saved: {self.last_model_path}" if self.last_model_path else "no checkpoint saved"
        raise Stopped(
            signum,
            f"stopped by {signal.Signals(signum).name} {when}; {saved}; continue with the same command and "
            "--ckpt_path last",
        )

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._restore_handlers()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._restore_handlers()
