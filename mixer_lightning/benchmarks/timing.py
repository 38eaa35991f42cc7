"""Side-by-side timing: candidates run interleaved in one process, medians compared. Absolute times on a
shared machine are noisy; a ratio of medians of interleaved repetitions is not (much): every speed claim
of the project is made with `compare`."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def compare(
    candidates: dict[str, Callable[[], object]],
    repeats: int = 20,
    warmup: int = 3,
    device: torch.device | str | None = None,
    cpu: bool = False,
) -> dict:
    """Median seconds per call of each candidate (with `cpu`: ``{"wall": s, "cpu": s}``, the process's CPU
    time beside the wall time), measured round-robin with the order rotated every round (A B C, B C A, …):
    a candidate that always ran first (after the others' memory traffic) was measurably slower here than an
    identical copy of it that ran second."""

    def sync() -> None:
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    sync()
    names = list(candidates)
    wall: dict[str, list[float]] = {name: [] for name in names}
    spent: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            candidates[name]()
            sync()
            wall[name].append(time.perf_counter() - start)
            spent[name].append(time.process_time() - start_cpu)
    if cpu:
        return {n: {"wall": statistics.median(wall[n]), "cpu": statistics.median(spent[n])} for n in names}
    return {name: statistics.median(values) for name, values in wall.items()}
