"""SLURM preemption: a job submitted with ``#SBATCH --signal=USR1@90`` (``configs/trainer/slurm.yaml``)
stops at its next resumable point when the signal comes, saves ``last.ckpt``, requeues itself with
``scontrol requeue``, and the requeued job goes on with the same run (same ``version_N``, TensorBoard
stream and batches), bit for bit.

Lightning's own requeue handler saves an ``hpc_ckpt_N.ckpt`` from inside the signal handler, in the middle
of whatever step runs, and its requeued job starts a new run directory. Here the settings of Lightning's
``SLURMEnvironment`` are kept (``auto_requeue``, ``requeue_signal``) and its handler replaced: `SlurmRequeue`
passes the signal to `ResumeCheckpoint.request_stop`, and once the run has stopped global rank 0 runs
``scontrol requeue``. Every ``mixer fit`` under SLURM writes its job id into its run directory
(`mark_run`); a requeued start of the same job finds that run (`requeued_run`) and resumes its last.ckpt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning import seam
from mixer_lightning.callbacks.checkpoints import ResumeCheckpoint
from mixer_lightning.errors import Stopped
from mixer_lightning.safety.atomic import write_text

MARKER = "slurm_job"


def job_id() -> str | None:
    """This SLURM job's id as ``scontrol requeue`` takes it (``ARRAYJOB_TASK`` for an array task), or None."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID") or None


def restart_count() -> int:
    """How many times SLURM has requeued this job (``SLURM_RESTART_COUNT``; 0 at the first start)."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


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


def requeue(job: str) -> str:
    """``scontrol requeue JOB``; what happens next, in words."""
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"scontrol requeue {job} failed ({error}); resubmit the job to continue the run"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines() or [f"status {result.returncode}"]
        return f"scontrol requeue {job} failed ({reason[-1]}); resubmit the job to continue the run"
    return f"requeued SLURM job {job} (scontrol requeue {job}); the requeued job resumes this run"


class SlurmRequeue(Callback):
    """On SLURM's requeue signal: stop at the next resumable point with last.ckpt saved, then requeue the
    job (module docstring). Does nothing outside SLURM or with ``auto_requeue: false``."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: Any = None
        self.pid: int | None = None
        self.resume: ResumeCheckpoint | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        environment = seam.cluster_environment(trainer)
        self.resume = next((c for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), None)
        if (
            stage != "fit"
            or self.resume is None  # nothing to stop at a resumable point with: Lightning's own handler
            or not isinstance(environment, SLURMEnvironment)
            or not environment.auto_requeue
            or job_id() is None
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        self.signum, self.pid = int(environment.requeue_signal or signal.SIGUSR1), os.getpid()
        # Before Lightning's signal connector, which keeps its own requeue handler out when one is there.
        self.previous = signal.signal(self.signum, self.on_signal)
        if trainer.is_global_zero:
            print(f"slurm  job {job_id()}: on {signal.Signals(self.signum).name}, stop and requeue", flush=True)

    def on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() == self.pid:  # not in a forked DataLoader worker
            self.resume.request_stop(signum)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.restore()
        if isinstance(exception, Stopped) and exception.signum == self.signum and trainer.is_global_zero:
            stopped = str(exception).replace("; continue with the same command and --ckpt_path last", "")
            exception.args = (f"{stopped}; {requeue(job_id())}",)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.restore()

    def restore(self) -> None:
        if self.previous is not None and os.getpid() == self.pid:
            signal.signal(self.signum, self.previous)
        self.previous = None
