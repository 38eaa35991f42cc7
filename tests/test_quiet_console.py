"""The quiet console of `mixer fit` everywhere a Trainer runs (issue 26, Q3): `mixer cka`, a sweep's
points and every process of a DDP run print none of Lightning's GPU/TPU lines, the litlogger tip, DDP's
start-up banner or the warning that an epoch has fewer batches than ``log_every_n_steps``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_DDP, TEST_CONFIGS

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
MIXER = str(Path(sys.executable).parent / "mixer")
CHATTER = (
    "GPU available",
    "TPU available",
    "💡",
    "litlogger",
    "LeafSpec",
    "Seed set to",
    "Initializing distributed",
    "distributed_backend",
    "All distributed processes",
    "log_every_n_steps",
)


def mixer(args: list[str], cwd: Path, timeout: int = 300) -> str:
    """stdout and stderr of the `mixer` command `args`, run as a user runs it: the installed console
    script (Lightning's DDP launcher starts the other processes from its command line)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([MIXER, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def assert_quiet(output: str) -> None:
    for chatter in CHATTER:
        assert chatter not in output, f"{chatter!r} in:\n{output}"


def test_mixer_cka_is_as_quiet_as_fit(trained, tmp_path: Path) -> None:
    checkpoint = trained("mixer")
    output = mixer(
        ["cka", "--ckpt", checkpoint, "--ckpt", checkpoint, "--config", TINY, "--accelerator", "cpu", "--batches", "2"],
        tmp_path,
    )
    assert "CKA of MLP-Mixer" in output
    assert_quiet(output)


def test_a_sweeps_points_are_as_quiet_as_fit(tmp_path: Path) -> None:
    """A sweep's fit of 4 batches an epoch (fewer than log_every_n_steps = 50) and its test, in the
    sweep's own process (in-process, pytest would catch the warning before it is printed)."""
    output = mixer(
        ["sweep", "--config", TINY, "--grid", "model.net.init_args.channels=4", "--seeds", "0", "--run", "sweep"],
        tmp_path,
    )
    assert "Test metrics: sweep/runs/channels4/seed0/test_metrics.json" in output, output
    assert_quiet(output)


@pytest.mark.slow  # ~40 s: two processes each start Python, Lightning and a gloo group
def test_every_process_of_a_ddp_run_is_as_quiet_as_fit(tmp_path: Path) -> None:
    output = mixer(
        [
            "fit",
            "--config",
            TINY,
            *CPU_DDP,
            "--trainer.max_epochs",
            "1",
        ],
        tmp_path,
    )
    assert "on     cpu, 2 devices" in output
    assert_quiet(output)
