"""Test helpers, imported as ``from helpers import ...`` (pytest puts tests/ on the path): where the
configs are, the run directories a test's `mixer fit` made, JSON files. Also here: `fakedata` (tiny
datasets in their real on-disk formats), `trained` (tiny trained checkpoints, see the ``trained``
fixture), and the callbacks the kill/resume tests name by class path (`killer`, `sweep_killer`,
`recorder`; trusted with ``MIXER_TRUSTED_MODULES=helpers``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
TEST_CONFIGS = ROOT / "tests" / "configs"


def run_dirs(name: str) -> list[Path]:
    """Run directories runs/<name>/version_* in the current directory, oldest first."""
    return sorted(Path("runs", name).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))


# Two CPU processes under the shipped DDP overlay (gloo, float32): the slow tests' multi-process run
CPU_DDP = [
    "--config",
    str(CONFIGS / "trainer" / "ddp.yaml"),
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "2",
    "--trainer.precision",
    "32-true",
]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def one_line_error(capsys: Any, args: list[str], code: int = 2) -> str:
    """The one ``mixer: error:`` line that `mixer args` prints to stderr, after checking that it exits
    with `code`. It calls the entry point where it is defined (`mixer_lightning.cli.entry.main`), not
    the package's ``mixer_lightning.cli.main``: tests replace that one to record what ``mixer sweep
    point`` runs (test_sweep_point_does_what_each_state_needs), and a helper looking it up there when
    called would run the recorder, which raises nothing."""
    import pytest

    from mixer_lightning.cli.entry import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mixer: error: "), err
    return err[0]


def run_with_stacks_on_timeout(command: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)``, except that a
    command still running after `timeout` seconds fails the test with the Python stack of every thread of
    every process it started (DDP ranks, DataLoader workers): they run with faulthandler on and get SIGABRT,
    so a hang that CI meets once in many runs is a report of where each process waits, not a bare timeout."""
    import pytest

    env = {**kwargs.pop("env", os.environ), "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True, **kwargs
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)  # the whole session: the ranks Lightning started and their workers
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        pytest.fail(f"{' '.join(command[:3])} ran past {timeout} s; its processes' stacks:\n{err[-30000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)
