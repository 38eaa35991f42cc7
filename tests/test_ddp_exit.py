"""A DDP run on CPU processes (gloo) ends with its process group destroyed on every process: Lightning
destroys it at exit for NCCL only, and a gloo group left to the interpreter's finalisation aborts a
process now and then with "terminate called without an active exception" (issue 26 Q3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import CPU_DDP, TEST_CONFIGS, run_with_stacks_on_timeout

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
MIXER = str(Path(sys.executable).parent / "mixer")


def ddp_fit(tmp_path: Path, config: Path, *flags: str) -> subprocess.CompletedProcess:
    """``mixer fit`` of the tiny config on two CPU processes, with the callbacks of `config` (from
    tests/helpers, trusted), in `tmp_path`."""
    return run_with_stacks_on_timeout(
        [MIXER, "fit", "--config", TINY, *CPU_DDP, "--config", str(config), *flags],
        timeout=300,
        cwd=tmp_path,
        env={
            **os.environ,
            "MIXER_TRUSTED_MODULES": "helpers",
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        },
    )


@pytest.mark.slow  # two processes each start Python, Lightning and a gloo group
def test_a_cpu_ddp_run_ends_with_its_process_group_destroyed(tmp_path: Path) -> None:
    record = tmp_path / "record.yaml"
    callback = {"class_path": "helpers.process_group.ProcessGroupAtExit", "init_args": {"folder": str(tmp_path)}}
    record.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    result = ddp_fit(tmp_path, record, "--trainer.max_epochs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr
    assert {p.name: p.read_text() for p in tmp_path.glob("rank*.txt")} == {"rank0.txt": "False", "rank1.txt": "False"}


@pytest.mark.slow  # two processes each start Python, Lightning and a gloo group
def test_a_ddp_run_stopped_on_every_rank_says_so_once(tmp_path: Path) -> None:
    """X3: SIGTERM to every process of a DDP job (SLURM's scancel or pre-emption) stops each rank at the
    same step with last.ckpt; each rank printed its own "SIGTERM received" and "stopped by SIGTERM" lines.
    They are now the first process's alone; every process still exits 143."""
    signaller = tmp_path / "signal.yaml"
    callback = {
        "class_path": "helpers.signaller.SignalAt",
        "init_args": {"moment": "train_batch_end", "signals": ["SIGTERM"], "step": 2},
    }
    signaller.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    result = ddp_fit(tmp_path, signaller, "--trainer.max_epochs", "3")
    assert result.returncode == 143, result.stderr[-3000:]
    stops = [line for line in result.stderr.splitlines() if line.startswith("mixer: ")]
    assert len(stops) == 2, result.stderr[-3000:]  # as one process says it: the signal, then the stop
    assert stops[0] == "mixer: SIGTERM received: stopping at the next resumable point (saving last.ckpt)"
    assert stops[1].startswith("mixer: stopped by SIGTERM at step 2"), result.stderr[-3000:]
    assert (tmp_path / "runs" / "digits_mixer" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_a_hung_command_fails_with_each_of_its_processes_stacks_whole() -> None:
    """`run_with_stacks_on_timeout`, the DDP tests' runner: a command past its timeout fails the test with
    every process's stacks, each process's whole (the CI log of a hung two-rank run had them interleaved,
    line by line, and cut), and ends with one line a process saying where its main thread waits."""
    script = (
        "import multiprocessing, time\n"
        "def wait_in_the_child():\n"
        "    time.sleep(600)\n"
        "if __name__ == '__main__':\n"
        "    multiprocessing.get_context('fork').Process(target=wait_in_the_child).start()\n"
        "    time.sleep(600)\n"
    )
    with pytest.raises(pytest.fail.Exception) as failure:
        run_with_stacks_on_timeout([sys.executable, "-c", script], timeout=3)
    report = str(failure.value)
    last = report.splitlines()[-2:]
    assert [line.split(" waits in: ")[1] for line in last] == ['File "<string>", line 6 in <module>'] + [
        'File "<string>", line 3 in wait_in_the_child'
    ]
    sections = report.split("--- process ")[1:]
    assert len(sections) == 2 and all(s.count("Current thread") == 1 for s in sections)
