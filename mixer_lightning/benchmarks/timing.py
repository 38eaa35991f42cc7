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
    """Median seconds per call of each candidate, measured round-robin (A, B, A, B, ...)."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
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
