"""Hardware overlays (configs/trainer/*.yaml) swapped by flags only: bf16 on the CPU, DDP with two CPU
processes, a simulated two-node torchrun, and (on a GPU machine) gpu, ddp, bf16 and FSDP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback

from helpers import CONFIGS, CPU_DDP, TEST_CONFIGS, accuracy, read_json, run_dirs, run_with_stacks_on_timeout
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
MIXER = str(Path(sys.executable).parent / "mixer")
OVERLAY = {name: str(CONFIGS / "trainer" / f"{name}.yaml") for name in ("cpu", "gpu", "ddp", "fsdp", "bf16", "tpu")}
OVERLAY["multinode"] = str(CONFIGS / "trainer" / "multinode.yaml")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def last_checkpoint() -> dict:
    return torch.load(run_dirs("digits_mixer")[-1] / "checkpoints" / "last.ckpt", weights_only=False)


def run_mixer(args: list[str], timeout: int = 300, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = run_with_stacks_on_timeout([MIXER, *args], timeout=timeout, env=env, **kwargs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_bf16_mixed_on_the_cpu() -> None:
    main(
        ["fit", "--config", TINY, "--config", OVERLAY["cpu"], "--config", OVERLAY["bf16"], "--trainer.max_epochs", "1"]
    )
    run = run_dirs("digits_mixer")[-1]
    assert "precision: bf16-mixed" in (run / "config.yaml").read_text()
    state = last_checkpoint()["state_dict"]
    assert all(v.dtype == torch.float32 for k, v in state.items() if v.is_floating_point())  # float32 master weights
    figure = accuracy(run / "checkpoints" / "last.ckpt", run / "config.yaml", "val")
    assert read_json(run / "fit_summary.json")["val/acc1"] == pytest.approx(
        figure, abs=0.04
    )  # bf16 may flip a prediction or two


def test_tpu_overlay_precision_bf16_true_on_the_cpu() -> None:
    """The TPU overlay's bf16-true (weights and activations in bf16), on the CPU in place of the TPU."""
    main(
        [
            "fit",
            "--config",
            TINY,
            "--config",
            OVERLAY["tpu"],
            "--trainer.accelerator",
            "cpu",
            "--trainer.devices",
            "1",
            "--trainer.max_epochs",
            "1",
        ]
    )
    state = last_checkpoint()["state_dict"]
    weights = [v for k, v in state.items() if v.is_floating_point() and k.endswith("weight")]
    assert weights and all(v.dtype == torch.bfloat16 for v in weights)


@pytest.mark.slow  # ~30 s: two processes each start Python, Lightning and a gloo group
def test_ddp_with_two_cpu_processes_and_the_global_batch(tmp_path: Path) -> None:
    """The ddp overlay on two CPU processes, launched by Lightning from the installed ``mixer``. With
    GlobalBatchSize 128 and 32 images per process the gradient accumulation is 2 (1 process: 4)."""
    result = run_mixer(
        [
            "fit",
            "--config",
            TINY,
            *CPU_DDP,
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "4",
            "--trainer.callbacks+=mixer_lightning.data.batching.GlobalBatchSize",
            "--trainer.callbacks.batch_size",
            "128",
        ],
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert "on     cpu, 2 devices" in output  # (Lightning's "MEMBER: 1/2" lines are silenced: test_quiet_console)
    assert "Global batch 128 = 32 per device × 2 devices × 2 accumulated batches" in output
    (run,) = (tmp_path / "runs" / "digits_mixer").glob("version_*")
    assert read_json(run / "fit_summary.json")["steps"] == 2  # 4 batches per process, 2 per step


class ArgvRecorder(Callback):
    """Records sys.argv when training starts: what Lightning's DDP launcher re-executes."""

    seen: list[list[str]] = []

    def on_fit_start(self, trainer, pl_module) -> None:
        ArgvRecorder.seen.append(list(sys.argv))


def test_the_command_line_stays_in_sys_argv_for_the_ddp_launcher(monkeypatch) -> None:
    """Lightning starts DDP processes 1..N-1 as ``python sys.argv[0] *sys.argv[1:]``; `main` must leave
    the arguments there (the fast guard of the slow two-process test)."""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "test_hardware")  # the recorder below
    args = [
        "fit",
        "--config",
        TINY,
        "--trainer.fast_dev_run",
        "true",
        "--trainer.callbacks+=test_hardware.ArgvRecorder",
    ]
    saved = list(sys.argv)
    main(args)
    assert ArgvRecorder.seen[-1][1:] == args and sys.argv == saved


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_multinode_overlay_with_torchrun_two_simulated_nodes(tmp_path: Path) -> None:
    """Two torchrun "nodes" on this machine (one CPU process each) join one DDP run, as two machines
    would: the overlay's num_nodes with the ranks read from torchrun's environment."""
    port = str(_free_port())
    torchrun = str(Path(sys.executable).parent / "torchrun")
    common = [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        port,
        MIXER,
        "fit",
        "--config",
        TINY,
        "--config",
        OVERLAY["multinode"],
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        "1",
        "--trainer.num_nodes",
        "2",
        "--trainer.precision",
        "32-true",
        "--trainer.max_epochs",
        "1",
    ]
    nodes = []
    for rank in (0, 1):
        (tmp_path / f"node{rank}").mkdir()
        nodes.append(
            subprocess.Popen(
                [torchrun, "--node-rank", str(rank), *common],
                cwd=tmp_path / f"node{rank}",
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    # Lightning's "MEMBER: 1/2" lines are silenced (test_quiet_console): the first node's header counts both
    # nodes' devices, and the second node, rank 1 of the one run, prints nothing (one process reports)
    assert "on     cpu, 2 devices" in outputs[0] and "runs/digits_mixer/version_0" in outputs[0]
    assert outputs[1].strip() == ""
    (run,) = (tmp_path / "node0" / "runs" / "digits_mixer").glob("version_*")
    assert (run / "fit_summary.json").is_file()


# --- GPU machines --------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_gpu_overlay_bf16_mixed() -> None:
    main(["fit", "--config", TINY, "--config", OVERLAY["gpu"], "--trainer.max_epochs", "1"])
    run = run_dirs("digits_mixer")[-1]
    figure = accuracy(run / "checkpoints" / "last.ckpt", run / "config.yaml", "val")
    assert read_json(run / "fit_summary.json")["val/acc1"] == pytest.approx(
        figure, abs=0.04
    )  # bf16 may flip a prediction or two


@pytest.mark.gpu
@needs_gpu
def test_ddp_overlay_on_the_gpus(tmp_path: Path) -> None:
    run_mixer(["fit", "--config", TINY, "--config", OVERLAY["ddp"], "--trainer.max_epochs", "1"], cwd=tmp_path)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("checkpointing", [False, True])
def test_fsdp_overlay_wraps_every_mixer_block(checkpointing: bool, tmp_path: Path) -> None:
    """FSDP with one unit per MixerBlock (and activation checkpointing), optimiser built after wrapping;
    the saved checkpoint is a full state dict that loads into the plain model."""
    args = [
        "fit",
        "--config",
        TINY,
        "--config",
        OVERLAY["fsdp"],
        "--trainer.max_epochs",
        "1",
        "--model.net.num_blocks",
        "3",
    ]
    if checkpointing:
        args += [
            "--trainer.strategy.init_args.activation_checkpointing_policy",
            "[mixer_lightning.models.pk.MixerBlock]",
        ]
    script = (
        "import sys\n"
        "from lightning.pytorch.callbacks import Callback\n"
        "from mixer_lightning.cli import main\n"
        "from mixer_lightning.models.pk import MixerBlock\n"
        "class Check(Callback):\n"
        "    def on_train_start(self, trainer, module):\n"
        "        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "        units = [m for m in module.modules() if isinstance(m, FSDP)]\n"
        "        blocks = [u for u in units if isinstance(u.module, MixerBlock)]\n"
        "        print('FSDP_UNITS', len(units), 'BLOCK_UNITS', len(blocks), flush=True)\n"
        "main(sys.argv[1:] + ['--trainer.callbacks+=__main__.Check'])\n"
    )
    env = {**os.environ, "MIXER_TRUSTED_MODULES": "__main__"}  # the Check callback of the script
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "BLOCK_UNITS 3" in result.stdout
    (run,) = (tmp_path / "runs" / "digits_mixer").glob("version_*")
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert any(key.startswith("net.") for key in state)
