"""A resumed run is the run it continues (issue 47): a fit resumed from a checkpoint must give the data and the
optimiser settings the checkpoint was trained with (`callbacks.fingerprint.RunFingerprint`), or is refused in one
line naming the flag before anything is written; a requeued SLURM job resumes the run of its own command."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS, error_field, run_dirs
from helpers.fakedata import write_image_folder, write_wds
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


def test_a_resume_with_another_label_smoothing_or_layer_decay_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Lightning parses the checkpoint's hyper-parameters over the model: the flags were replaced unseen."""
    main(["fit", *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"])
    resume = ["fit", *TINY, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2", "--ckpt_path", "last"]
    assert error_field(capsys, [*resume, "--model.label_smoothing", "0.1"]) == "model.label_smoothing"
    assert error_field(capsys, [*resume, "--model.layer_decay", "0.5"]) == "model.layer_decay"
    main(resume)


def test_validate_with_another_split_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Another split_seed (or val_split) of the same data validates on images the run trained on: refused."""
    main(["fit", *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"])
    (run,) = run_dirs("digits_mixer")
    validate = ["validate", *TINY, "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]
    assert error_field(capsys, [*validate, "--data.split_seed", "3"]) == "data.split_seed"
    assert error_field(capsys, [*validate, "--data.val_split", "0.2"]) == "data.val_split"
    main(validate)


def test_a_resume_with_more_epochs_trains_them_on_the_configs_schedule() -> None:
    """The schedule kept the checkpoint's length: a resume with a larger max_epochs trained the added epochs at
    lr 0 (AdamW at lr 0 leaves the weights bit-identical) and said it had trained them."""
    short = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    schedule = ["--model.lr_scheduler", "mixer_lightning.optim.WarmupDecayLR"]
    main(["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), *short, *schedule, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    before = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    config = ["--config", str(run / "config.yaml"), *short, "--trainer.max_epochs", "3", "--ckpt_path", "last"]
    main(["fit", *config])
    after = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert after["global_step"] == 6 and after["lr_schedulers"][0]["total_steps"] == 6
    weights = [key for key in before["state_dict"] if key.startswith("net.")]
    assert all(not torch.equal(before["state_dict"][key], after["state_dict"][key]) for key in weights)


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


def test_a_resume_onto_other_images_of_the_same_counts_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Data were known by split arguments and counts: a folder of other images, or of other class names, with
    the same counts resumed (last.ckpt then claimed the new class names), and so did another --data.mean."""
    import shutil

    write_image_folder(Path("a"), classes=2, per_class=3)
    write_image_folder(Path("other_images"), classes=2, per_class=3, size=(40, 48))
    shutil.copytree("a", "renamed")
    Path("renamed/train/n00000001").rename("renamed/train/cats")
    Path("renamed/val/n00000001").rename("renamed/val/cats")
    shutil.copytree("a", "copy")
    folder = [*TINY, "--data.dataset", "folder", "--data.image_size", "16", "--data.num_workers", "0"]
    main(["fit", *folder, "--data.root", "a", "--trainer.max_epochs", "1"])
    resume = ["fit", *folder, "--trainer.max_epochs", "2", "--ckpt_path", "last"]
    for root in ("other_images", "renamed"):
        assert error_field(capsys, [*resume, "--data.root", root]) == "data.root", root
    assert error_field(capsys, [*resume, "--data.root", "a", "--data.mean", "[0.5,0.5,0.5]"]) == "data.mean"
    main([*resume, "--data.root", "copy"])  # the same images elsewhere: the same run


def test_a_resume_with_another_seed_is_refused_and_checkpoints_record_the_seed(capsys: pytest.CaptureFixture) -> None:
    """The training order of every epoch is drawn from (seed, epoch) (`data.sampling`): a resume with another
    ``seed_everything`` would train its remaining epochs on another order, recorded as the same run."""
    fit = ["fit", *TINY, "--trainer.limit_train_batches", "2", "--seed_everything", "1"]
    main([*fit, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["seed_everything"] == 1 and checkpoint[RUN_KEY]["seed_everything"] == 1
    resume = ["fit", *TINY, "--trainer.limit_train_batches", "2", "--trainer.max_epochs", "2", "--ckpt_path", "last"]
    assert error_field(capsys, [*resume, "--seed_everything", "2"]) == "seed_everything"
    main([*resume, "--seed_everything", "1"])
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


# ------------------------------------------------------------------------------------------------ SLURM


@pytest.fixture
def slurm_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SLURM's variables of job 4242 and a fake ``scontrol`` on PATH; the file its calls are recorded in."""
    from test_slurm import JOB, fake_scontrol

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    for name, value in JOB.items():
        monkeypatch.setenv(name, value)
    bin_dir = fake_scontrol(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "scontrol.calls"


def signalled(tmp_path: Path, moment: str, step: int = -1) -> list[str]:
    path = tmp_path / f"usr1_{moment}.yaml"
    """A config sending SIGUSR1 at `moment`, as SLURM does once: not in the requeued start."""
    init_args = {"moment": moment, "step": step, "signals": ["SIGUSR1"], "unless_env": "SLURM_RESTART_COUNT"}
    callback = {"class_path": "helpers.signaller.SignalAt", "init_args": init_args}
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    return ["--config", str(path)]


@pytest.mark.parametrize("moment", ["setup", "fit_end"])
def test_slurms_signal_outside_training_requeues_the_job(
    moment: str, slurm_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """USR1 while the data are set up (ImageNet's shards take minutes to index) or after the last step used to
    end the job unrequeued (the signal's default action) or be dropped; now the job requeues, and its requeued
    start goes on with the same run."""
    fit = ["fit", *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2"]
    fit += signalled(tmp_path, moment)
    with pytest.raises(SystemExit) as exit_info:
        main(fit)
    assert exit_info.value.code == 128 + signal.SIGUSR1, capsys.readouterr().err[-2000:]
    assert slurm_job.read_text() == "requeue 4242\n"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    main(fit)
    (run,) = run_dirs("digits_mixer")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2


def test_a_requeued_job_script_of_several_fits_resumes_each_fit_in_its_own_run(
    slurm_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seed loop: the first fit finished, the second was preempted. Requeued, the script runs both again: the
    first finds its own finished run, not the second's (the newest of the job), and the second resumes its own."""
    fit = ["fit", *TINY, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2"]
    fit += ["--step_checkpoint.every_n_train_steps", "1"]
    main([*fit, "--seed_everything", "1"])
    preempted = [*fit, "--seed_everything", "2", *signalled(tmp_path, "train_batch_end", step=3)]
    with pytest.raises(SystemExit):
        main(preempted)
    first, second = run_dirs("digits_mixer")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    main([*fit, "--seed_everything", "1"])
    assert (first / "config.resume1.yaml").is_file() and not (second / "config.resume1.yaml").exists()
    main(preempted)  # the same command
    assert (second / "config.resume1.yaml").is_file()
    assert run_dirs("digits_mixer") == [first, second]
    assert torch.load(second / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


def test_a_restart_count_that_is_no_number_is_one_line(
    slurm_job: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Whether the job was requeued cannot be told: neither a new run nor a resume, but one line."""
    monkeypatch.setenv("SLURM_RESTART_COUNT", "one")
    assert error_field(capsys, ["fit", *TINY, "--trainer.max_epochs", "1"]) == "SLURM_RESTART_COUNT"
    assert not Path("runs").exists()
