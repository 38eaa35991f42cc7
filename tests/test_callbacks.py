"""SpectrumMonitor and SparsityMonitor: weight statistics logged during `mixer fit` from any config's
``trainer.callbacks`` (Hayase & Karakida Sec. 3-4.3)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import TEST_CONFIGS, error_field, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.tasks.loading import load_classifier

MONITORS = """
trainer:
  max_epochs: 1
  limit_train_batches: 4
  limit_val_batches: 1
  callbacks:
    - class_path: mixer_lightning.callbacks.SpectrumMonitor
      init_args: {every_n_steps: 2%s}
    - class_path: mixer_lightning.callbacks.SparsityMonitor
      init_args: {every_n_steps: 2}
"""


def test_mixer_spectrum_and_sparsity_reach_tensorboard() -> None:
    Path("monitors.yaml").write_text(MONITORS % "")
    main(["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), "--config", "monitors.yaml"])
    (run,) = run_dirs("digits_mixer")
    events = EventAccumulator(str(next(run.glob("events.out.tfevents.*"))))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    layers = [f"block1.{axis}.{fc}" for axis in ("token", "channel") for fc in ("fc1", "fc2")]
    assert {f"spectrum/sigma_max/{name}" for name in layers} | {"spectrum/sigma_max/max"} <= tags
    for stat in ("density", "near_zero", "effective_density", "l1_l2"):
        assert {f"sparsity/{stat}/{name}" for name in layers} <= tags
    sigma = events.Scalars("spectrum/sigma_max/block1.token.fc1")
    assert [e.step for e in sigma] == [0, 2, 4]  # before training, then every 2 optimiser steps
    # The last value is the trained weight's: W's σ_max (that of I ⊗ W in the wide MLP).
    net = load_classifier(run / "checkpoints" / "last.ckpt").net
    w = net.blocks[0].token_mixing.mlp.fc1.weight.detach().double()
    assert sigma[-1].value == pytest.approx(float(torch.linalg.svdvals(w)[0]), rel=1e-5)
    assert sigma[0].value != sigma[-1].value
    density = events.Scalars("sparsity/density/block1.token.fc1")
    assert density[0].value == pytest.approx(1 / 16)  # I_C ⊗ W with C = 16
    assert events.Scalars("sparsity/density/block1.channel.fc1")[0].value == pytest.approx(1 / 16)  # S0 = 16
    l1_l2 = events.Scalars("sparsity/l1_l2/block1.channel.fc2")[0].value
    assert 0.6 < l1_l2 < 0.9  # about √(2/π) ≈ 0.80 for Gaussian-like initial weights


def test_sw_mlp_statistics_in_a_csv_log_with_power_iteration() -> None:
    Path("monitors.yaml").write_text(MONITORS % ", exact_max_entries: 0, power_iterations: 60")
    main(
        [
            "fit",
            "--config",
            str(TEST_CONFIGS / "sw_mlp_digits.yaml"),
            "--config",
            "monitors.yaml",
            "--trainer.logger",
            "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir",
            "csv",
        ]
    )
    (metrics_file,) = Path("csv").glob("*/version_*/metrics.csv")
    with open(metrics_file) as f:
        rows = [row for row in csv.DictReader(f) if row.get("spectrum/sigma_max/block1.fc1")]
    assert [int(row["step"]) for row in rows] == [0, 2, 4]
    net = load_classifier(metrics_file.parent / "checkpoints" / "last.ckpt").net
    for i, name in enumerate(("block1.fc1", "block1.fc2", "block2.fc1", "block2.fc2")):
        layer = net.sparse_layers()[i]
        exact = float(torch.linalg.svdvals(layer.effective_weight().detach().double())[0])
        estimate = float(rows[-1][f"spectrum/sigma_max/{name}"])
        assert exact * 0.97 < estimate <= exact * (1 + 1e-5)  # power iteration: a lower bound, close
        sparsity_rows = [row for row in csv.DictReader(open(metrics_file)) if row.get(f"sparsity/density/{name}")]
        density = float(sparsity_rows[-1][f"sparsity/density/{name}"])
        assert density == pytest.approx(layer.connections / (layer.in_features * layer.out_features))
        assert density == pytest.approx(0.1, rel=0.1)  # the mask's p
        assert 0.0 <= float(sparsity_rows[-1][f"sparsity/near_zero/{name}"]) < 0.05


def test_bad_monitor_arguments(capsys: pytest.CaptureFixture) -> None:
    Path("bad.yaml").write_text(
        "trainer:\n  callbacks:\n    - class_path: mixer_lightning.callbacks.SpectrumMonitor\n"
        "      init_args: {every_n_steps: 0}\n"
    )
    field = error_field(capsys, ["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), "--config", "bad.yaml"])
    assert field.startswith("trainer.callbacks")
