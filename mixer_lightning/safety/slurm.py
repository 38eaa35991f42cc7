"""SLURM preemption: a job submitted with ``#SBATCH --signal=USR1@90`` (``configs/trainer/slurm.yaml``)
stops at its next resumable point when the signal comes, saves ``last.ckpt``, requeues itself with
``scontrol requeue``, and the requeued job goes on with the same run: the same ``version_N``, the same
TensorBoard stream, the same batches, bit for bit.

Lightning's own SLURM handling (``SLURMEnvironment(auto_requeue=True)``, its signal connector) saves an
``hpc_ckpt_N.ckpt`` from inside the signal handler, in the middle of whatever step is running, into
the working directory, and the requeued job restores it into a new run directory. Here the
environment's settings are kept (``auto_requeue``, ``requeue_signal``; Lightning detects SLURM by its
variables) but its handler is replaced:

- `SlurmRequeue` installs the handler of ``requeue_signal`` before Lightning's connector would
  (which then keeps its own out), and passes the signal to the project's checkpoint callback
  (`mixer_lightning.safety.checkpoints.ResumeCheckpoint`): the run stops at the next moment it can resume
  from exactly, every rank at the same step, after writing ``last.ckpt`` atomically. Only then does
  global rank 0 run ``scontrol requeue JOB`` (``ARRAYJOB_TASK`` for an array task), and the process
  exits with status 128 + the signal's number.
- Every ``mixer fit`` under SLURM writes its job id into its run directory (`mark_run`, the file
  ``slurm_job``). A requeued job (``SLURM_RESTART_COUNT`` ≥ 1) started with the same command finds the
  run of its job id (`requeued_run`) and resumes its ``last.ckpt`` in that directory, as
  ``--ckpt_path last`` with the version pinned would (`mixer_lightning.cli.resume.resume_requeued_run`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning.errors import Stopped
from mixer_lightning.safety.atomic import write_text

MARKER = "slurm_job"


def job_id() -> str | None:
    """This SLURM job's id as ``scontrol requeue`` takes it (``ARRAYJOB_TASK`` for an array task), or None."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID") or None


def restart_count() -> int:
    """How many times SLURM has requeued this job (``SLURM_RESTART_COUNT``; 0 for the first start)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def mark_run(run_dir: Path) -> None:
    """Record this job's id in its run directory (nothing outside SLURM)."""
    job = job_id()
    if job is not None:
        write_text(Path(run_dir) / MARKER, job + "\n", field="trainer.logger")


def requeued_run(experiment_dir: Path) -> Path | None:
    """The run directory of this job under `experiment_dir` when the job was requeued, else None."""
    job = job_id()
    if job is None or restart_count() < 1 or not experiment_dir.is_dir():
        return None
    runs = [p.parent for p in experiment_dir.glob(f"*/{MARKER}") if p.read_text().strip() == job]
    return max(runs, key=lambda p: p.stat().st_mtime_ns) if runs else None


def requeue_settings(trainer: Trainer) -> tuple[bool, int | None]:
    """(whether to requeue, the signal): Lightning's SLURM cluster environment's ``auto_requeue`` and
    ``requeue_signal``, when the trainer runs under SLURM."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    environment = trainer._accelerator_connector.cluster_environment
    if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
        return False, None
    return True, int(environment.requeue_signal or signal.SIGUSR1)


def requeue(job: str) -> tuple[bool, str]:
    """``scontrol requeue JOB``: (whether it succeeded, what to say)."""
    if not re.fullmatch(r"[0-9_]+", job):
        return False, f"not requeued: {job!r} is not a SLURM job id"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"scontrol requeue {job} failed ({error}); resubmit the job to continue the run"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()
        return False, f"scontrol requeue {job} failed ({reason[-1] if reason else result.returncode}); resubmit the job"
    return True, f"requeued SLURM job {job} (scontrol requeue {job}); the requeued job resumes this run"


class SlurmRequeue(Callback):
    """Stops at the next resumable point on SLURM's requeue signal and requeues the job (module docstring).
    Added to every ``mixer fit`` by the CLI; it does nothing outside SLURM or with ``auto_requeue: false``."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: Any = None
        self._pid: int | None = None
        self._trainer: Trainer | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        enabled, signum = requeue_settings(trainer)
        if (
            stage != "fit"
            or not enabled
            or job_id() is None
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        # Installed before Lightning's signal connector registers its own requeue handler (it keeps out
        # when one is there): its handler would save a checkpoint mid-step and requeue at once.
        self.signum, self._pid, self._trainer = signum, os.getpid(), trainer
        self._previous = signal.signal(signum, self._on_signal)
        if trainer.is_global_zero:
            job, name = job_id(), signal.Signals(signum).name
            print(
                f"slurm  job {job}: on {name}, stop at the next resumable point, save last.ckpt and requeue "
                f"(scontrol requeue {job}); the requeued job resumes this run",
                flush=True,
            )

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:  # a DataLoader worker (forked with this handler): the trainer's process acts
            return
        from mixer_lightning.safety.checkpoints import ResumeCheckpoint

        trainer = self._trainer
        resume = next((c for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), None) if trainer else None
        if resume is None:
            print(
                f"mixer: {signal.Signals(signum).name} received, but no step_checkpoint to save: not requeued",
                file=sys.stderr,
            )
            return
        resume.request_stop(signum)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._restore()
        if not isinstance(exception, Stopped) or exception.signum != self.signum or not trainer.is_global_zero:
            return
        job = job_id()
        done, message = requeue(job) if job is not None else (False, "not requeued: no SLURM job id")
        # One line: what the stop saved, then what happens next (the requeued job, or what to do).
        stopped = str(exception)
        if done:
            stopped = stopped.replace("continue with the same command and --ckpt_path last", message)
        else:
            stopped = f"{stopped}; {message}"
        exception.args = (stopped,)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._restore()

    def _restore(self) -> None:
        if self.signum is not None and self._previous is not None and os.getpid() == self._pid:
            signal.signal(self.signum, self._previous)
            self._previous = None
