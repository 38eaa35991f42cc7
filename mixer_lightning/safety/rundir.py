"""Run directories (``<save_dir>/<name>/<version>/``): which one a command writes, and one writer each.

- A new run takes the next free ``version_N`` by creating it (``mkdir`` fails if another process took
  it first, so two runs started at once never share a directory).
- An existing run directory is never overwritten: `mixer fit` into a pinned version that holds a run
  is refused unless it resumes that run (``--ckpt_path``).
- ``--ckpt_path last`` is decided by the runs' own record, never by file times (`find_last_run`): the
  pinned version's ``last.ckpt``, else the highest ``version_N`` that has one.
- `RunLock`: one writer per run directory. ``mixer fit`` holds ``<run dir>/.mixer.lock`` (an advisory
  ``flock``, released by the kernel when the process dies, so a lock left by a killed run is taken
  over); a second ``fit`` of the same run is refused in one line naming the holder.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from mixer_lightning.errors import ConfigError, ResourceError
from mixer_lightning.safety.atomic import holder_alive

LOCK_NAME = ".mixer.lock"
_VERSION = re.compile(r"^version_(\d+)$")


def version_number(name: str) -> int | None:
    found = _VERSION.match(name)
    return int(found.group(1)) if found else None


def holds_a_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds anything (an empty folder made by hand is not a run)."""
    return run_dir.is_dir() and any(run_dir.iterdir())


def create_next_version(experiment_dir: Path) -> Path:
    """Create and return ``experiment_dir/version_N``, N one more than the highest taken: atomic, so
    concurrent runs get different directories."""
    try:
        experiment_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file in its place (the CLI checks this before any work)
        raise ConfigError(
            "trainer.logger.init_args.save_dir",
            f"{str(experiment_dir)!r} cannot be made: a file stands on its path",
            "give a folder for run directories, or move the file away",
        ) from None
    taken = [n for n in (version_number(p.name) for p in experiment_dir.iterdir()) if n is not None]
    number = max(taken, default=-1) + 1
    while True:
        run_dir = experiment_dir / f"version_{number}"
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            number += 1


def find_last_run(experiment_dir: Path, version: str | None = None) -> Path:
    """The ``checkpoints/last.ckpt`` that ``--ckpt_path last`` resumes, or a `ConfigError`.

    With a pinned `version`, that run's (and no other); else the run with the highest ``version_N``
    that has one (runs are numbered in the order they started). Runs with names of their own have no
    order: when one of them could be meant, the user pins it."""
    if version is not None:
        last = experiment_dir / version / "checkpoints" / "last.ckpt"
        if not last.is_file():
            where = "does not exist" if not (experiment_dir / version).is_dir() else "has no checkpoints/last.ckpt"
            raise ConfigError(
                "ckpt_path",
                f"'last': the run {str(experiment_dir / version)!r} (trainer.logger.init_args.version) {where}",
                "drop --ckpt_path to start this run, or pin the version of a run that has a last.ckpt",
            )
        return last
    runs = sorted(p.parent.parent for p in experiment_dir.glob("*/checkpoints/last.ckpt") if p.is_file())
    if not runs:
        raise ConfigError(
            "ckpt_path",
            f"'last': no run under {str(experiment_dir)!r} has a checkpoints/last.ckpt",
            "drop --ckpt_path to start a new run, or give a checkpoint path",
        )
    named = [run for run in runs if version_number(run.name) is None]
    if named and len(runs) > 1:
        names = ", ".join(run.name for run in runs[:6]) + (", ..." if len(runs) > 6 else "")
        raise ConfigError(
            "ckpt_path",
            f"'last' is ambiguous: several runs under {str(experiment_dir)!r} have a last.ckpt ({names})",
            "pin the one to resume with --trainer.logger.init_args.version NAME",
        )
    return max(runs, key=lambda run: version_number(run.name) or 0) / "checkpoints" / "last.ckpt"


def _holder(path: Path) -> str:
    try:
        pid, host, started = (path.read_text().split() + ["?", "?", "?"])[:3]
    except OSError:
        return "another process"
    when = (
        time.strftime("%Y-%m-%d %H:%M", time.localtime(float(started))) if started.replace(".", "").isdigit() else "?"
    )
    return f"process {pid} on {host}, since {when}"


class RunLock:
    """``<run dir>/.mixer.lock``, held while a process writes the run (`acquire` / `release`).

    The lock is ``flock`` on the file, which the kernel releases when its process ends however it
    ends: a lock file left by a killed run holds no lock, and is taken over. The file records
    ``PID HOST TIME`` for the message of a refused second writer. On a filesystem without ``flock``
    (some network mounts) the file itself is the lock, taken over when its PID is gone from this host.
    """

    def __init__(self, run_dir: Path, field: str = "trainer.logger"):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.field = field
        self._fd: int | None = None

    def _refuse(self) -> ResourceError:
        return ResourceError(
            self.field,
            f"the run {str(self.run_dir)!r} is being written by {_holder(self.path)} (lock {str(self.path)!r})",
            "wait for that run to end (or stop it); one process writes a run at a time",
        )

    def acquire(self) -> RunLock:
        import fcntl

        self.run_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise self._refuse() from None
            except OSError:  # no flock on this filesystem: the file is the lock
                os.close(fd)
                return self._acquire_by_pid()
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the holder released (and removed) the file between our open and flock
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()} {time.time():.0f}\n".encode())
            self._fd = fd
            return self
        raise self._refuse()

    def _acquire_by_pid(self) -> RunLock:
        if self.path.exists():
            pid, host, started = (self.path.read_text().split() + ["0", "", ""])[:3]
            since = float(started) if started.replace(".", "", 1).isdigit() else None
            if host != socket.gethostname() or (pid.isdigit() and holder_alive(int(pid), since)):
                raise self._refuse()
            self.path.unlink(missing_ok=True)  # left by a process that is gone: taken over
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise self._refuse() from None
        os.write(fd, f"{os.getpid()} {socket.gethostname()} {time.time():.0f}\n".encode())
        os.close(fd)
        self._fd = -1
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: a waiting opener re-checks the inode
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = None
