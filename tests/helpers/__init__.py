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
import tempfile
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
    with `code`."""
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
    every process it started (DDP ranks, DataLoader workers), so a hang that CI meets once in many runs is a
    report of where each process waits, not a bare timeout. They run with faulthandler on; all are stopped
    (SIGSTOP), then each in turn gets SIGABRT and SIGCONT, so that each one's stacks come whole (not
    interleaved with the others') and none reacts to another's end. The report ends with one line a process
    (its main thread's innermost frame): what a truncated CI log still shows."""
    import pytest

    env = {**kwargs.pop("env", os.environ), "PYTHONFAULTHANDLER": "1"}
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, start_new_session=True, **kwargs
        )
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            report = _stacks_of_the_session(process.pid, stderr)
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            pytest.fail(f"{' '.join(command[:3])} ran past {timeout} s; its processes' stacks:\n{report}")
        stderr.seek(0)
        err = stderr.read()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _session_processes(session: int) -> list[tuple[int, int, str]]:
    """(pid, parent pid, state) of the processes of `session` (Linux's /proc), in the order they started."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):  # not a process, or one that just ended
            continue
        if entry.name.isdigit() and int(fields[3]) == session:
            found.append((int(entry.name), int(fields[1]), fields[0]))
    return sorted(found)


def _stacks_of_the_session(session: int, stderr: Any) -> str:
    """Each process of `session`'s faulthandler stacks, one process at a time (`run_with_stacks_on_timeout`)."""
    import time

    os.killpg(session, signal.SIGSTOP)
    whole, last = [], []
    for pid, parent, _ in _session_processes(session):
        start = stderr.seek(0, os.SEEK_END)
        os.kill(pid, signal.SIGABRT)
        os.kill(pid, signal.SIGCONT)
        for _ in range(100):  # up to 10 s for it to write its stacks and end (a zombie until its parent runs)
            if all(p != pid or state == "Z" for p, _, state in _session_processes(session)):
                break
            time.sleep(0.1)
        stderr.seek(start)
        stacks = stderr.read()
        whole.append(f"--- process {pid} (parent {parent}):\n{stacks[-8000:]}")
        main = stacks.split("Current thread", 1)[-1].splitlines()[1:2] or ["(no stack)"]
        last.append(f"process {pid} (parent {parent}) waits in: {main[0].strip()}")
    return "\n".join(whole)[-24000:] + "\n" + "\n".join(last)


def error_field(capsys: Any, args: list[str], code: int = 2) -> str:
    """Run ``mixer args`` in this process, check that it exits with `code`, and return the field its error
    names: the last stderr line is ``mixer: error: FIELD: problem[; fix]``. Tests assert the exit code and
    the field, never the sentence."""
    import pytest

    from mixer_lightning.cli.entry import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == code, capsys.readouterr().err
    return field_of(capsys.readouterr().err)


def field_of(stderr: str) -> str:
    """The field named by the ``mixer: error: FIELD: ...`` line of `stderr` (the last such line)."""
    lines = [line for line in stderr.splitlines() if line.startswith("mixer: error")]
    assert lines, stderr[-2000:]
    rest = lines[-1].split(":", 2)[-1]  # after "mixer: error:" (or "mixer: error (rank 1):")
    return rest.split(": ", 1)[0].strip().removeprefix("--")  # a project command's flag: --out is `out`


def accuracy(ckpt: str | Path, config: str | Path, split: str = "test") -> float:
    """Top-1 accuracy of the checkpoint's network on `split` of the config's data, as `mixer fit` (``val``) and
    `mixer test` evaluate it (its first ``trainer.limit_<split>_batches`` batches), computed here in float32
    without Lightning: the known value an evaluation's record must hold."""
    import torch
    import yaml

    from mixer_lightning.analysis.features import datamodule_from_config
    from mixer_lightning.tasks.loading import load_classifier

    module = load_classifier(str(ckpt)).eval()
    datamodule = datamodule_from_config(str(config))
    datamodule.setup("fit" if split == "val" else split)
    limit = (yaml.safe_load(Path(config).read_text()).get("trainer") or {}).get(f"limit_{split}_batches")
    correct = total = 0
    with torch.no_grad():
        for i, (x, y) in enumerate(getattr(datamodule, f"{split}_dataloader")()):
            if isinstance(limit, int) and i >= limit:
                break
            correct += int((module(x).argmax(1) == y).sum())
            total += len(y)
    return correct / total
