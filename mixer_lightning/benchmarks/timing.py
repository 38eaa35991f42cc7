"""Side-by-side timing: candidates run interleaved in one process, medians compared.

Absolute times on shared machines are noisy; a ratio of medians of interleaved repetitions is not
(much). Every speed claim of the project is made with `compare`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def compare(
    candidates: dict[str, Callable[[], object]],
    repeats: int = 20,
    warmup: int = 3,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Median seconds per call of each candidate, measured round-robin with the order rotated every
    round (A B C, B C A, C A B, ...): a candidate that always ran first (after the others' memory
    traffic) was measurably slower here than an identical copy of it that ran second."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            fn = candidates[name]
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def training_step(model: torch.nn.Module, batch: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    """One forward + backward + SGD step of `model` on a fixed batch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(batch), targets).backward()
        optimizer.step()

    return step


def inference(model: torch.nn.Module, batch: torch.Tensor) -> Callable[[], None]:
    def forward() -> None:
        with torch.inference_mode():
            model(batch)

    return forward
