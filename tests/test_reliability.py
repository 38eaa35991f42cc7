"""Reliability: bit-identical runs, resuming a killed or stopped run exactly (mid-epoch, at epoch
boundaries, during validation, on SIGTERM), atomic writes, run directories that are never
overwritten and have one writer, divergence, and the catalogue of bad inputs, each answered by one
line naming the field and the fix, with nothing written. docs/reliability.md maps each guarantee to
its test."""

from __future__ import annotations

import io
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS, error_field, field_of, read_json, run_dirs
from helpers.fakedata import (
    write_hf,
    write_hf_labels,
    write_image_folder,
    write_imagenet_folder,
    write_png_header,
    write_wds,
)
from mixer_lightning.callbacks.checkpoints import AtomicCheckpointIO
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
WDS = str(TEST_CONFIGS / "wds_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))

FAMILIES = {
    "mlp_mixer_rp": (
        TINY,
        ["--model.net.permute", "[true]", "--model.net.drop_path", "0.2", "--model.net.drop_rate", "0.1"],
    ),
    "s_mixer_rp": (str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), []),
    "sw_mlp_sparse": (str(TEST_CONFIGS / "sw_mlp_digits.yaml"), []),
    "sw_mlp_dense": (str(TEST_CONFIGS / "sw_mlp_digits.yaml"), ["--model.net.impl", "dense"]),
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
        main(
            [
                "fit",
                "--config",
                config,
                *extra,
                "--trainer.deterministic",
                "true",
                "--trainer.max_epochs",
                "1",
                "--trainer.limit_train_batches",
                "2",
                "--trainer.limit_val_batches",
                "0",
                "--seed_everything",
                str(seed),
                "--trainer.logger.init_args.save_dir",
                f"run{index}",
            ]
        )
        runs.append(final_state(next(Path(f"run{index}").glob("*/version_0"))))
    assert_same(runs[0], runs[1])
    if len(runs) == 3:
        assert any(not torch.equal(runs[0]["state"][k], runs[2]["state"][k]) for k in runs[0]["state"])


RP_MIXER = {
    "net": {
        "class_path": "mixer_lightning.models.MLPMixer",
        "init_args": {
            "patch_size": 4,
            "channels": 16,
            "tokens": 12,
            "num_blocks": 2,
            "gamma": 2,
            "permute": [True, False],
            "drop_path": 0.2,
            "drop_rate": 0.1,
        },
    },
    "label_smoothing": 0.1,
}
SPARSE_SW_MLP = {
    "net": {
        "class_path": "mixer_lightning.models.SWMLP",
        "init_args": {"patch_size": 4, "channels": 8, "num_blocks": 2, "gamma": 2, "density": 0.1, "impl": "sparse"},
    },
    "label_smoothing": 0.1,
}


def augmented_hf_config(tmp_path: Path, model: dict = RP_MIXER, **data: object) -> Path:
    """A config training a small RP Mixer (dropout, stochastic depth) on a tiny Hugging Face dataset
    with RandAugment, random erasing and mixup/cutmix: every source of randomness at once."""
    write_hf(tmp_path / "hf", train=48, test=16, size=16)
    config = {
        "seed_everything": 7,
        "trainer": {
            "accelerator": "cpu",
            "max_epochs": 3,
            "deterministic": True,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": str(tmp_path / "runs"), "name": "straight"},
            },
        },
        "model": {
            **model,
            "lr_scheduler": {
                "class_path": "mixer_lightning.optim.WarmupDecayLR",
                "init_args": {"warmup_epochs": 1, "min_lr": 1e-5},
            },
        },
        "data": {
            "class_path": "mixer_lightning.data.ImageDataModule",
            "init_args": {
                "dataset": "hf",
                "root": str(tmp_path / "hf"),
                "batch_size": 8,
                "val_split": 8,
                "num_workers": 0,
                "auto_augment": "rand-m9-mstd0.5-inc1",
                "random_erasing": 0.25,
                "mixup": 0.8,
                "cutmix": 1.0,
                "mean": [0.5, 0.5, 0.5],
                "std": [0.25, 0.25, 0.25],
                **data,
            },
        },
        "step_checkpoint": {"every_n_train_steps": 3},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_augmentation_does_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    config = augmented_hf_config(tmp_path)
    states = []
    for workers in (0, 2):
        main(
            [
                "fit",
                "--config",
                str(config),
                "--data.num_workers",
                str(workers),
                "--trainer.max_epochs",
                "1",
                "--trainer.logger.init_args.name",
                f"workers{workers}",
            ]
        )
        states.append(final_state(tmp_path / "runs" / f"workers{workers}" / "version_0"))
    assert_same(states[0], states[1])


KILL_MOMENTS = {
    # (KillAt arguments, step_checkpoint.every_n_train_steps, step of last.ckpt when killed); 5 batches per epoch
    "mid_epoch": ({"moment": "train_batch_end", "step": 7}, 3, 6),
    # Every step checkpoint falls on an epoch's last batch (5, 10): none is written there, so a kill during
    # epoch 1's validation resumes from the boundary of epochs 0 and 1, and redoes epoch 1 and its validation.
    "validation": ({"moment": "validation", "epoch": 1}, 5, 5),
    # Killed as epoch 2 starts, before its boundary checkpoint: resumes from the boundary of epochs 0 and 1.
    "epoch_start": ({"moment": "train_epoch_start", "epoch": 2}, 5, 5),
}


def killer_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        "MIXER_TRUSTED_MODULES": "helpers",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, moment",
    [(RP_MIXER, "mid_epoch"), (SPARSE_SW_MLP, "mid_epoch"), (RP_MIXER, "validation"), (RP_MIXER, "epoch_start")],
    ids=["rp_mlp_mixer-mid_epoch", "sparse_sw_mlp-mid_epoch", "rp_mlp_mixer-validation", "rp_mlp_mixer-epoch_start"],
)
def test_a_killed_run_resumes_bit_for_bit(tmp_path: Path, model: dict, moment: str) -> None:
    """SIGKILL a run (mid-epoch, during validation, as an epoch starts), resume it with
    ``--ckpt_path last``: its final weights, optimiser state, best checkpoint and every logged epoch
    figure equal an uninterrupted run's, with every source of randomness on (data order, RandAugment,
    random erasing, mixup/cutmix, dropout, stochastic depth, RP permutations or SW-MLP masks) and a
    warm-up + cosine schedule."""
    kill, every, saved_step = KILL_MOMENTS[moment]
    config = augmented_hf_config(tmp_path, model)
    env = killer_env()
    run = ["--config", str(config), "--step_checkpoint.every_n_train_steps", str(every)]
    subprocess.run([MIXER, "fit", *run], check=True, env=env, capture_output=True)
    killer = tmp_path / "kill.yaml"
    killer.write_text(
        yaml.safe_dump({"trainer": {"callbacks": [{"class_path": "helpers.killer.KillAt", "init_args": kill}]}})
    )
    killed = subprocess.run(
        [MIXER, "fit", *run, "--config", str(killer), "--trainer.logger.init_args.name", "killed"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    interrupted = tmp_path / "runs" / "killed" / "version_0"
    assert torch.load(interrupted / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == saved_step
    resumed = subprocess.run(
        [MIXER, "fit", *run, "--trainer.logger.init_args.name", "killed", "--ckpt_path", "last"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (interrupted / "config.resume1.yaml").is_file()  # resumed in its own run directory
    straight = tmp_path / "runs" / "straight" / "version_0"
    assert_same_runs(straight, interrupted)


def assert_same_runs(straight: Path, resumed: Path) -> None:
    """Final network, optimiser, schedule and step; the summary; best.ckpt; every logged epoch figure."""
    assert_same(final_state(straight), final_state(resumed))
    ours, theirs = read_json(straight / "fit_summary.json"), read_json(resumed / "fit_summary.json")
    timed = ("best_checkpoint", "throughput")  # where the run is, and how fast it went: not what it computed
    assert {k: v for k, v in ours.items() if k not in timed} == {k: v for k, v in theirs.items() if k not in timed}
    if (straight / "checkpoints" / "best.ckpt").exists():
        best = [torch.load(run / "checkpoints" / "best.ckpt", weights_only=True) for run in (straight, resumed)]
        assert best[0]["global_step"] == best[1]["global_step"]
        assert_same(best[0]["state_dict"], best[1]["state_dict"])
    # Every epoch's figures, the interrupted epoch's training accuracy and loss included (the metric
    # accumulators are in the checkpoint; the interrupted process's later events are purged).
    assert epoch_scalars(straight) == epoch_scalars(resumed)


def test_a_checkpoint_brings_its_own_architecture_to_test(capsys: pytest.CaptureFixture) -> None:
    """Lightning reads a checkpoint's hyper-parameters over the config: `mixer test --ckpt_path`
    evaluates the network the checkpoint holds (here an RP S-Mixer under a Mixer config)."""
    main(["fit", "--config", str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"), "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_rp_s_mixer")
    score = read_json(run / "fit_summary.json")["val/acc1"]
    main(
        [
            "validate",
            "--config",
            TINY,
            "--ckpt_path",
            str(run / "checkpoints" / "last.ckpt"),
            "--trainer.limit_val_batches",
            "1.0",
        ]
    )
    assert read_json(run / "val_metrics.json")["val/acc1"] == score  # written beside the checkpoint (issue 16)


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
    assert f"ckpt   {run}/checkpoints/last.ckpt" in capsys.readouterr().out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8
    assert (run / "config.yaml").is_file() and (run / "config.resume1.yaml").is_file()


def test_resume_keeps_the_optimiser_and_schedule_of_the_config_file() -> None:
    """A run whose optimiser comes from a config file (every paper config) resumes with that optimiser:
    Lightning re-parses the model from the checkpoint's hyper-parameters, which leave the optimiser out,
    and jsonargparse then reset it to AdamW, so SGD's momentum state failed to load (KeyError 'step')."""
    sgd = str(TEST_CONFIGS / "sgd_cosine.yaml")
    main(["fit", "--config", TINY, "--config", sgd, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    main(["fit", "--config", TINY, "--config", sgd, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    resumed = yaml.safe_load((run / "config.resume1.yaml").read_text())["model"]
    assert resumed["optimizer"]["class_path"] == "torch.optim.SGD"
    assert resumed["optimizer"]["init_args"]["momentum"] == 0.9 and resumed["optimizer"]["init_args"]["nesterov"]
    assert resumed["lr_scheduler"]["init_args"]["warmup_epochs"] == 1
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 8 and "momentum_buffer" in state["optimizer_states"][0]["state"][0]


def test_divergence_stops_with_one_line_and_keeps_the_good_checkpoint(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                TINY,
                "--trainer.max_epochs",
                "3",
                "--step_checkpoint.every_n_train_steps",
                "1",
                "--model.optimizer",
                "torch.optim.AdamW",
                "--model.optimizer.lr",
                "1e30",
                "--model.lr_scheduler",
                "null",
            ]
        )
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mixer: error: ")
    (run,) = run_dirs("digits_mixer")
    kept = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in kept["state_dict"].values() if v.is_floating_point())
    assert kept["global_step"] >= 1  # the checkpoint of the last step whose loss was finite


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
    main(
        [
            "fit",
            "--config",
            str(TEST_CONFIGS / "digits_rp_s_mixer.yaml"),
            "--trainer.max_epochs",
            "1",
            "--trainer.logger.init_args.name",
            "other",
        ]
    )
    other = str(next(Path("runs/other").glob("version_0/checkpoints/last.ckpt")).resolve())
    main(
        [
            "fit",
            "--config",
            TINY,
            "--model.net.channels",
            "24",
            "--trainer.max_epochs",
            "1",
            "--trainer.logger.init_args.name",
            "wider",
        ]
    )
    wider = str(next(Path("runs/wider").glob("version_0/checkpoints/last.ckpt")).resolve())
    write_hf(tmp / "hf10", train=24, test=8, size=8)
    main(
        [
            "fit",
            "--config",
            TINY,
            "--data.dataset",
            "hf",
            "--data.root",
            str(tmp / "hf10"),
            "--data.val_split",
            "8",
            "--trainer.max_epochs",
            "1",
            "--trainer.logger.init_args.name",
            "rgb",
        ]
    )
    rgb = str(next(Path("runs/rgb").glob("version_0/checkpoints/last.ckpt")).resolve())
    corrupt = write_image_folder(tmp / "folder", classes=2, per_class=3, size=(16, 16))
    bad = next((corrupt / "train").glob("*/*.jpg"))
    bad.write_bytes(b"\xff\xd8\xff garbage")
    listed = tmp / "listed.ckpt"  # a state dict that is a list of tensors, not tensors by name (issue 47, item 11)
    torch.save(
        {**torch.load(good, weights_only=True), "state_dict": list(torch.load(good)["state_dict"].values())}, listed
    )
    non_finite = tmp / "non_finite.ckpt"  # one NaN in the network's weights (issue 47, item 11)
    weights = torch.load(good, weights_only=True)
    next(v for k, v in weights["state_dict"].items() if k.startswith("net.")).view(-1)[0] = float("nan")
    torch.save(weights, non_finite)
    weights_only = tmp / "weights_only.ckpt"  # weights and hyper-parameters, no training state (issue 60, item 8)
    checkpoint = torch.load(good, weights_only=True)
    torch.save({key: checkpoint[key] for key in ("state_dict", "hyper_parameters")}, weights_only)
    return {
        "weights_only": str(weights_only),
        "good": good,
        "good_best": str(Path(good).with_name("best.ckpt")),
        "listed": str(listed),
        "non_finite": str(non_finite),
        "with_a_key": _folder_with_a_key(tmp),
        **_packs(tmp),
        "truncated": str(truncated),
        "text": str(text),
        "pickled": str(pickled),
        "other": other,
        "wider": wider,
        "rgb": rgb,
        "folder": str(corrupt),
        "bad_image": str(bad),
        **_lying_files(tmp),
        **_unbounded_inputs(tmp),
    }


def _folder_with_a_key(tmp: Path) -> str:
    """A folder holding a private key: never an output folder a command fills and uploads (issue 47, item 8)."""
    (tmp / "keys").mkdir()
    (tmp / "keys" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return str(tmp / "keys")


def _packs(tmp: Path) -> dict[str, str]:
    """Shards that would train on the wrong thing (issue 47, items 1-3): an unfinished pack, a shard its
    manifest does not list, a manifest that is a list, a key twice in a shard, a label in other digits."""
    import json
    import tarfile

    write_imagenet_folder(tmp / "imgs", classes=3, train=4, val=2)
    packs = {}
    for name in ("unfinished", "unlisted", "list_manifest"):
        main(["data", "pack", str(tmp / "imgs"), str(tmp / name), "--shard_size", "5"])
        packs[name] = str(tmp / name)
    manifest = tmp / "unfinished" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "complete": False}))
    (tmp / "unlisted" / "unlisted-train-0007.tar").write_bytes(
        (tmp / "unlisted" / "unlisted-train-0000.tar").read_bytes()
    )
    manifest = tmp / "list_manifest" / "manifest.json"
    manifest.write_text(json.dumps([json.loads(manifest.read_text())]))
    for name, key, label in (("key_twice", "train_00000", b"1"), ("arabic_digits", "extra", "\u0663".encode())):
        root = write_wds(tmp / name, train=8, val=8)
        shard = root / "imagenet1k-train-0000.tar"
        with tarfile.open(shard) as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
        with tarfile.open(shard, "w") as tar:
            for member, data in [
                *members,
                *[
                    (tarfile.TarInfo(f"{key}.{ext}"), members[0][1] if ext == "jpg" else label)
                    for ext in ("jpg", "cls")
                ],
            ]:
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        packs[name] = str(root)
    packs["wds"] = str(write_wds(tmp / "wds", train=8, val=8))
    return packs


def _unbounded_inputs(tmp: Path) -> dict[str, str]:
    """Inputs whose echo would be unbounded (issue 25, RC16), for the catalogue: a text file given
    where a config is read (its content was echoed). YAML bombs and FIFOs: tests/test_input_bounds.py."""
    passwd = tmp / "passwd.txt"
    passwd.write_text("".join(f"user{i}:x:{i}:{i}:private:/home/user{i}:/bin/sh\n" for i in range(24)))
    return {"passwd": str(passwd)}


def _lying_files(tmp: Path) -> dict[str, str]:
    """Configs, output paths and datasets that lie, for the catalogue."""
    (tmp / "latin.yaml").write_bytes(b"trainer:\n  max_epochs: 1 # \xe9t\xe9\n")  # Latin-1, not UTF-8
    (tmp / "empty.yaml").write_text("# nothing but a comment\n")
    (tmp / "malformed.yaml").write_text("trainer: [1, 2\n")
    (tmp / "unknown_key.yaml").write_text("trainer:\n  max_epoch: 1\n")
    (tmp / "a_folder.ckpt").mkdir()
    empty_class = write_image_folder(tmp / "empty_class", classes=3, per_class=2, size=(16, 16))
    for image in (empty_class / "train" / "n00000001").iterdir():
        image.unlink()
    no_images = write_image_folder(tmp / "no_images", classes=2, per_class=2, size=(16, 16))
    for image in no_images.rglob("*.jpg"):
        image.unlink()
    bombed = write_image_folder(tmp / "bombed", classes=2, per_class=2, size=(16, 16))
    bomb = write_png_header(bombed / "train" / "n00000000" / "zbomb.png", 20000, 20000)  # 4e8 pixels, 60 bytes
    for fifo in ("pipe.ckpt", "pipe.pt"):  # output paths that are not regular files (no root needed)
        os.mkfifo(tmp / fifo)
    digits = list(range(10))
    return {
        "latin": str(tmp / "latin.yaml"),
        "empty": str(tmp / "empty.yaml"),
        "malformed": str(tmp / "malformed.yaml"),
        "unknown_key": str(tmp / "unknown_key.yaml"),
        "a_folder": str(tmp / "a_folder.ckpt"),
        "empty_class": str(empty_class),
        "no_images": str(no_images),
        "bombed": str(bombed),
        "bomb": str(bomb),
        "hf_unlabelled": str(write_hf_labels(tmp / "hf_unlabelled", digits * 2, None)),
        "hf_negative": str(write_hf_labels(tmp / "hf_negative", [-1, *digits], digits)),
        "hf_large": str(write_hf_labels(tmp / "hf_large", digits * 2, [12, *digits[1:]])),
        "hf_strings": str(write_hf_labels(tmp / "hf_strings", ["cat", "dog"] * 5, ["cat", "dog"], "string")),
        "fifo_ckpt": str(tmp / "pipe.ckpt"),
        "fifo_pt": str(tmp / "pipe.pt"),
    }


FOLDER = ["--data.dataset", "folder", "--data.image_size", "16", "--data.num_workers", "0", "--trainer.max_epochs", "1"]
HF = ["--data.dataset", "hf", "--data.val_split", "0", "--trainer.max_epochs", "1"]


CATALOGUE = [
    # (name, argv (with {placeholders}), exit status, the field its one line names)
    ("unknown dataset", ["fit", "--config", TINY, "--data.dataset", "imagenet22k"], 2, "data.dataset"),
    (
        "missing data, download off",
        [
            "fit",
            "--config",
            TINY,
            "--data.dataset",
            "cifar10",
            "--data.root",
            "{tmp}/nowhere",
            "--data.download",
            "false",
        ],
        2,
        "data.root",
    ),
    ("patch size", ["fit", "--config", TINY, "--model.net.patch_size", "3"], 2, "model.net.patch_size"),
    ("tokens", ["fit", "--config", TINY, "--model.net.tokens", "0"], 2, "model.net.tokens"),
    ("channels", ["fit", "--config", TINY, "--model.net.channels", "-3"], 2, "model.net.channels"),
    ("gamma", ["fit", "--config", TINY, "--model.net.gamma", "0"], 2, "model.net.gamma"),
    ("depth", ["fit", "--config", TINY, "--model.net.num_blocks", "0"], 2, "model.net.num_blocks"),
    ("omega unreachable", ["fit", "--config", TINY, "--model.net.omega", "10"], 2, "model.net.omega"),
    ("permute list", ["fit", "--config", TINY, "--model.net.permute", "[true, false]"], 2, "model.net.permute"),
    (
        "sw-mlp density",
        ["fit", "--config", str(TEST_CONFIGS / "sw_mlp_digits.yaml"), "--model.net.density", "1.5"],
        2,
        "model.net.density",
    ),
    ("checkpoint missing", ["test", "--config", TINY, "--ckpt_path", "{tmp}/nothing.ckpt"], 2, "ckpt_path"),
    ("checkpoint truncated", ["test", "--config", TINY, "--ckpt_path", "{truncated}"], 2, "ckpt_path"),
    ("not a checkpoint", ["test", "--config", TINY, "--ckpt_path", "{text}"], 2, "ckpt_path"),
    ("pickled code refused", ["test", "--config", TINY, "--ckpt_path", "{pickled}"], 2, "ckpt_path"),
    ("another family", ["fit", "--config", TINY, "--model.init_from", "{other}"], 2, "model.init_from"),
    ("another architecture", ["fit", "--config", TINY, "--model.init_from", "{wider}"], 2, "model.init_from"),
    (
        "other classes, no new head",
        ["test", "--config", TINY, "--ckpt_path", "{rgb}", "--data.dataset", "hf", "--data.root", "{tmp}/hf3"],
        2,
        "ckpt_path",
    ),
    (
        "resume without a run",
        ["fit", "--config", TINY, "--ckpt_path", "last", "--trainer.logger.init_args.name", "never"],
        2,
        "ckpt_path",
    ),
    ("fsdp on the cpu", ["fit", "--config", TINY, "--trainer.strategy", "fsdp"], 2, "trainer"),
    ("a gpu that is not there", ["fit", "--config", TINY, "--trainer.accelerator", "gpu"], 2, "trainer"),
    (
        "corrupt image",
        [
            "fit",
            "--config",
            TINY,
            "--data.dataset",
            "folder",
            "--data.root",
            "{folder}",
            "--data.image_size",
            "16",
            "--data.val_split",
            "0",
        ],
        2,
        "data.root",
    ),
    ("width command", ["width", "--omega", "-5"], 2, "omega"),
    (
        "convert, missing key",
        ["convert", "--from", "{tmp}/broken.npz", "--model", "mlp_mixer", "--out", "{tmp}/x.ckpt"],
        2,
        "from",
    ),
    ("config not UTF-8", ["fit", "--config", "{latin}"], 2, "config"),
    ("empty config", ["fit", "--config", "{empty}"], 2, "config"),
    ("malformed config", ["fit", "--config", "{malformed}"], 2, "config"),
    (
        "a value over 255 characters",
        ["fit", "--config", TINY, "--trainer.max_epochs", "x" * 5000],
        2,
        "trainer.max_epochs",
    ),
    ("a checkpoint path over 255 characters", ["test", "--config", TINY, "--ckpt_path", "x" * 300], 2, "ckpt_path"),
    ("a text file as the model", ["fit", "--config", TINY, "--model", "{passwd}"], 2, "model"),
    ("unknown key in a config", ["fit", "--config", TINY, "--config", "{unknown_key}"], 2, "trainer.max_epoch"),
    ("a value of the wrong type", ["fit", "--config", TINY, "--trainer.max_epochs", "abc"], 2, "trainer.max_epochs"),
    ("a misspelt model option", ["fit", "--config", TINY, "--model.chanels", "3"], 2, "model.chanels"),
    ("a misspelt command", ["fitt", "--config", TINY], 2, "command"),
    ("a misspelt flag of a project command", ["visualize", "--ckpt", "{good}", "--outt", "x"], 2, "outt"),
    ("a text file as init_from", ["fit", "--config", TINY, "--model.init_from", "{text}"], 2, "model.init_from"),
    (
        "a pinned run directory that holds a run",
        [
            "fit",
            "--config",
            TINY,
            "--trainer.logger.init_args.save_dir",
            "{tmp}/runs",
            "--trainer.logger.init_args.name",
            "good",
            "--trainer.logger.init_args.version",
            "version_0",
        ],
        2,
        "trainer.logger.init_args.version",
    ),
    (
        "resume a pinned run that is not there",
        ["fit", "--config", TINY, "--trainer.logger.init_args.version", "version_7", "--ckpt_path", "last"],
        2,
        "ckpt_path",
    ),
    ("resume from 'best'", ["fit", "--config", TINY, "--ckpt_path", "best"], 2, "ckpt_path"),
    ("convert onto an existing file", ["convert", "--from", "{good}", "--out", "{wider}"], 2, "out"),
    ("convert into a file's folder", ["convert", "--from", "{good}", "--out", "{text}/x.ckpt"], 1, "{text}"),
    ("convert onto a folder", ["convert", "--from", "{good}", "--out", "{a_folder}", "--overwrite"], 2, "out"),
    ("visualize --out a file", ["visualize", "--ckpt", "{good}", "--out", "{text}"], 2, "out"),
    (
        "predict onto an existing file",
        ["predict", "--config", TINY, "--ckpt_path", "{good}", "--prediction_writer.output", "{text}"],
        2,
        "prediction_writer.output",
    ),
    (
        "predict onto a folder",
        ["predict", "--config", TINY, "--ckpt_path", "{good}", "--prediction_writer.output", "{tmp}"],
        2,
        "prediction_writer.output",
    ),
    ("an empty class folder", ["fit", "--config", TINY, *FOLDER, "--data.root", "{empty_class}"], 2, "data.root"),
    ("no images at all", ["fit", "--config", TINY, *FOLDER, "--data.root", "{no_images}"], 2, "data.root"),
    ("a decompression bomb", ["fit", "--config", TINY, *FOLDER, "--data.root", "{bombed}"], 2, "data.root"),
    (
        "hf: a test split without labels",
        ["fit", "--config", TINY, *HF, "--data.root", "{hf_unlabelled}"],
        2,
        "data.root",
    ),
    ("hf: label -1", ["fit", "--config", TINY, *HF, "--data.root", "{hf_negative}"], 2, "data.label_column"),
    ("hf: label >= num_classes", ["fit", "--config", TINY, *HF, "--data.root", "{hf_large}"], 2, "data.label_column"),
    ("hf: string labels", ["fit", "--config", TINY, *HF, "--data.root", "{hf_strings}"], 2, "data.label_column"),
    # issue 47: what would train on, average or upload the wrong thing
    ("shards: an unfinished pack", ["fit", "--config", WDS, "--data.root", "{unfinished}"], 2, "data.root"),
    ("shards: a shard the manifest does not list", ["data", "check", "{unlisted}"], 2, "root"),
    ("shards: a manifest that is a list", ["data", "check", "{list_manifest}"], 2, "root"),
    ("shards: a key twice in a shard", ["data", "check", "{key_twice}"], 2, "root"),
    ("shards: a label in Arabic-Indic digits", ["data", "check", "{arabic_digits}"], 2, "root"),
    (
        "shards: validation shards as the training pattern",
        ["fit", "--config", WDS, "--data.root", "{wds}/imagenet1k-validation-{{00..00}}.tar"],
        2,
        "data.root",
    ),
    ("shards: a pattern of a million names", ["data", "check", "{wds}/x-" + "{{0,1}}" * 20 + ".tar"], 2, "root"),
    ("pack: a prefix outside OUT", ["data", "pack", "{tmp}/imgs", "{tmp}/packed", "--prefix", "../x"], 2, "prefix"),
    ("pack: a negative seed", ["data", "pack", "{tmp}/imgs", "{tmp}/packed", "--seed", "-1"], 2, "seed"),
    ("a state dict that is a list", ["test", "--config", TINY, "--ckpt_path", "{listed}"], 2, "ckpt_path"),
    (
        "non-finite weights as init_from",
        ["fit", "--config", TINY, "--model.init_from", "{non_finite}"],
        2,
        "model.init_from",
    ),
    (
        "a resume with another learning rate",
        ["fit", "--config", TINY, "--ckpt_path", "{good}", "--model.optimizer.lr", "0.5"],
        2,
        "model.optimizer.lr",
    ),
    (
        "average: the last epoch twice (best.ckpt and last.ckpt)",
        ["average", "--ckpt_path", "{good_best}", "{good}", "--out", "{tmp}/avg.ckpt"],
        2,
        "ckpt_path",
    ),
    ("weights only as a resume", ["fit", "--config", TINY, "--ckpt_path", "{weights_only}"], 2, "ckpt_path"),
    (
        "a monitor neither an accuracy nor a loss",
        ["fit", "--config", TINY, "--checkpoint.monitor", "val/ece"],
        2,
        "checkpoint.mode",
    ),  # fmt: skip
    ("push into a folder of other files", ["push", "--ckpt_path", "{good}", "--out", "{with_a_key}"], 2, "out"),
]


# Images are read while training (the pil pipeline): these stop a run that has started.
FOUND_WHILE_TRAINING = {"corrupt image", "a decompression bomb"}


@pytest.fixture(scope="module")
def catalogue_files() -> Iterator[dict[str, str]]:
    """The catalogue's files, in a short folder of their own (``$TMPDIR/catalogue-XXXX``): its lines hold
    these paths whole, and under pytest's deeper folders (pytest-xdist adds ``popen-gwN/``) two of them grew
    past the line limit, where a path gives way to the problem (`errors.bounded_line`)."""
    with tempfile.TemporaryDirectory(prefix="catalogue-") as folder:
        tmp = Path(folder)
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            files = _checkpoint_files(tmp)
            write_hf(tmp / "hf3", train=12, test=6, size=8, classes=3)
            import numpy as np

            np.savez(tmp / "broken.npz", **{"stem/kernel": np.zeros((2, 2, 3, 8), dtype=np.float32)})
        finally:
            os.chdir(cwd)
        yield {**files, "tmp": str(tmp)}


def _fill(items: list[str], files: dict[str, str]) -> list[str]:
    return [item.format(**files) for item in items]


@pytest.mark.parametrize("name, argv, code, field", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_catalogue_of_bad_inputs(name, argv, code, field, catalogue_files, capsys: pytest.CaptureFixture) -> None:
    Path("runs").mkdir()
    Path("runs/keep.txt").write_text("earlier work")
    before = sorted(str(p) for p in Path(".").rglob("*"))
    fixtures = {p: p.stat().st_mtime_ns for p in Path(catalogue_files["tmp"]).rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(_fill(argv, catalogue_files))
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and not any(line.startswith("Traceback") for line in err)
    assert field_of(err[-1]) == field.format(**catalogue_files), err[-1]
    assert Path("runs/keep.txt").read_text() == "earlier work"
    after = sorted(str(p) for p in Path(".").rglob("*"))
    if name in FOUND_WHILE_TRAINING:  # the run had started: its directory stays, as evidence (config, logs)
        after = [p for p in after if not p.startswith("runs/digits_mixer")]
    assert after == before  # nothing written: no run directory
    assert {p: p.stat().st_mtime_ns for p in fixtures} == fixtures  # nothing already written is changed


# ----------------------------------------------------------------- exact resume, in-process (fast)

QUICK = ["--config", TINY, "--trainer.max_epochs", "3", "--trainer.log_every_n_steps", "1"]


def kill_config(tmp_path: Path, **kill) -> str:
    path = tmp_path / "kill.yaml"
    path.write_text(
        yaml.safe_dump({"trainer": {"callbacks": [{"class_path": "helpers.killer.KillAt", "init_args": kill}]}})
    )
    return str(path)


@pytest.mark.parametrize(
    "moment, every, extra, saved",
    [
        # The epoch's last step checkpoint would fall on its last batch (4 batches per epoch): none is written
        # there; a crash in epoch 1's validation resumes from step 6 and redoes step 8 and the validation.
        ({"moment": "validation", "epoch": 1}, 2, [], 6),
        # No step checkpoint inside epochs: the crash during validation resumes from the epoch 0/1 boundary.
        ({"moment": "validation", "epoch": 1}, 100, [], 4),
        # A crash as epoch 2 starts (before its boundary checkpoint): resumes from the epoch 0/1 boundary.
        ({"moment": "train_epoch_start", "epoch": 2}, 100, [], 4),
        # Validation twice an epoch: no checkpoint right before one (step 6); the crash in it resumes from step 5.
        ({"moment": "validation", "epoch": 1}, 1, ["--trainer.val_check_interval", "0.5"], 5),
    ],
    ids=["validation-after-step-checkpoint", "validation-after-epoch-boundary", "epoch-start", "mid-epoch-validation"],
)
def test_a_crash_at_an_epoch_boundary_or_in_validation_resumes_exactly(
    moment: dict, every: int, extra: list[str], saved: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The epoch's validation is logged once, best.ckpt sees it, the training-metric accumulators start
    afresh each epoch: the resumed run's weights, optimiser, best checkpoint and figures are the
    uninterrupted run's. (SIGKILL in a subprocess, with every source of randomness: the slow test above.)"""
    from helpers.killer import Crash

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    run = [*QUICK, "--step_checkpoint.every_n_train_steps", str(every), *extra]
    main(["fit", *run, "--trainer.logger.init_args.name", "straight"])
    with pytest.raises(Crash):
        main(
            [
                "fit",
                *run,
                "--config",
                kill_config(tmp_path, **moment, signal="CRASH"),
                "--trainer.logger.init_args.name",
                "crashed",
            ]
        )
    crashed = Path("runs/crashed/version_0")
    assert torch.load(crashed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == saved
    main(["fit", *run, "--trainer.logger.init_args.name", "crashed", "--ckpt_path", "last"])
    assert_same_runs(Path("runs/straight/version_0"), crashed)


@pytest.mark.usefixtures("signals_as_in_a_terminal")  # also when pytest runs under nohup or in the background
@pytest.mark.parametrize("signame, code", [("SIGTERM", 143)])
def test_sigterm_stops_with_a_resumable_checkpoint(
    signame: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A signal (here sent by the run to itself, in this process) stops the run at the next step with a
    non-zero status and last.ckpt of that step; ``--ckpt_path last`` then continues exactly. (A real
    subprocess signalled from outside: test_a_signalled_subprocess_stops_and_resumes_exactly.)"""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    run = [*QUICK, "--step_checkpoint.every_n_train_steps", "100"]
    main(["fit", *run, "--trainer.logger.init_args.name", "straight"])
    kill = kill_config(tmp_path, moment="train_batch_end", step=5, signal=signame)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *run, "--config", kill, "--trainer.logger.init_args.name", "stopped"])
    assert exit_info.value.code == code
    stopped = Path("runs/stopped/version_0")
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"mixer: stopped by {signame}")
    assert torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 5
    main(["fit", *run, "--trainer.logger.init_args.name", "stopped", "--ckpt_path", "last"])
    assert_same_runs(Path("runs/straight/version_0"), stopped)


# ------------------------------------------------------------------------------ run directories

ONE_STEP = [
    "--config",
    TINY,
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "1",
    "--trainer.limit_val_batches",
    "1",
]


def test_ckpt_path_last_is_the_newest_version_not_the_newest_file(capsys: pytest.CaptureFixture) -> None:
    main(["fit", *ONE_STEP])
    main(["fit", *ONE_STEP])
    old, new = run_dirs("digits_mixer")
    later = (old / "checkpoints" / "last.ckpt").stat().st_mtime + 3600
    os.utime(old / "checkpoints" / "last.ckpt", (later, later))  # touched: the newest file, not the newest run
    capsys.readouterr()
    main(["fit", *ONE_STEP, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert f"ckpt   {new}/checkpoints/last.ckpt" in capsys.readouterr().out
    assert (new / "config.resume1.yaml").is_file() and not (old / "config.resume1.yaml").exists()
    # Runs named by hand have no order: 'last' must be pinned among them.
    main(["fit", *ONE_STEP, "--trainer.logger.init_args.version", "alpha"])
    assert error_field(capsys, ["fit", *ONE_STEP, "--trainer.max_epochs", "2", "--ckpt_path", "last"]) == "ckpt_path"


def test_a_config_pinning_its_run_directory_resumes_exactly_that_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The contract `mixer sweep` relies on: a point's config pins logger name and version; ``mixer fit
    --config P.yaml`` starts it (refused once it exists), ``--ckpt_path last`` resumes exactly that
    directory's last.ckpt (whatever other runs there are), and is a one-line error when it has none."""
    config = yaml.safe_load(Path(TINY).read_text())
    config["trainer"].update(max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    config["trainer"]["logger"]["init_args"].update(name="point", version="C16_seed0")
    point = tmp_path / "P.yaml"
    point.write_text(yaml.safe_dump(config))
    run = Path("runs/point/C16_seed0")
    assert error_field(capsys, ["fit", "--config", str(point), "--ckpt_path", "last"]) == "ckpt_path"
    assert not run.exists()
    main(["fit", "--config", str(point)])
    main(["fit", "--config", str(point), "--trainer.logger.init_args.version", "version_5"])  # a newer run beside it
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(point)])  # started already: refused, not overwritten
    capsys.readouterr()
    main(["fit", "--config", str(point), "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert f"ckpt   {run}/checkpoints/last.ckpt" in capsys.readouterr().out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    assert torch.load("runs/point/version_5/checkpoints/last.ckpt", weights_only=True)["global_step"] == 2


LOCK_HOLDER = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_one_writer_per_run_directory_and_a_dead_writers_lock_is_taken_over(capsys: pytest.CaptureFixture) -> None:
    main(["fit", *ONE_STEP])
    (run,) = run_dirs("digits_mixer")
    lock = run / ".mixer.lock"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert error_field(capsys, ["fit", *ONE_STEP, "--trainer.max_epochs", "2", "--ckpt_path", "last"], 1) == (
            "trainer.logger"
        )
        assert not (run / "config.resume1.yaml").exists()
    finally:
        holder.kill()
        holder.wait()
    main(["fit", *ONE_STEP, "--trainer.max_epochs", "2", "--ckpt_path", "last"])  # the dead holder's lock is free
    assert (run / "config.resume1.yaml").is_file()


def test_orphaned_temporary_files_of_dead_processes_are_removed() -> None:
    main(["fit", *ONE_STEP])
    (run,) = run_dirs("digits_mixer")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = run / "checkpoints" / f".last.ckpt.tmp-{int(dead.stdout)}"
    orphan.write_bytes(b"PK half a checkpoint")
    living = run / "checkpoints" / f".last.ckpt.tmp-{os.getppid()}"  # a live process's write: not touched
    living.write_bytes(b"PK being written")
    main(["fit", *ONE_STEP, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert not orphan.exists() and living.exists()


def test_a_file_named_runs_is_one_line_and_kept(capsys: pytest.CaptureFixture) -> None:
    Path("runs").write_text("my notes")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *ONE_STEP])
    assert exit_info.value.code in (1, 2) and capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "mixer: error"
    )
    assert Path("runs").read_text() == "my notes"


def test_a_failed_run_that_wrote_checkpoints_elsewhere_keeps_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints written outside the run directory (``--checkpoint.dirpath``, ``--step_checkpoint.dirpath``)
    count: the run that wrote them keeps its config and logs when it fails later (issue 25 RC17)."""
    from helpers.killer import Crash

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    with pytest.raises(Crash):
        main(
            [
                "fit",
                *ONE_STEP,
                "--trainer.max_epochs",
                "3",
                "--checkpoint.dirpath",
                "elsewhere",
                "--step_checkpoint.dirpath",
                "elsewhere",
                "--config",
                kill_config(tmp_path, moment="train_epoch_start", epoch=1, signal="CRASH"),  # after epoch 0's best.ckpt
            ]
        )
    assert Path("elsewhere/best.ckpt").is_file()
    (run,) = run_dirs("digits_mixer")
    assert (run / "config.yaml").is_file()


# ------------------------------------------------------------------------------ writing files


def test_convert_overwrite_on_a_full_disk_keeps_the_old_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import errno

    from mixer_lightning.models.mlp_mixer import MLPMixer
    from mixer_lightning.weights import to_jax_npz

    to_jax_npz(
        MLPMixer(num_classes=10, image_size=8, in_chans=1, patch_size=2, channels=16, gamma=2, num_blocks=1),
        "digits.npz",
    )
    main(["convert", "--from", "digits.npz", "--model", "mlp_mixer", "--out", "model.ckpt"])
    old = Path("model.ckpt").read_bytes()

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 the first bytes")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "--from", "digits.npz", "--model", "mlp_mixer", "--out", "model.ckpt", "--overwrite"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("mixer: error: --out: ")
    assert Path("model.ckpt").read_bytes() == old
    assert sorted(p.name for p in Path(".").iterdir()) == ["digits.npz", "model.ckpt"]  # no temporary file left


def test_predict_replaces_an_output_only_when_told(capsys: pytest.CaptureFixture) -> None:
    main(["fit", *ONE_STEP])
    (run,) = run_dirs("digits_mixer")
    ckpt = str(run / "checkpoints" / "last.ckpt")
    predict = ["predict", "--config", TINY, "--ckpt_path", ckpt, "--prediction_writer.output", "predictions.pt"]
    main(predict)
    first = torch.load("predictions.pt", weights_only=True)["probabilities"]
    assert first.shape == (359, 10)
    with pytest.raises(SystemExit) as exit_info:
        main(predict)
    assert exit_info.value.code == 2
    main([*predict, "--prediction_writer.overwrite", "true"])
    assert torch.equal(torch.load("predictions.pt", weights_only=True)["probabilities"], first)
    os.mkfifo("node")  # a device node or a FIFO is never replaced by a file, told or not (a rename replaced it)
    onto = [*predict[:-1], "node", "--prediction_writer.overwrite", "true"]
    assert error_field(capsys, onto) == "prediction_writer.output" and stat.S_ISFIFO(os.stat("node").st_mode)


def test_an_image_folder_with_a_symlink_loop_is_read_once(tmp_path: Path) -> None:
    from mixer_lightning.data import ImageDataModule

    root = write_image_folder(tmp_path / "looped", classes=2, per_class=4, size=(16, 16))
    os.symlink("..", root / "train" / "n00000000" / "up")  # train/n00000000/up -> train/: a loop
    extra = write_image_folder(tmp_path / "extra", classes=1, per_class=2, size=(16, 16)) / "train" / "n00000000"
    for name in ("more", "more_again"):  # two links to one folder outside: its images are read once
        os.symlink(str(extra), root / "train" / "n00000001" / name)
    data = ImageDataModule(dataset="folder", root=str(root), image_size=16, num_workers=0)
    with pytest.warns(UserWarning, match="data.root"):
        data.setup("fit")
    assert len(data.train_set) == 4 + 4 + 2
    labels = [label for _, label in data.source.load("train").samples]
    assert sorted(labels) == [0] * 4 + [1] * 6  # each image under its own class, not reached via the loop
    main(["fit", "--config", TINY, *FOLDER, "--data.root", str(root)])
    assert read_json(run_dirs("digits_mixer")[0] / "fit_summary.json")["steps"] == 1


# ------------------------------------------------------------------ real subprocesses (slow)

LONG = [
    "--config",
    TINY,
    "--trainer.max_epochs",
    "30",
    "--trainer.log_every_n_steps",
    "1",
    "--step_checkpoint.every_n_train_steps",
    "3",
]


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("signame, code", [("SIGTERM", 143)])
def test_a_signalled_subprocess_stops_and_resumes_exactly(signame: str, code: int, capsys) -> None:
    """`mixer fit` in its own process, sent SIGTERM (a scheduler pre-empting it) from outside at whatever moment:
    it exits with 128 + the signal after saving last.ckpt, and ``--ckpt_path last`` goes on to the uninterrupted
    run's weights, optimiser and figures."""
    main(["fit", *LONG, "--trainer.logger.init_args.name", "straight"])
    fit = subprocess.Popen(
        [MIXER, "fit", *LONG, "--trainer.logger.init_args.name", "stopped"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = Path("runs/stopped/version_0")
    wait_for(run / "checkpoints" / "last.ckpt", fit)
    fit.send_signal(getattr(signal, signame))
    _, err = fit.communicate(timeout=120)
    assert fit.returncode == code, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"mixer: stopped by {signame} ")
    assert not (run / "fit_summary.json").exists()
    main(["fit", *LONG, "--trainer.logger.init_args.name", "stopped", "--ckpt_path", "last"])
    assert_same_runs(Path("runs/straight/version_0"), run)


@pytest.mark.slow
def test_a_second_concurrent_resume_of_a_run_is_refused(capsys) -> None:
    main(["fit", *ONE_STEP])
    (run,) = run_dirs("digits_mixer")
    first = subprocess.Popen(
        [MIXER, "fit", *LONG, "--ckpt_path", "last"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(run / "config.resume1.yaml", first)  # written under the lock
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", *LONG, "--ckpt_path", "last"])
        assert exit_info.value.code == 1
        assert field_of(capsys.readouterr().err) == "trainer.logger"
        assert not (run / "config.resume2.yaml").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 143
