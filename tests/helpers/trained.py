"""Tiny trained checkpoints for the analysis tests (`mixer cka`, `visualize`, `fewshot`), trained once
per test session through the real `mixer fit` and shared by every test file that asks for them
(the ``trained`` fixture of conftest.py)."""

from __future__ import annotations

import pytest

from helpers import TEST_CONFIGS

CONFIGS = {
    "mixer": "digits_mixer.yaml",  # MLP-Mixer, 1 block, P = 2 (S0 = 16), C = 16, γ = 2
    "sw_mlp": "sw_mlp_digits.yaml",  # SW-MLP, 2 blocks, m = 128, p = 0.1
    "rp_s_mixer": "digits_rp_s_mixer.yaml",  # RP S-Mixer, 2 blocks, S0 = 16 → S = 12 (SkipLayer), C = 8
    "kron": "shallow_kron_digits.yaml",  # shallow Kronecker MLP: no skip connections, no stem
}
DATA_CONFIG = str(TEST_CONFIGS / "digits_mixer.yaml")  # its data: section (digits, batch 32)


def checkpoint(kind: str, factory: pytest.TempPathFactory) -> str:
    """The last.ckpt of a short `mixer fit` of the tiny config `kind` (trained on first use)."""
    from mixer_lightning.cli import main

    root = factory.getbasetemp() / "trained_checkpoints"
    path = root / kind / "version_0" / "checkpoints" / "last.ckpt"
    if not path.is_file():
        main(
            [
                "fit",
                "--config",
                str(TEST_CONFIGS / CONFIGS[kind]),
                "--trainer.max_epochs",
                "1",
                "--trainer.limit_train_batches",
                "3",
                "--trainer.limit_val_batches",
                "1",
                "--trainer.logger.init_args.save_dir",
                str(root),
                "--trainer.logger.init_args.name",
                kind,
            ]
        )
    assert path.is_file(), f"no checkpoint at {path}"
    return str(path)
