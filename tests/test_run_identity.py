"""A resumed run is the run it continues (issue 47): a fit resumed from a checkpoint must give the data and the
optimiser settings the checkpoint was trained with (`callbacks.checkpoints.RunFingerprint`), or is refused in one
line naming the flag before anything is written; a requeued SLURM job resumes the run of its own command."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import TEST_CONFIGS, error_field, run_dirs
from helpers.fakedata import write_wds
from mixer_lightning.callbacks.checkpoints import RUN_KEY
from mixer_lightning.cli import main

TINY = ["--config", str(TEST_CONFIGS / "digits_mixer.yaml"), "--trainer.limit_val_batches", "1"]
WDS = ["--config", str(TEST_CONFIGS / "wds_mixer.yaml"), "--trainer.limit_val_batches", "1"]
WDS += ["--data.auto_augment", "null", "--data.mixup", "0", "--data.cutmix", "0"]


def test_a_resume_with_another_learning_rate_or_weight_decay_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Lightning restores the optimiser's lr and weight decay from the checkpoint: the resume's config.resume1.yaml
    would record a value the run never trained with. Refused, naming the flag; the run's own value resumes."""
    main(["fit", *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"])
    (run,) = run_dirs("digits_mixer")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)[RUN_KEY]["model.optimizer.lr"] == 1e-3
    resume = ["fit", *TINY, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2", "--ckpt_path", "last"]
    assert error_field(capsys, [*resume, "--model.optimizer.lr", "0.5"]) == "model.optimizer.lr"
    assert error_field(capsys, [*resume, "--model.optimizer.weight_decay", "0.3"]) == "model.optimizer.weight_decay"
    assert not list(run.glob("config.resume*.yaml"))  # refused before the resume's config was saved
    main(resume)
    assert (run / "config.resume1.yaml").is_file()


def test_a_resume_onto_other_data_is_refused_and_a_copy_of_the_same_data_resumes(
    capsys: pytest.CaptureFixture,
) -> None:
    """``data.root`` naming other shards (more training images) is another run; a copy of the same shards
    elsewhere (staged on a node's disk) is the same data."""
    write_wds(Path("shards"))
    write_wds(Path("other"), train=40)
    write_wds(Path("copy"))
    main(["fit", *WDS, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"])
    resume = ["fit", *WDS, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2", "--ckpt_path", "last"]
    assert error_field(capsys, [*resume, "--data.root", "other"]) == "data.root"
    assert error_field(capsys, [*resume, "--data.split_seed", "3"]) == "data.split_seed"
    main([*resume, "--data.root", "copy"])
    (run,) = run_dirs("wds")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
