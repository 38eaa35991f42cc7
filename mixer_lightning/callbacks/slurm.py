"""SLURM preemption: a job submitted with ``#SBATCH --signal=USR1@90`` (``configs/trainer/slurm.yaml``)
stops at its next resumable point when the signal comes, saves ``last.ckpt``, requeues itself with
``scontrol requeue``, and the requeued job goes on with the same run (same ``version_N``, TensorBoard
stream and batches), bit for bit.

Lightning's own requeue handler saves an ``hpc_ckpt_N.ckpt`` from inside the signal handler, in the middle
of whatever step runs, and its requeued job starts a new run directory. Here the settings of Lightning's
``SLURMEnvironment`` are kept (``auto_requeue``, ``requeue_signal``) and its handler replaced: `SlurmRequeue`
passes the signal to `ResumeCheckpoint.request_stop`, and once the run has stopped global rank 0 runs
``scontrol requeue``. Outside training (its data being indexed, its files written after the fit) the signal
stops ``mixer fit`` at once and requeues the job the same way (`requeue_on_signal`): nothing trained is lost.
Every ``mixer fit`` under SLURM writes its job id and a digest of its config into its run directory
(`mark_run`); a requeued start of the same command finds that run (`requeued_run`) and resumes its last.ckpt,
also in a job script that runs several fits (a seed or lr loop).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning import seam
from mixer_lightning.callbacks.checkpoints import ResumeCheckpoint
from mixer_lightning.errors import ConfigError, Stopped
from mixer_lightning.safety.atomic import write_text

MARKER = "slurm_job"


def job_id() -> str | None:
    """This SLURM job's id as ``scontrol requeue`` takes it (``ARRAYJOB_TASK`` for an array task), or None."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID") or None


def restart_count() -> int:
    """How many times SLURM has requeued this job (``SLURM_RESTART_COUNT``; 0 at the first start)."""
    count = os.environ.get("SLURM_RESTART_COUNT") or "0"
    if not count.strip().isdigit():  # no way to tell a requeued start from a first one
        raise ConfigError("SLURM_RESTART_COUNT", f"{count!r} is not a number", "unset it, or set SLURM's own count")
    return int(count)


def command_key(config: Any) -> str:
    """A digest of a command's parsed config, which tells the fits of one job script apart (a seed or lr loop)."""
    text = json.dumps(config.as_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mark_run(run_dir: Path, key: str) -> None:
    """Record this job's id and the digest of the command's config (`command_key`) in its run directory
    (nothing outside SLURM)."""
    job = job_id()
    if job is not None:
        write_text(Path(run_dir) / MARKER, f"{job}\n{key}\n", field="trainer.logger")


def requeued_run(experiment_dir: Path, key: str) -> Path | None:
    """The run directory under `experiment_dir` that this command (its config's digest `key`) made in this job,
    when the job was requeued, else None."""
    job = job_id()
    if job is None or restart_count() < 1 or not experiment_dir.is_dir():
        return None
    runs = [p.parent for p in experiment_dir.glob(f"*/{MARKER}") if p.read_text().split() == [job, key]]
    return max(runs, key=lambda p: p.stat().st_mtime_ns) if runs else None


@contextmanager
def requeue_on_signal(signum: int = signal.SIGUSR1) -> Iterator[None]:
    """Under SLURM, for a whole ``mixer fit``: SLURM's requeue signal outside training (`SlurmRequeue` takes it
    inside) stops the command at once, with nothing trained lost, and requeues the job; without this the signal's
    default action ended the job unrequeued while its data were indexed or after its fit."""
    if job_id() is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[Stopped] = []

    def on_signal(received: int, frame: Any) -> None:  # in training, `SlurmRequeue` stops the run and requeues
        if raised:  # the same stop again (srun forwards the signal too)
            return
        raised.append(Stopped(received, f"stopped by {signal.Signals(received).name} outside training"))
        raised[0].outside_training = True
        raise raised[0]

    previous = signal.signal(signum, on_signal)
    try:
        yield
    except BaseException:  # the stop, or what a library made of it (the entry point finds it in the chain)
        from lightning.pytorch.utilities import rank_zero_only

        if raised and rank_zero_only.rank == 0:
            raised[0].args = (f"{raised[0]}; {requeue(job_id())}",)
        raise
    finally:
        signal.signal(signum, previous)


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
        ours = isinstance(exception, Stopped) and not getattr(exception, "outside_training", False)
        if ours and exception.signum == self.signum and trainer.is_global_zero:
            stopped = str(exception).replace("; continue with the same command and --ckpt_path last", "")
            exception.args = (f"{stopped}; {requeue(job_id())}",)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.restore()  # `requeue_on_signal`'s again
        if self.signum is not None and self.resume is not None and self.resume.stop_signal == self.signum:
            self.resume.stop(trainer, "after training")  # a signal after the last resumable point: requeue now

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.restore()

    def restore(self) -> None:
        if self.previous is not None and os.getpid() == self.pid:
            signal.signal(self.signum, self.previous)
        self.previous = None
