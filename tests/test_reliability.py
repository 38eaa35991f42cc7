"""Reliability: bit-identical runs, resuming a killed run exactly, atomic checkpoints, divergence,
and the catalogue of bad inputs, each answered by one line naming the field and the fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from fakedata import write_hf, write_image_folder

from conftest import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.checkpointing import AtomicCheckpointIO
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))

FAMILIES = {
    "mlp_mixer_rp": (TINY, ["--model.permute", "[true]", "--model.drop_path", "0.2", "--model.drop_rate", "0.1"]),
    "s_mixer_rp": (str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), []),
    "sw_mlp_sparse": (str(TEST_CONFIGS / "sw_mlp_digits.yaml"), []),
    "sw_mlp_dense": (str(TEST_CONFIGS / "sw_mlp_digits.yaml"), ["--model.impl", "dense"]),
    "kron_mlp": (str(TEST_CONFIGS / "shallow_kron_digits.yaml"), []),
    "monarch_mlp": (str(TEST_CONFIGS / "shallow_monarch_digits.yaml"), []),
}


def final_state(run: Path) -> dict[str, torch.Tensor]:
    """The network, optimiser and schedule of a run's last checkpoint (metric accumulators aside: they
    depend on which moment of the last step wrote last.ckpt)."""
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    network = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    return {
        "state": network,
        "optimizer": checkpoint["optimizer_states"],
        "schedule": checkpoint.get("lr_schedulers"),
        "step": checkpoint["global_step"],
    }


def epoch_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Per-epoch training and validation figures a run logged to TensorBoard (all its event files)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    names = [n for n in ("train/acc1", "train/loss_epoch", "val/acc1", "val/loss") if n in events.Tags()["scalars"]]
    return {name: sorted((e.step, e.value) for e in events.Scalars(name)) for name in names}


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("family", list(FAMILIES))
def test_same_seed_gives_bit_identical_runs_in_deterministic_mode(family: str) -> None:
    config, extra = FAMILIES[family]
    seeds = (3, 3, 4) if family == "mlp_mixer_rp" else (3, 3)  # (and once: another seed, another run)
    runs = []
    for index, seed in enumerate(seeds):
        main(["fit", "--config", config, *extra, "--trainer.deterministic", "true", "--trainer.max_epochs", "1",
              "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "0", "--seed_everything", str(seed),
              "--trainer.logger.init_args.save_dir", f"run{index}"])  # fmt: skip
        runs.append(final_state(next(Path(f"run{index}").glob("*/version_0"))))
    assert_same(runs[0], runs[1])
    if len(runs) == 3:
        assert any(not torch.equal(runs[0]["state"][k], runs[2]["state"][k]) for k in runs[0]["state"])


RP_MIXER = {
    "class_path": "mixer_lightning.tasks.MLPMixerModule",
    "init_args": {"patch_size": 4, "channels": 16, "tokens": 12, "num_blocks": 2, "gamma": 2, "permute": [True, False],
                  "drop_path": 0.2, "drop_rate": 0.1, "label_smoothing": 0.1},
}  # fmt: skip
SPARSE_SW_MLP = {
    "class_path": "mixer_lightning.tasks.SWMLPModule",
    "init_args": {"patch_size": 4, "channels": 8, "num_blocks": 2, "gamma": 2, "density": 0.1, "impl": "sparse",
                  "label_smoothing": 0.1},
}  # fmt: skip


def augmented_hf_config(tmp_path: Path, model: dict = RP_MIXER, **data: object) -> Path:
    """A config training a small RP Mixer (dropout, stochastic depth) on a tiny Hugging Face dataset
    with RandAugment, random erasing and mixup/cutmix: every source of randomness at once."""
    write_hf(tmp_path / "hf", train=48, test=16, size=16)
    config = {
        "seed_everything": 7,
        "trainer": {
            "accelerator": "cpu", "max_epochs": 3, "deterministic": True, "enable_progress_bar": False,
            "enable_model_summary": False, "log_every_n_steps": 1,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(tmp_path / "runs"), "name": "straight"}},
        },
        "model": {"class_path": model["class_path"], "init_args": {
            **model["init_args"],
            "lr_scheduler": {"class_path": "mixer_lightning.optim.WarmupDecayLR",
                             "init_args": {"warmup_epochs": 1, "min_lr": 1e-5}},
        }},
        "data": {"class_path": "mixer_lightning.data.ImageDataModule", "init_args": {
            "dataset": "hf", "root": str(tmp_path / "hf"), "batch_size": 8, "val_split": 8, "num_workers": 0,
            "auto_augment": "rand-m9-mstd0.5-inc1", "random_erasing": 0.25, "mixup": 0.8, "cutmix": 1.0,
            "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], **data,
        }},
        "step_checkpoint": {"every_n_train_steps": 3},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_augmentation_does_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    config = augmented_hf_config(tmp_path)
    states = []
    for workers in (0, 2):
        main(["fit", "--config", str(config), "--data.num_workers", str(workers), "--trainer.max_epochs", "1",
              "--trainer.logger.init_args.name", f"workers{workers}"])  # fmt: skip
        states.append(final_state(tmp_path / "runs" / f"workers{workers}" / "version_0"))
    assert_same(states[0], states[1])


@pytest.mark.slow
@pytest.mark.parametrize("model", [RP_MIXER, SPARSE_SW_MLP], ids=["rp_mlp_mixer", "sparse_sw_mlp"])
def test_a_killed_run_resumes_bit_for_bit(tmp_path: Path, model: dict) -> None:
    """SIGKILL a run mid-epoch (after the step-6 checkpoint, at step 7), resume it with
    ``--ckpt_path last``: its final weights, optimiser state and metrics equal an uninterrupted run's,
    with every source of randomness on (data order, RandAugment, random erasing, mixup/cutmix, dropout,
    stochastic depth, RP permutations or SW-MLP masks) and a warm-up + cosine schedule."""
    config = augmented_hf_config(tmp_path, model)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    run = ["--config", str(config)]
    subprocess.run([MIXER, "fit", *run], check=True, env=env, capture_output=True)
    killer = tmp_path / "kill.yaml"
    killer.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "killer.KillAtStep", "init_args": {"step": 7}}]}}))  # fmt: skip
    killed = subprocess.run([MIXER, "fit", *run, "--config", str(killer), "--trainer.logger.init_args.name", "killed"],
                            env=env, capture_output=True, text=True)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    interrupted = tmp_path / "runs" / "killed" / "version_0"
    assert torch.load(interrupted / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    resumed = subprocess.run([MIXER, "fit", *run, "--trainer.logger.init_args.name", "killed", "--ckpt_path", "last"],
                             env=env, capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming" in resumed.stdout and (interrupted / "config.resume1.yaml").is_file()
    straight = tmp_path / "runs" / "straight" / "version_0"
    assert_same(final_state(straight), final_state(interrupted))
    ours, theirs = read_json(straight / "fit_summary.json"), read_json(interrupted / "fit_summary.json")
    assert {k: v for k, v in ours.items() if k != "best_checkpoint"} == {
        k: v for k, v in theirs.items() if k != "best_checkpoint"
    }
    # Every epoch's figures, the interrupted epoch's training accuracy and loss included (the
    # metric accumulators are in the checkpoint), as the uninterrupted run logged them.
    assert epoch_scalars(straight) == epoch_scalars(interrupted)


def test_a_checkpoint_brings_its_own_architecture_to_test(capsys: pytest.CaptureFixture) -> None:
    """Lightning reads a checkpoint's hyper-parameters over the config: `mixer test --ckpt_path`
    evaluates the network the checkpoint holds (here an RP S-Mixer under a Mixer config)."""
    main(["fit", "--config", str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_rp_s_mixer")
    score = read_json(run / "fit_summary.json")["val/acc1"]
    main(["validate", "--config", TINY, "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          "--trainer.limit_val_batches", "1.0"])  # fmt: skip
    assert read_json(run_dirs("digits_mixer")[-1] / "val_metrics.json")["val/acc1"] == score


def test_checkpoint_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def dies_halfway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # the process is interrupted in the middle of the write

    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["step"] == 1  # the previous checkpoint, whole
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary file left behind


def test_step_checkpoints_and_resume_last_through_the_cli(capsys: pytest.CaptureFixture) -> None:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--step_checkpoint.every_n_train_steps", "2"])
    (run,) = run_dirs("digits_mixer")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    main(["fit", "--config", TINY, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert run_dirs("digits_mixer") == [run]  # the same run directory goes on
    assert f"Resuming {run}" in capsys.readouterr().out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8
    assert (run / "config.yaml").is_file() and (run / "config.resume1.yaml").is_file()


def test_divergence_stops_with_one_line_and_keeps_the_good_checkpoint(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--trainer.max_epochs", "3", "--step_checkpoint.every_n_train_steps", "1",
              "--model.optimizer.lr", "1e30", "--model.lr_scheduler", "null"])  # fmt: skip
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mixer: error: training diverged: the loss is ")
    assert "at step" in err[0] and "last.ckpt" in err[0] and "gradient_clip_val" in err[0]
    (run,) = run_dirs("digits_mixer")
    kept = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in kept["state_dict"].values() if v.is_floating_point())
    step = int(err[0].split("at step ")[1].split()[0])
    assert kept["global_step"] == step  # the checkpoint of the last step whose loss was finite


# --------------------------------------------------------------------------------- the catalogue


def _checkpoint_files(tmp: Path) -> dict[str, str]:
    """Broken checkpoints and trained ones of other shapes, for the catalogue."""
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--trainer.logger.init_args.name", "good"])
    good = str(next(Path("runs/good").glob("version_0/checkpoints/last.ckpt")).resolve())
    truncated = tmp / "truncated.ckpt"
    truncated.write_bytes(Path(good).read_bytes()[:1000])
    text = tmp / "notes.ckpt"
    text.write_text("not a checkpoint")
    pickled = tmp / "pickled.ckpt"
    torch.save({"state_dict": {}, "extra": Path("x")}, pickled)  # needs pickled code (a Path object)
    main(["fit", "--config", str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), "--trainer.max_epochs", "1",
          "--trainer.logger.init_args.name", "other"])  # fmt: skip
    other = str(next(Path("runs/other").glob("version_0/checkpoints/last.ckpt")).resolve())
    main(["fit", "--config", TINY, "--model.channels", "24", "--trainer.max_epochs", "1",
          "--trainer.logger.init_args.name", "wider"])  # fmt: skip
    wider = str(next(Path("runs/wider").glob("version_0/checkpoints/last.ckpt")).resolve())
    write_hf(tmp / "hf10", train=24, test=8, size=8)
    main(["fit", "--config", TINY, "--data.dataset", "hf", "--data.root", str(tmp / "hf10"), "--data.val_split", "8",
          "--trainer.max_epochs", "1", "--trainer.logger.init_args.name", "rgb"])  # fmt: skip
    rgb = str(next(Path("runs/rgb").glob("version_0/checkpoints/last.ckpt")).resolve())
    corrupt = write_image_folder(tmp / "folder", classes=2, per_class=3, size=(16, 16))
    bad = next((corrupt / "train").glob("*/*.jpg"))
    bad.write_bytes(b"\xff\xd8\xff garbage")
    return {"good": good, "truncated": str(truncated), "text": str(text), "pickled": str(pickled), "other": other,
            "wider": wider, "rgb": rgb, "folder": str(corrupt), "bad_image": str(bad)}  # fmt: skip


CATALOGUE = [
    # (name, argv (with {placeholders}), exit code, start of the one-line message)
    ("unknown dataset", ["fit", "--config", TINY, "--data.dataset", "imagenet22k"], 2,
     "data.dataset: unknown dataset 'imagenet22k'; choose one of"),
    ("missing data, download off", ["fit", "--config", TINY, "--data.dataset", "cifar10", "--data.root", "{tmp}/nowhere",
     "--data.download", "false"], 2, "data.root: no cifar10 data under"),
    ("patch size", ["fit", "--config", TINY, "--model.patch_size", "3"], 2,
     "model.patch_size: 3 does not divide image_size 8"),
    ("tokens", ["fit", "--config", TINY, "--model.tokens", "0"], 2, "model.tokens: must be positive, got 0"),
    ("channels", ["fit", "--config", TINY, "--model.channels", "-3"], 2, "model.channels: must be positive, got -3"),
    ("gamma", ["fit", "--config", TINY, "--model.gamma", "0"], 2, "model.gamma: must be positive, got 0"),
    ("depth", ["fit", "--config", TINY, "--model.num_blocks", "0"], 2, "model.num_blocks: must be positive, got 0"),
    ("omega unreachable", ["fit", "--config", TINY, "--model.omega", "10"], 2,
     "model.omega: 10 is unreachable with channels=16"),
    ("permute list", ["fit", "--config", TINY, "--model.permute", "[true, false]"], 2,
     "model.permute: a list needs one flag per block (num_blocks=1), got 2"),
    ("sw-mlp density", ["fit", "--config", str(TEST_CONFIGS / "sw_mlp_digits.yaml"), "--model.density", "1.5"], 2,
     "model.density: must be in (0, 1]"),
    ("checkpoint missing", ["test", "--config", TINY, "--ckpt_path", "{tmp}/nothing.ckpt"], 2,
     "ckpt_path: no such file"),
    ("checkpoint truncated", ["test", "--config", TINY, "--ckpt_path", "{truncated}"], 2,
     "ckpt_path: '{truncated}' is truncated or not a PyTorch file"),
    ("not a checkpoint", ["test", "--config", TINY, "--ckpt_path", "{text}"], 2,
     "ckpt_path: '{text}' is truncated or not a PyTorch file"),
    ("pickled code refused", ["test", "--config", TINY, "--ckpt_path", "{pickled}"], 2,
     "ckpt_path: '{pickled}' needs pickled Python code (pathlib.PosixPath) to load, refused for safety"),
    ("another family", ["fit", "--config", TINY, "--model.init_from", "{other}"], 2,
     "model.init_from: '{other}' holds a SMixerModule, but this model is a MLPMixerModule"),
    ("another architecture", ["fit", "--config", TINY, "--model.init_from", "{wider}"], 2,
     "model.init_from: stem.proj.weight in {wider} has shape (24, 1, 2, 2), the model needs (16, 1, 2, 2)"),
    ("other classes, no new head", ["test", "--config", TINY, "--ckpt_path", "{rgb}", "--data.dataset", "hf",
     "--data.root", "{tmp}/hf3"], 2, "ckpt_path: '{rgb}' was trained for 10 classes, the data has 3"),
    ("resume without a run", ["fit", "--config", TINY, "--ckpt_path", "last", "--trainer.logger.init_args.name",
     "never"], 2, "ckpt_path: 'last': no run under 'runs/never' has a checkpoints/last.ckpt"),
    ("mixup, odd batch", ["fit", "--config", TINY, "--data.mixup", "0.8", "--data.batch_size", "31"], 2,
     "data.batch_size: mixup/cutmix mix every image with another of its batch"),
    ("fsdp on the cpu", ["fit", "--config", TINY, "--trainer.strategy", "fsdp"], 2,
     "trainer: The strategy `fsdp` requires a GPU accelerator"),
    ("a gpu that is not there", ["fit", "--config", TINY, "--trainer.accelerator", "gpu"], 2,
     "trainer: No supported gpu backend found; use --trainer.accelerator cpu (or auto)"),
    ("corrupt image", ["fit", "--config", TINY, "--data.dataset", "folder", "--data.root", "{folder}",
     "--data.image_size", "16", "--data.val_split", "0"], 2, "data.root: cannot read image '{bad_image}'"),
    ("width command", ["width", "--omega", "-5"], 2, "omega: must be positive, got -5"),
    ("convert, missing key", ["convert", "--from", "{tmp}/broken.npz", "--model", "mlp_mixer", "--out", "{tmp}/x.ckpt"],
     2, "--from: "),
]  # fmt: skip


@pytest.fixture(scope="module")
def catalogue_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("catalogue")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        files = _checkpoint_files(tmp)
        write_hf(tmp / "hf3", train=12, test=6, size=8, classes=3)
        import numpy as np

        np.savez(tmp / "broken.npz", **{"stem/kernel": np.zeros((2, 2, 3, 8), dtype=np.float32)})
    finally:
        os.chdir(cwd)
    return {**files, "tmp": str(tmp)}


def _fill(items: list[str], files: dict[str, str]) -> list[str]:
    return [item.format(**files) for item in items]


@pytest.mark.parametrize("name, argv, code, message", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_catalogue_of_bad_inputs(name, argv, code, message, catalogue_files, capsys: pytest.CaptureFixture) -> None:
    Path("runs").mkdir()
    Path("runs/keep.txt").write_text("earlier work")
    before = sorted(str(p) for p in Path("runs").rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        main(_fill(argv, catalogue_files))
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and not any(line.startswith("Traceback") for line in err)
    assert err[-1].startswith("mixer: error: " + message.format(**catalogue_files)), err[-1]
    assert Path("runs/keep.txt").read_text() == "earlier work"
    assert all(Path(p).exists() for p in before)  # nothing already written is lost
