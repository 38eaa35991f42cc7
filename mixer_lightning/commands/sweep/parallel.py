"""A sweep's points side by side: `run_points_in_parallel` starts each as its own ``mixer sweep point``
process (`CHILD`: nothing of the working directory on sys.path; on Linux it dies with the sweep),
logs each to ``DIR/logs/NAME.log``, forwards SIGTERM/SIGINT/SIGHUP to the points and ends in one line.
What a point still needs is decided in the child by `runs.run_point`."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from mixer_lightning.commands.sweep.runs import LOGS, load_metrics
from mixer_lightning.errors import Stopped


def threads_per_run(parallel: int) -> str:
    """OMP threads for each of `parallel` runs side by side: the CPUs split between them (at least 1),
    unless ``$OMP_NUM_THREADS`` says otherwise. On an idle 2-core CPU two one-thread runs take what two
    two-thread runs in turn take (1.02×, `benchmarks/sweep_lanes.sh`); a one-thread run does not stall
    when another process takes a core, where torch's second thread waits at every parallel op."""
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // parallel))


# How a child of `run_points_in_parallel` starts: as the `mixer` console script does, with nothing of
# the working directory on sys.path. ``python -m`` and ``-c`` put it first, so a ``timm.py`` or
# ``yaml.py`` lying there would be imported in place of the real package and run (``-P`` would do
# this too, from Python 3.11 on). On Linux the child then asks the kernel for SIGTERM when its parent
# dies (prctl PR_SET_PDEATHSIG): a SIGKILLed sweep takes its points with it, each stopping at its next
# resumable step with last.ckpt, instead of orphans training on into the next run of the sweep. A parent
# that died before the prctl call is caught by comparing the parent's pid with the one it gave.
PARENT_ENV = "MIXER_SWEEP_PARENT"
CHILD = (
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "import os\n"
    "if sys.platform.startswith('linux'):\n"
    "    try:\n"
    "        import ctypes\n"
    "        ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGTERM
    "    except (OSError, AttributeError):\n"
    "        pass\n"
    f"if os.environ.get('{PARENT_ENV}', str(os.getppid())) != str(os.getppid()):\n"
    "    sys.exit('mixer: sweep point: the sweep that started this point has ended; not started')\n"
    "from mixer_lightning.cli import main\n"
    "main()"
)
# The signals a --parallel sweep forwards to its points, and as what (no SIGHUP on Windows).
FORWARD = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT}
if hasattr(signal, "SIGHUP"):
    FORWARD[signal.SIGHUP] = signal.SIGTERM


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    last = lines[-1] if lines else ""
    return last if len(last) <= 200 else last[:197] + "..."


def _elapsed(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def run_points_in_parallel(directory: str | Path, runs: list[dict], parallel: int, log=print) -> list[str]:
    """Every run through ``mixer sweep point DIRECTORY NAME`` in its own process, `parallel` at a time
    (several small models on one GPU, or one single-threaded run per core); returns the names of the
    runs whose process failed. Each process decides, as `run_point` does, what its run still needs.

    Each child writes to ``DIRECTORY/logs/NAME.log`` (appended, a header per start); the console gets
    one line per start and per end (done with its test/acc1, or failed with the last line of its log).
    Each child runs in its own process group, so a terminal's Ctrl+C reaches this process only; SIGTERM,
    SIGINT and SIGHUP here are forwarded to every running child (SIGHUP as SIGTERM), no point is started
    after them, the children are waited for (they save last.ckpt and stop) and the sweep ends with
    `Stopped`: one line, exit status 128 + the signal. A second Ctrl+C is forwarded too (the children
    then stop at once). Children of a SIGKILLed sweep get SIGTERM from the kernel (`CHILD`)."""
    import subprocess
    import sys
    import threading
    import time

    env = {**os.environ, "OMP_NUM_THREADS": threads_per_run(parallel), PARENT_ENV: str(os.getpid())}
    names = [entry.get("name") or Path(entry["config"]).stem for entry in runs]
    run_dirs = {entry.get("name") or Path(entry["config"]).stem: Path(entry["run_dir"]) for entry in runs}
    logs = Path(directory, LOGS)
    logs.mkdir(parents=True, exist_ok=True)
    pending, active, failed, received = list(names), {}, [], []
    counts = {"done": 0, "stopped": 0}
    sent: dict = {}  # process -> how many of the received signals it was sent

    def catch_up(process) -> None:
        while sent.get(process, 0) < len(received):
            signum = received[sent.get(process, 0)]
            sent[process] = sent.get(process, 0) + 1
            if process.poll() is None:
                process.send_signal(FORWARD[signum])

    def forward(signum, frame) -> None:
        received.append(signum)
        for process in list(active):
            catch_up(process)

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in FORWARD:
            handlers[signum] = signal.signal(signum, forward)
    log(f"sweep: {len(names)} runs, {parallel} at a time, {env['OMP_NUM_THREADS']} thread(s) each; logs in {logs}")
    try:
        while active or (pending and not received):
            while pending and len(active) < parallel and not received:
                name = pending.pop(0)
                path = logs / f"{name}.log"
                with open(path, "ab") as out:
                    out.write(f"==== mixer sweep point {directory} {name}: started {time.ctime()}\n".encode())
                    out.flush()
                    command = [sys.executable, "-c", CHILD, "sweep", "point", str(directory), name]
                    process = subprocess.Popen(
                        command,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                active[process] = (name, path, time.monotonic())
                catch_up(process)  # a signal that came while it was being started
                log(f"sweep: {name}: started (log: {path})")
            time.sleep(0.2)
            for process in [p for p in active if p.poll() is not None]:
                name, path, started = active.pop(process)
                code = process.returncode
                took = _elapsed(time.monotonic() - started)
                if code == 0:
                    counts["done"] += 1
                    metrics = load_metrics(run_dirs[name])[0]
                    result = f", test/acc1 {metrics['test/acc1']:.4f}" if metrics else ""
                    log(f"sweep: {name}: done in {took}{result} (log: {path})")
                elif received and code in (128 + signal.SIGTERM, 128 + signal.SIGINT, -signal.SIGTERM, -signal.SIGINT):
                    counts["stopped"] += 1
                    log(f"sweep: {name}: stopped after {took} ({_last_line(path)}) (log: {path})")
                else:
                    failed.append(name)
                    log(f"sweep: {name}: failed (exit {code}) after {took}: {_last_line(path)} (log: {path})")
    finally:
        for process in active:  # only on an error of this loop itself: the children do not outlive it
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in active:
            process.wait()
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if received:
        signum = received[0]
        raise Stopped(
            signum,
            f"sweep {directory}: stopped by {signal.Signals(signum).name}: {counts['stopped']} runs stopped (each "
            f"resumes from its last.ckpt), {counts['done']} done, {len(failed)} failed, {len(pending)} not started; "
            "run the same command again to continue",
        )
    return failed
