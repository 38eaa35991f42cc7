"""SLURM preemption (`mixer_lightning.callbacks.slurm`, configs/trainer/slurm.yaml): on the requeue signal a `mixer
fit` stops at its next resumable point with last.ckpt saved and requeues its job (`scontrol requeue`, a
fake one on PATH here that records the call); the requeued job, started with the same command, goes on
with the same run directory (same version_N, same TensorBoard stream), bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from test_reliability import MIXER, assert_same_runs, kill_config, wait_for

from helpers import CONFIGS, TEST_CONFIGS, run_dirs
from helpers.fakedata import write_wds
from mixer_lightning.cli import main

WDS = str(TEST_CONFIGS / "wds_mixer.yaml")
SLURM = str(CONFIGS / "trainer" / "slurm.yaml")
JOB = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "imagenet",
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NNODES": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}
CODE = 128 + signal.SIGUSR1


def fake_scontrol(folder: Path) -> Path:
    """An ``scontrol`` that appends its arguments to ``folder/scontrol.calls``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{folder / "scontrol.calls"}"\n')
    script.chmod(0o755)
    return folder


def test_a_preempted_job_requeues_and_its_next_start_continues_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """In this process: the run sends itself SIGUSR1 after step 5 (as SLURM does before the time limit); the
    same command then starts again as the requeued job (SLURM_RESTART_COUNT=1), killer included (it fires at
    step 5, which the resumed run has passed)."""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    write_wds(Path("shards"))
    run = ["--config", WDS, "--step_checkpoint.every_n_train_steps", "3"]
    main(["fit", *run, "--trainer.logger.init_args.name", "straight"])
    bin_dir = fake_scontrol(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name, value in JOB.items():
        monkeypatch.setenv(name, value)
    job = [
        *run,
        "--config",
        SLURM,
        "--config",
        kill_config(tmp_path, moment="train_batch_end", step=5, signal="SIGUSR1"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *job])
    assert exit_info.value.code == CODE
    (preempted,) = run_dirs("wds")
    assert torch.load(preempted / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 5
    assert (bin_dir / "scontrol.calls").read_text() == "requeue 4242\n"
    assert (preempted / "slurm_job").read_text().split()[0] == "4242"  # the job id, then the config's digest
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    main(["fit", *job])
    assert run_dirs("wds") == [preempted]  # the same version_0, not a new run
    assert (preempted / "config.resume1.yaml").is_file()
    assert (bin_dir / "scontrol.calls").read_text() == "requeue 4242\n"  # not requeued again
    assert_same_runs(Path("runs/straight/version_0"), preempted)


def test_a_job_that_was_not_requeued_or_another_job_starts_its_own_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a requeued start (SLURM_RESTART_COUNT ≥ 1) of the same job id resumes a run by its marker."""
    write_wds(Path("shards"))
    for name, value in JOB.items():
        monkeypatch.setenv(name, value)
    one = ["fit", "--config", WDS, "--config", SLURM, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1"]
    one += ["--trainer.limit_val_batches", "1"]
    main(one)
    main(one)  # the same job, not requeued: a second run (a script may fit twice)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    main(one)  # requeued, but another job: its own run
    assert [p.name for p in run_dirs("wds")] == ["version_0", "version_1", "version_2"]
    assert [(p / "slurm_job").read_text().split()[0] for p in run_dirs("wds")] == ["4242", "4242", "4243"]


@pytest.mark.slow  # ~1 min: three `mixer fit` processes
def test_a_signalled_slurm_job_requeues_and_the_requeued_process_continues_bit_for_bit(tmp_path: Path) -> None:
    """A real `mixer fit` with SLURM's variables, sent SIGUSR1 from outside at whatever step it is at; then the
    "requeued" process, started by the same command with SLURM_RESTART_COUNT=1."""
    write_wds(tmp_path / "shards")
    run = ["--config", WDS, "--data.root", str(tmp_path / "shards"), "--data.num_workers", "2"]
    run += ["--step_checkpoint.every_n_train_steps", "2", "--trainer.max_epochs", "4"]
    subprocess.run([MIXER, "fit", *run, "--trainer.logger.init_args.name", "straight"], check=True, cwd=tmp_path)
    bin_dir = fake_scontrol(tmp_path / "bin")
    env = {**os.environ, **JOB, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    job = [MIXER, "fit", *run, "--config", SLURM]
    first = subprocess.Popen(job, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    preempted = tmp_path / "runs" / "wds" / "version_0"
    wait_for(preempted / "checkpoints" / "last.ckpt", first)
    first.send_signal(signal.SIGUSR1)
    _, err = first.communicate(timeout=300)
    assert first.returncode == CODE, err[-3000:]
    assert (bin_dir / "scontrol.calls").read_text() == "requeue 4242\n"
    requeued = subprocess.run(
        job, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True, timeout=600
    )
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "runs" / "wds").iterdir()) == ["version_0"]
    assert len(list(preempted.glob("events.out.tfevents.*"))) == 2  # one TensorBoard stream, two writers
    assert_same_runs(tmp_path / "runs" / "straight" / "version_0", preempted)
