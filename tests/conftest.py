"""Fixtures shared by every test file; plain helpers are the package `helpers`. Tests drive the real
`mixer` entry point (`mixer_lightning.cli.main`)."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

# Under pytest-xdist (`make test` runs one worker per core) each worker, and each `mixer` it starts, takes
# one thread (set before torch is imported): at torch's default of one thread per core, N workers ran N²
# threads, which spun against each other (a third of the CPU time in the kernel on 2 cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightning.pytorch  # noqa: F401  (first import here: its log handlers bind to pytest's session stream,
import pytest  #             not to the stream of the first test that imports it, closed after that test)

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*isinstance\\(treespec, LeafSpec\\).*")


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in its own empty directory, so `runs/` and `data/` land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """``trained(kind)``: the last.ckpt of a short `mixer fit` of the tiny config `kind` (``mixer``,
    ``sw_mlp``, ``rp_s_mixer``, ``kron``), trained once per test session on first use."""
    from helpers.trained import checkpoint

    return lambda kind: checkpoint(kind, tmp_path_factory)


@pytest.fixture
def signals_as_in_a_terminal() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP as a process started from a terminal has them, and back after: pytest
    started by nohup or in the background of a script inherits SIGINT (and SIGHUP) ignored, which
    ``mixer`` rightly respects, so a test that signals itself would see nothing happen."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
