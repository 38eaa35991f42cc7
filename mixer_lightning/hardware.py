"""The CPUs a process may use, and the intra-op threads torch gets on them (``--threads``).

`usable_cpus` counts the CPUs this process may run on (its affinity: taskset, a cpuset, SLURM's binding),
capped by a CPU quota: cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``, ``SLURM_CPUS_PER_TASK``.
``os.cpu_count()`` counts the machine's; torch and Lightning count the affinity only (privately), as
Python 3.13's ``os.process_cpu_count`` does; none reads a quota.

Torch's default, one thread per core, is right on an idle machine and a collapse on a busy one: its
threads wait for each other at every parallel region, and one of them waiting for a core stalls the rest
(a 2-core machine running other work: a step of Fig. 5's S-Mixer at Ω = 2^14 took 2,289 ms with two
threads, 106 ms with one, the same gradients; benchmarks/RESULTS.md, "Threads on a busy CPU"). So a run takes the usable CPUs shared
among the processes on them, less the cores other work keeps busy when it starts (`busy_cores`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PROC_STAT = Path("/proc/stat")
SAMPLE_S = 0.2  # how long `busy_cores` watches the CPUs


def _quota(directory: Path, v2: bool) -> float | None:
    """The CPU quota a cgroup folder sets, in CPUs: v2 ``cpu.max`` = "QUOTA PERIOD" ("max": none), v1
    ``cpu.cfs_quota_us`` (-1: none) / ``cpu.cfs_period_us``; None without one."""
    try:
        if v2:
            quota, period = (directory / "cpu.max").read_text().split()
        else:
            quota, period = ((directory / f"cpu.cfs_{k}_us").read_text().strip() for k in ("quota", "period"))
        return float(quota) / float(period) if quota not in ("max", "-1") and float(period) > 0 else None
    except (OSError, ValueError):
        return None


def _cgroup_quota() -> float | None:
    """The tightest CPU quota of this process's cgroup and those above it, in CPUs; None if none."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""  # v2: the one unified hierarchy; v1: the cpu controller's (cpu or cpu,cpuacct)
        if not v2 and "cpu" not in controllers.split(","):
            continue
        for mount in [CGROUP] if v2 else [CGROUP / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]:
            # In a container the cgroup's path may be the host's while the mount's root is the container's
            # cgroup: every folder from the path up to the mount is read, those that are there count.
            here = mount / path.lstrip("/")
            for directory in [here, *here.parents]:
                if mount not in (directory, *directory.parents):
                    break
                quota = _quota(directory, v2)
                if quota is not None:
                    quotas.append(quota)
    return min(quotas) if quotas else None


def _affinity() -> int:
    """The CPUs this process may run on (taskset, a cpuset, SLURM's binding), before any quota."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def usable_cpus() -> int:
    """The CPUs this process may use (module docstring), at least 1."""
    count = _affinity()
    quota = _cgroup_quota()
    if quota is not None:
        count = min(count, math.ceil(quota))
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        count = min(count, int(slurm))
    return max(1, count)


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU of this process's affinity: (all time, idle time) from /proc/stat (idle and iowait idle;
    steal, the time a VM's host gave away, is busy)."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    times = {}
    for line in PROC_STAT.read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and (mine is None or int(name[3:]) in mine):
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (sum(values), values[3] + values[4])
    return times


def busy_cores(seconds: float = SAMPLE_S) -> float:
    """How many of this process's CPUs other work keeps busy: their busy share of /proc/stat's time over
    `seconds`, while this process sleeps; 0.0 where /proc/stat is not there (macOS, Windows)."""
    try:
        before = _cpu_times()
        time.sleep(seconds)
        after = _cpu_times()
    except (OSError, ValueError):
        return 0.0
    busy = 0.0
    for cpu, (total, idle) in after.items():
        if cpu in before and total > before[cpu][0]:
            elapsed = total - before[cpu][0]
            busy += 1 - (idle - before[cpu][1]) / elapsed
    return max(0.0, busy)


def default_threads(processes: int = 1, busy: float = 0.0) -> int:
    """Threads for each of `processes` sharing this process's CPUs: the usable CPUs, or the cores `busy`
    leaves free of those it may run on (rounded) if fewer, shared among them; at least one. (A quota of 2
    CPUs on a host whose other cores are busy still has its 2: the free cores, not the quota, are reduced.)"""
    return max(1, min(usable_cpus(), round(_affinity() - busy)) // max(1, processes))


def set_threads(threads: int | None, processes: int = 1, report=print) -> int:
    """Give torch `threads` intra-op threads (the ``--threads`` flag) or, without one, ``$OMP_NUM_THREADS``
    when set, else `default_threads`; $OMP_NUM_THREADS is set to it too, for the processes this one starts.
    `report` (None: silent) gets one line when other work is running and so the count is below this
    process's share of the usable CPUs, or when a count given is above what the CPUs, less the cores other
    work keeps busy, hold: a run that will crawl. Returns the count."""
    import torch

    env = os.environ.get("OMP_NUM_THREADS", "")
    given = threads or (int(env) if env.isdigit() and int(env) > 0 else None)
    # one thread waits for no other: with one given there is nothing to measure
    busy = busy_cores() if given is None or (given > 1 and report is not None) else 0.0
    fit, share = default_threads(processes, busy), max(1, usable_cpus() // max(1, processes))
    count = given or fit
    torch.set_num_threads(count)
    os.environ["OMP_NUM_THREADS"] = str(count)
    if report is None:
        return count
    other = f"other work keeps {busy:.1f} of the {_affinity()} cores this process may run on busy"
    if given is None and count < share:
        report(f"cpu: {count} torch thread(s), not {share}: {other} (--threads N to choose)")
    elif given is not None and given > fit:
        why = other if busy >= 0.5 else f"this process may use {usable_cpus()} CPUs"
        report(f"cpu: {given} torch threads while {why}: training may run many times slower than with --threads {fit}")
    return count


@contextmanager
def threads_of_command() -> Iterator[None]:
    """What `set_threads` changes (torch's threads, ``$OMP_NUM_THREADS``) ends with the command: a caller of
    `mixer` in-process (a sweep point, a notebook) keeps its own."""
    import torch

    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp


# ------------------------------------------------------------------------------ a `mixer` child process

# `mixer` started as the console script starts it: without the working directory on sys.path (`-c` puts it
# first), so that a `datasets.py` or `yaml.py` lying there is not imported in place of the package.
CHILD = "import sys\nif sys.path and sys.path[0] in ('', '.'):\n    del sys.path[0]\nfrom mixer_lightning.cli import main\nmain()"


def mixer_command(arguments: list[str]) -> list[str]:
    """The command line of ``mixer ARGUMENTS`` in a process of its own, for the parts below the command line
    that run it (a sweep's points, a benchmarked fit): they reach it as a shell does, never by import."""
    import sys

    return [sys.executable, "-c", CHILD, *arguments]
