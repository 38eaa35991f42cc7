"""Throughput in `mixer fit` (`mixer_lightning.callbacks.throughput.SpeedMonitor`): images/s, MFU and the data-wait fraction in the
progress lines, TensorBoard and fit_summary.json; the FLOPs per image it divides by; the table of device
peaks. No GPU here and no timing asserted: the MFU path runs on the CPU under a device name from the
table, and the accounting is checked with a clock the test moves."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.callbacks.throughput import SpeedMonitor
from mixer_lightning.cli import main
from mixer_lightning.models import create_model
from mixer_lightning.models.flops import flops_per_image, peak_flops

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
H100 = "NVIDIA H100 80GB HBM3"


def test_flops_per_image_counts_one_image() -> None:
    """`flops_per_image` counts a batch of two and divides: it reported the FLOPs of both images (2× the MFU
    of `mixer bench`) before."""
    model = create_model("mlp_mixer", num_classes=10, image_size=32, patch_size=8, channels=32, num_blocks=2)
    with FlopCounterMode(display=False) as forward, torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    with FlopCounterMode(display=False) as step:
        model(torch.randn(1, 3, 32, 32)).sum().backward()
    counted = flops_per_image(model, 32, 3, torch.device("cpu"), "32-true")
    assert counted == {"forward": forward.get_total_flops(), "train": step.get_total_flops()}


def test_the_peak_table() -> None:
    assert peak_flops(H100, "bf16-mixed") == 989.4e12 and peak_flops("NVIDIA H100 PCIe", "bf16-mixed") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "16-mixed") == 312e12
    assert peak_flops(H100, "32-true") == 66.9e12 and peak_flops(H100, "32-true", tf32=True) == 494.7e12
    assert peak_flops("NVIDIA L4", "bf16-true") == 121e12 and peak_flops("NVIDIA L40S", "bf16-mixed") == 362.1e12
    assert peak_flops(H100, "64-true") is None and peak_flops("AMD Instinct MI300X", "bf16-mixed") is None
    assert peak_flops(None, "bf16-mixed") is None


def test_mfu_in_the_progress_lines_tensorboard_and_fit_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """On the CPU under an H100's name: MFU = images/s × training FLOPs per image ÷ the H100's bf16 peak."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mixer_lightning.tasks.loading import load_classifier

    monkeypatch.setattr("mixer_lightning.callbacks.throughput.device_name", lambda device: H100)
    args = [
        "fit",
        "--config",
        TINY,
        "--trainer.precision",
        "bf16-mixed",
        "--trainer.max_epochs",
        "1",
        "--trainer.log_every_n_steps",
        "2",
    ]
    main([*args, "--trainer.enable_progress_bar", "true", "--progress.mode", "lines", "--progress.every_n_steps", "2"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch 1/1  step ")]
    assert lines and all(" img/s  MFU " in line and "%  data " in line for line in lines[1:])
    (run,) = run_dirs("digits_mixer")
    throughput = read_json(run / "fit_summary.json")["throughput"]
    assert throughput["device"] == H100 and throughput["peak_flops"] == 989.4e12
    assert throughput["precision"] == "bf16-mixed" and throughput["processes"] == 1
    assert throughput["mfu"] == pytest.approx(throughput["images_per_s"] * throughput["flops_per_image"] / 989.4e12)
    assert 0 <= throughput["data_wait_fraction"] <= 1
    net = load_classifier(str(run / "checkpoints" / "last.ckpt")).net
    with FlopCounterMode(display=False) as step:
        net(torch.randn(1, 1, 8, 8)).sum().backward()
    assert throughput["flops_per_image"] == step.get_total_flops()
    events = EventAccumulator(str(run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"throughput/images_per_s", "throughput/mfu", "throughput/data_wait"} <= tags


def test_no_mfu_on_an_unknown_device_unless_its_peak_is_given() -> None:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--throughput.peak_flops", "1e12"])
    unknown, given = (read_json(run / "fit_summary.json")["throughput"] for run in run_dirs("digits_mixer"))
    assert unknown["mfu"] is None and unknown["device"] == "cpu" and unknown["images_per_s"] > 0
    assert given["peak_flops"] == 1e12 and given["mfu"] > 0 and given["flops_per_image"] > 0
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--throughput.peak_flops", "-1"])
    assert exit_info.value.code == 2


def test_the_accounting_of_waiting_and_working(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a clock the test moves: data wait = time from the previous batch's end (or the epoch's start) to
    the batch's start ÷ the batches' time; warm-up batches, and intervals holding a checkpoint write or a
    validation, are left out; images/s counts every process."""
    clock = [0.0]
    monkeypatch.setattr("mixer_lightning.callbacks.throughput.time.perf_counter", lambda: clock[0])
    monitor = SpeedMonitor(peak_flops=100.0, every_n_steps=1000)
    monitor.peak, monitor.flops_per_image = 100.0, 10.0  # what setup() finds on a GPU
    trainer = SimpleNamespace(global_step=0, log_every_n_steps=50, world_size=2, is_global_zero=True, loggers=[])
    batch = (torch.zeros(4, 1), None)

    def step(wait: float, work: float, interrupt: str | None = None) -> None:
        if interrupt == "checkpoint":
            monitor.on_save_checkpoint(trainer, None, {})
        if interrupt == "validation":
            monitor.on_validation_start(trainer, None)
        clock[0] += wait
        monitor.on_train_batch_start(trainer, None, batch, 0)
        clock[0] += work
        trainer.global_step += 1
        monitor.on_train_batch_end(trainer, None, None, batch, 0)

    monitor.on_train_epoch_start(trainer, None)
    step(50.0, 1.0)  # warm-up: left out
    step(9.0, 1.0)  # warm-up: left out
    step(1.0, 3.0)
    step(0.0, 4.0, interrupt="checkpoint")  # left out
    step(3.0, 1.0)
    step(5.0, 1.0, interrupt="validation")  # left out
    summary = monitor.summary(trainer.world_size)
    assert summary["data_wait_fraction"] == pytest.approx(4.0 / 8.0)
    assert summary["images_per_s"] == pytest.approx(2 * 8 / 8.0)  # 8 images in 8 s, on each of 2 processes
    assert summary["mfu"] == pytest.approx(8 / 8.0 * 10.0 / 100.0)
