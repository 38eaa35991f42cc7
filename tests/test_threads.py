"""CPU threads (issue 46, item 1): the CPUs a process may use (affinity, cgroup v1/v2 quota, SLURM), the
threads torch gets in `mixer fit|test` (``--threads``, $OMP_NUM_THREADS, else the usable CPUs less the
cores other work keeps busy) and the one line said when a run would crawl; and the cluster scripts
(item 6): the sweep's emitted scripts and the shipped sbatch files."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import CONFIGS, TEST_CONFIGS, run_dirs
from mixer_lightning import hardware
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A faked machine: ``machine(cpus, cgroup=[(folder, file, text)], proc_cgroup=..., slurm=...)``."""

    made = []

    def make(cpus: int = 4, files=(), proc_cgroup: str = "0::/\n", slurm: str | None = None) -> None:
        made.append(cpus)
        root = tmp_path / f"cgroup{len(made)}"
        root.mkdir()
        for folder, name, text in files:
            (root / folder).mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_text(text)
        (tmp_path / "proc_cgroup").write_text(proc_cgroup)
        monkeypatch.setattr(hardware, "CGROUP", root)
        monkeypatch.setattr(hardware, "PROC_CGROUP", tmp_path / "proc_cgroup")
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
        if slurm is None:
            monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
        else:
            monkeypatch.setenv("SLURM_CPUS_PER_TASK", slurm)

    return make


def test_usable_cpus_follow_affinity_cgroup_quotas_and_slurm(machine) -> None:
    machine(4)
    assert hardware.usable_cpus() == 4  # the affinity, nothing else set
    machine(8, [(".", "cpu.max", "150000 100000\n")])
    assert hardware.usable_cpus() == 2  # cgroup v2: 1.5 CPUs, rounded up
    machine(8, [(".", "cpu.max", "max 100000\n")])
    assert hardware.usable_cpus() == 8  # no quota
    # v2, nested: the tightest quota of the process's cgroup and those above it
    machine(8, [(".", "cpu.max", "300000 100000\n"), ("job/step", "cpu.max", "max 100000\n")], "0::/job/step\n")
    assert hardware.usable_cpus() == 3
    # a container whose /proc/self/cgroup names the host's path, mounted with its own cgroup as the root
    machine(8, [(".", "cpu.max", "200000 100000\n")], "0::/docker/0123abcd\n")
    assert hardware.usable_cpus() == 2
    v1 = [("cpu,cpuacct/slurm", "cpu.cfs_quota_us", "100000\n"), ("cpu,cpuacct/slurm", "cpu.cfs_period_us", "50000\n")]
    machine(8, v1, "5:cpu,cpuacct:/slurm\n4:memory:/slurm\n")
    assert hardware.usable_cpus() == 2  # cgroup v1 CFS quota
    machine(8, [("cpu/slurm", "cpu.cfs_quota_us", "-1\n"), ("cpu/slurm", "cpu.cfs_period_us", "100000\n")],
            "5:cpu,cpuacct:/slurm\n")  # fmt: skip
    assert hardware.usable_cpus() == 8  # -1: none
    machine(16, slurm="6")
    assert hardware.usable_cpus() == 6  # SLURM's --cpus-per-task
    machine(2, slurm="6")
    assert hardware.usable_cpus() == 2  # never more than the affinity


def test_busy_cores_read_the_process_cpus_of_proc_stat(tmp_path: Path, monkeypatch, machine) -> None:
    """cpu0 busy 90 % of the sample, cpu1 idle, cpu2 busy but not this process's."""
    machine(2)
    stat = tmp_path / "stat"
    line = "cpu{} {} 0 0 {} 0 0 0 0 0 0\n"
    stat.write_text("cpu 0 0 0 0\n" + line.format(0, 500, 500) + line.format(1, 0, 1000) + line.format(2, 0, 1000))
    after = "cpu 0 0 0 0\n" + line.format(0, 590, 510) + line.format(1, 0, 1100) + line.format(2, 100, 1000)
    monkeypatch.setattr(hardware, "PROC_STAT", stat)
    monkeypatch.setattr(hardware.time, "sleep", lambda s: stat.write_text(after))
    assert hardware.busy_cores() == pytest.approx(0.9)
    monkeypatch.setattr(hardware, "PROC_STAT", tmp_path / "missing")
    assert hardware.busy_cores() == 0.0


def test_default_threads_share_the_usable_cpus_and_leave_the_busy_ones(machine) -> None:
    machine(4, [(".", "cpu.max", "200000 100000\n")])
    assert hardware.default_threads() == 2  # the quota, not the 4 cores of the affinity
    assert hardware.default_threads(processes=2) == 1
    assert hardware.default_threads(busy=1.3) == 2  # 2.7 of the 4 cores free: the quota's 2
    assert hardware.default_threads(busy=2.6) == 1
    assert hardware.default_threads(busy=4.0) == 1  # at least one
    machine(4)
    assert hardware.default_threads(busy=0.4) == 4
    assert hardware.default_threads(processes=2, busy=1.2) == 1  # 3 free cores, 2 processes
    machine(64, [(".", "cpu.max", "200000 100000\n")])
    assert hardware.default_threads(busy=40.0) == 2  # a quota on a host whose other cores are busy


def fit_threads(args: list[str], capsys) -> tuple[list[str], list[str]]:
    """`mixer fit` of the tiny config with `args`: the lines `ThreadCount` wrote, the console's ``cpu:`` lines."""
    Path("threads.txt").unlink(missing_ok=True)
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
          "--trainer.limit_val_batches", "1", "--trainer.callbacks+=helpers.threads.ThreadCount", *args])  # fmt: skip
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cpu:")]
    return Path("threads.txt").read_text().split(), said


def test_threads_of_mixer_fit(machine, monkeypatch, capsys) -> None:
    """Four usable cores: four threads when they are free, one (and a line saying why) when other work keeps
    2.6 busy; --threads and $OMP_NUM_THREADS win, a count above the free cores is said; the process's
    threads are its own again after the command."""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    machine(4)
    before = torch.get_num_threads()
    busy = {"cores": 0.0}
    monkeypatch.setattr(hardware, "busy_cores", lambda: busy["cores"])
    assert fit_threads([], capsys) == (["fit", "4", "4"], [])
    busy["cores"] = 2.6
    threads, said = fit_threads([], capsys)
    assert threads == ["fit", "1", "1"] and len(said) == 1 and "--threads" in said[0]
    threads, said = fit_threads(["--threads", "3"], capsys)
    assert threads == ["fit", "3", "3"] and len(said) == 1
    assert torch.get_num_threads() == before and "OMP_NUM_THREADS" not in os.environ
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    threads, said = fit_threads([], capsys)
    assert threads == ["fit", "2", "2"] and len(said) == 1  # 2 threads, 1.4 cores free: said
    assert fit_threads(["--threads", "1"], capsys) == (["fit", "1", "1"], [])  # the flag wins; one thread: quiet
    assert os.environ["OMP_NUM_THREADS"] == "2"
    busy["cores"] = 0.0
    machine(4, slurm="2")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert fit_threads([], capsys) == (["fit", "2", "2"], [])  # SLURM's --cpus-per-task
    threads, said = fit_threads(["--threads", "4"], capsys)  # more than the 2 CPUs it may use: said
    assert threads == ["fit", "4", "4"] and len(said) == 1
    # an evaluation takes the flag too
    best = run_dirs("digits_mixer")[-1] / "checkpoints" / "best.ckpt"
    main(["test", "--ckpt_path", str(best), "--threads", "3", "--trainer.callbacks+=helpers.threads.ThreadCount"])
    assert Path("threads.txt").read_text().split()[-3:] == ["test", "3", "3"]


def test_a_sweep_point_beside_others_takes_its_share(machine, monkeypatch) -> None:
    """`mixer sweep point DIR NAME --parallel N` (what PARALLEL=N run_all.sh calls) fits with the usable
    CPUs / N threads, unless $OMP_NUM_THREADS is set."""
    from mixer_lightning.commands.sweep import command

    seen = []
    monkeypatch.setattr(command, "run_point", lambda entry: seen.append(os.environ.get("OMP_NUM_THREADS")))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    machine(4, [(".", "cpu.max", "600000 200000\n")])
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "sw"])
    main(["sweep", "point", "sw", "C4_S20_seed0", "--parallel", "2"])
    assert seen == ["1"]  # 3 usable CPUs (the quota), 2 runs
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    main(["sweep", "point", "sw", "C4_S20_seed0", "--parallel", "2"])
    assert seen == ["1", "2"]


def fake_commands(folder: Path) -> dict:
    """`mixer` and `srun` stand-ins on PATH: mixer writes where it ran, its arguments and $MIXER_ARGS."""
    folder.mkdir()
    (folder / "mixer").write_text('#!/bin/sh\necho "$PWD|$*|$MIXER_ARGS" >> "$CALLS"\n')
    (folder / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    for name in ("mixer", "srun"):
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "CALLS": str(folder / "calls")}


def test_emitted_scripts_requeue_activate_and_name_no_path_of_this_machine(tmp_path: Path) -> None:
    """slurm_array.sh carries the time limit, the requeue signal and --requeue, activates an environment
    and runs `srun mixer` with the SLURM and GPU overlays; neither script spells the emitting directory;
    both run where the sweep was emitted from, wherever they are started."""
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--emit", "sweeps/tiny"])
    slurm, shell = (Path("sweeps/tiny", name).read_text() for name in ("slurm_array.sh", "run_all.sh"))
    for directive in ("--array=0-1", "--gres=gpu:1", "--time=", "--signal=USR1@90", "--requeue"):
        assert re.search(rf"^#SBATCH {re.escape(directive)}", slurm, re.M), directive
    assert "bin/activate" in slurm and "srun mixer sweep point sweeps/tiny" in slurm
    overlays = re.findall(r"--config (configs/\S+\.yaml)", slurm)
    assert {"configs/trainer/slurm.yaml", "configs/trainer/gpu.yaml"} <= set(overlays)
    assert all((CONFIGS.parent / overlay).is_file() for overlay in overlays)
    for text in (slurm, shell):
        assert str(tmp_path) not in text
    for name in ("slurm_array.sh", "run_all.sh"):
        subprocess.run(["bash", "-n", f"sweeps/tiny/{name}"], check=True)
    env = fake_commands(tmp_path / "bin")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    slurm_env = {**env, "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_ARRAY_TASK_ID": "1", "MIXER_VENV": "none"}
    subprocess.run(["bash", str(tmp_path / "sweeps/tiny/slurm_array.sh")], cwd=elsewhere, env=slurm_env, check=True)
    # an exported MIXER_ARGS adds to the overlays (it replaced them: the array trained on the CPU)
    slurm_env["MIXER_ARGS"] = "--trainer.max_epochs 2"
    subprocess.run(["bash", str(tmp_path / "sweeps/tiny/slurm_array.sh")], cwd=elsewhere, env=slurm_env, check=True)
    subprocess.run(["bash", "../sweeps/tiny/run_all.sh"], cwd=elsewhere, env=env, check=True)
    calls = [line.split("|") for line in Path(env["CALLS"]).read_text().splitlines()]
    overlays = "--config configs/trainer/gpu.yaml --config configs/trainer/slurm.yaml"
    assert calls[0] == [str(tmp_path), "sweep point sweeps/tiny C8_S12_seed0", overlays]
    assert calls[1] == [str(tmp_path), "sweep point sweeps/tiny C8_S12_seed0", overlays + " --trainer.max_epochs 2"]
    assert [c[:2] for c in calls[2:]] == [[str(tmp_path), "sweep point sweeps/tiny C4_S20_seed0"],
                                          [str(tmp_path), "sweep point sweeps/tiny C8_S12_seed0"],
                                          [str(tmp_path), "sweep report sweeps/tiny"]]  # fmt: skip


@pytest.mark.parametrize("script", sorted((CONFIGS / "slurm").glob("*.sbatch")), ids=lambda p: p.name)
def test_shipped_sbatch_files_parse_requeue_and_name_configs_that_exist(script: Path) -> None:
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    for directive in ("--time=", "--signal=USR1@90", "--requeue"):
        assert f"#SBATCH {directive}" in text, directive
    assert "bin/activate" in text and "srun mixer fit" in text
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    configs = [words[i + 1] for i, word in enumerate(words) if word == "--config"]
    assert "configs/trainer/slurm.yaml" in configs
    assert all((CONFIGS.parent / config).is_file() for config in configs), configs
