"""A sweep's points side by side (``--run DIR --parallel N``): each its own ``mixer sweep point DIR NAME``
process, logged to ``DIR/logs/NAME.log``; what a point still needs is decided in it (`runs.run_point`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from mixer_lightning.commands.sweep.emit import LOGS
from mixer_lightning.commands.sweep.manifest import load_metrics
from mixer_lightning.errors import Stopped
from mixer_lightning.hardware import mixer_command, usable_cpus


def threads_per_run(parallel: int) -> str:
    """OMP threads for each of `parallel` runs: the usable CPUs (`hardware.usable_cpus`: affinity, cgroup
    and SLURM quota) split between them, unless ``$OMP_NUM_THREADS`` is set. On a 2-core CPU two one-thread runs side by side take what two two-thread runs in turn take
    (1.02×, benchmarks/sweep_lanes.sh), and a one-thread run does not stall when a core is taken."""
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, usable_cpus() // parallel))


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace")[-4096:].splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def run_points_in_parallel(directory: str | Path, runs: list[dict], parallel: int, log=print) -> list[str]:
    """Every run through its own ``mixer sweep point`` process, `parallel` at a time; returns the names of the
    runs whose process failed. The points share this process group, so a terminal's Ctrl+C or SLURM's
    signal reaches each directly; a SIGTERM or SIGHUP sent to this process alone is passed on to them. After
    a signal no point starts, the running ones are waited for (each saves last.ckpt and stops) and the sweep
    ends with `Stopped`: exit status 128 + the signal."""
    env = {**os.environ, "OMP_NUM_THREADS": threads_per_run(parallel)}
    logs = Path(directory, LOGS)
    logs.mkdir(parents=True, exist_ok=True)
    pending, active, failed, received = list(runs), {}, [], []
    done = stopped = 0

    def forward(signum, frame) -> None:
        received.append(signum)
        for process in active:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    handlers = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    log(f"sweep: {len(runs)} runs, {parallel} at a time, {env['OMP_NUM_THREADS']} thread(s) each; logs in {logs}")
    try:
        while active or (pending and not received):
            while pending and len(active) < parallel and not received:
                entry = pending.pop(0)
                path = logs / f"{entry['name']}.log"
                with open(path, "ab") as out:
                    out.write(f"==== mixer sweep point {directory} {entry['name']}: started {time.ctime()}\n".encode())
                    out.flush()
                    command = mixer_command(["sweep", "point", str(directory), entry["name"]])
                    process = subprocess.Popen(
                        command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                    )
                active[process] = (entry, path, time.monotonic())
                log(f"sweep: {entry['name']}: started (log: {path})")
            time.sleep(0.2)
            for process in [p for p in active if p.poll() is not None]:
                entry, path, started = active.pop(process)
                took = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - started))
                if process.returncode == 0:
                    done += 1
                    metrics = load_metrics(entry["run_dir"])[0]
                    result = f", test/acc1 {metrics['test/acc1']:.4f}" if metrics else ""
                    log(f"sweep: {entry['name']}: done in {took}{result} (log: {path})")
                elif received and process.returncode in (143, 130, -signal.SIGTERM, -signal.SIGINT):
                    stopped += 1
                    log(f"sweep: {entry['name']}: stopped after {took} ({_last_line(path)}) (log: {path})")
                else:
                    failed.append(entry["name"])
                    log(
                        f"sweep: {entry['name']}: failed (exit {process.returncode}) after {took}: {_last_line(path)} (log: {path})"
                    )
    except KeyboardInterrupt:  # Ctrl+C reached the points too: each stops as Lightning stops on it
        received.append(signal.SIGINT)
    finally:
        for process in active:
            process.wait()
        stopped += len(active)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if received:
        raise Stopped(
            received[0],
            f"sweep {directory}: stopped by {signal.Signals(received[0]).name}: {stopped} runs stopped (each resumes "
            f"from its last.ckpt), {done} done, {len(failed)} failed, {len(pending)} not started; "
            "run the same command again to continue",
        )
    return failed
