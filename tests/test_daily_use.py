"""Daily use through the real `mixer` command (issue 16): evaluation and prediction in the checkpoint's
run directory, a folder of images predicted to a CSV, pretrained preprocessing as the data defaults,
console output for terminals and logs, did-you-mean for mistyped flags, a fast ``mixer --help``,
the CSV and W&B loggers."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from helpers import CONFIGS, ROOT, TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


def fit_tiny(*extra: str) -> Path:
    main(["fit", "--config", TINY, *extra])
    return run_dirs("digits_mixer")[-1]


def last_error(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


# --------------------------------------------------------------------- evaluation where the run is


def test_test_and_validate_write_into_the_checkpoints_run_directory(capsys) -> None:
    run = fit_tiny()
    best = run / "checkpoints" / "best.ckpt"
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["test", "--ckpt_path", str(best)])  # no --config: the run's config.yaml
    assert run_dirs("digits_mixer") == [run]  # no new version_N
    metrics = read_json(run / "test_metrics.json")
    assert {"test/loss", "test/acc1", "test/acc5"} <= set(metrics)
    out = capsys.readouterr().out
    assert f"Test metrics: {run / 'test_metrics.json'}" in out
    assert (run / "config.test1.yaml").is_file() and (run / "config.yaml").is_file()
    assert not [
        w for w in caught if "dirpath has changed" in str(w.message) or "callbacks used to create" in str(w.message)
    ]

    # The same figures as the explicit config gives; validate writes val_metrics.json beside them.
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)])
    again = read_json(run / "test_metrics.json")  # the same checkpoint: its own file, rewritten
    assert {k: again[k] for k in metrics if k.startswith("test/")} == {
        k: metrics[k] for k in metrics if k.startswith("test/")
    }
    assert again["config"] == "config.test2.yaml" and (run / "config.test2.yaml").is_file()
    main(["validate", "--ckpt_path", str(best)])
    assert {"val/loss", "val/acc1", "val/acc5"} <= set(read_json(run / "val_metrics.json"))
    # --ckpt_path last evaluates the latest run, in its directory too.
    main(["test", "--config", TINY, "--ckpt_path", "last"])
    assert run_dirs("digits_mixer") == [run] and (run / "config.test3.yaml").is_file()


def test_a_run_config_found_by_the_checkpoint_is_checked_like_any_config(capsys) -> None:
    run = fit_tiny()
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["trainer"]["callbacks"] = [{"class_path": "evil_lab.backdoor.Callback"}]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    assert exit_info.value.code == 2
    error = last_error(capsys)
    assert error.startswith("mixer: error: config: ") and "'evil_lab.backdoor.Callback'" in error, error
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written
    assert "evil_lab" not in sys.modules


def test_no_config_and_no_checkpoint_is_one_line(capsys) -> None:
    for command, fix in (("fit", "give --config CONFIG.yaml"), ("test", "give --ckpt_path RUN/checkpoints/best.ckpt")):
        with pytest.raises(SystemExit) as exit_info:
            main([command])
        assert exit_info.value.code == 2
        assert last_error(capsys).startswith(
            f"mixer: error: config: none given (the model and the data are set by a config); {fix}"
        )


def test_a_checkpoint_outside_a_run_needs_a_config(tmp_path, capsys) -> None:
    run = fit_tiny()
    shutil.copy(run / "checkpoints" / "best.ckpt", tmp_path / "model.ckpt")
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--ckpt_path", "model.ckpt"])
    assert exit_info.value.code == 2
    assert last_error(capsys) == (
        "mixer: error: config: none given, and 'model.ckpt' lies in no run directory (no config.yaml beside its "
        "checkpoints/ folder); give --config, e.g. the config it was trained with"
    )


# --------------------------------------------------------------------- predicting image files


def digits_test_pngs(folder: Path, count: int) -> list[Path]:
    """The first `count` images of the digits test split as 8-bit PNGs, in two nested folders."""
    from mixer_lightning.data.sources.builtin import Digits

    images = Digits("data", False).load("test").tensors[0][:count]
    paths = []
    for i, image in enumerate(images):
        path = folder / ("first" if i < count // 2 else "second/deeper") / f"{i:02d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((image[0].numpy() * 255).round().astype(np.uint8), "L").save(path)
        paths.append(path)
    (folder / "README.txt").write_text("not an image")
    return paths


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_predict_a_folder_to_a_csv_with_the_checkpoints_preprocessing(tmp_path, capsys) -> None:
    run = fit_tiny()
    best = run / "checkpoints" / "best.ckpt"
    facts = torch.load(best, weights_only=True)["data"]  # what every checkpoint carries now
    assert facts["class_names"] == [str(i) for i in range(10)] and facts["image_size"] == 8
    assert facts["mean"] == pytest.approx([0.3053]) and facts["eval_crop"] == "resize"
    digits_test_pngs(tmp_path / "photos", 6)
    capsys.readouterr()

    main(["predict", "--ckpt_path", str(best), "--data.predict_root", "photos", "--prediction_writer.topk", "3"])
    assert run_dirs("digits_mixer") == [run]
    rows = read_csv(run / "predictions.csv")
    assert list(rows[0]) == ["file"] + [f"{w}_{k}" for k in (1, 2, 3) for w in ("class", "name", "prob")]
    assert [row["file"] for row in rows] == [f"first/{i:02d}.png" for i in range(3)] + [
        f"second/deeper/{i:02d}.png" for i in range(3, 6)
    ]
    for row in rows:
        probs = [float(row[f"prob_{k}"]) for k in (1, 2, 3)]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
        assert row["name_1"] == row["class_1"]  # the digits' classes are named by their numbers
    out = capsys.readouterr()
    assert "predictions: predictions.csv" in out.out

    # The files, pre-processed from the checkpoint's facts, give the probabilities of the same images
    # read from the dataset (up to the PNGs' 8-bit rounding).
    main(["predict", "--ckpt_path", str(best)])
    split = torch.load(run / "predictions.pt")["probabilities"][:6]
    for row, probabilities in zip(rows, split, strict=True):
        for k in (1, 2, 3):
            assert float(row[f"prob_{k}"]) == pytest.approx(float(probabilities[int(row[f"class_{k}"])]), abs=0.005)

    # Predicting again never replaces a file; a list of files works too, and so does a checkpoint
    # moved out of its run directory (no config anywhere: its data facts suffice).
    main(["predict", "--ckpt_path", str(best), "--data.predict_root", '["photos/first/00.png", "photos/second"]'])
    assert [row["file"] for row in read_csv(run / "predictions1.csv")] == [
        "photos/first/00.png",
        "deeper/03.png",
        "deeper/04.png",
        "deeper/05.png",
    ]
    shutil.copy(best, tmp_path / "model.ckpt")
    main(
        [
            "predict",
            "--ckpt_path",
            "model.ckpt",
            "--data.predict_root",
            "photos",
            "--prediction_writer.topk",
            "3",
            "--prediction_writer.output",
            "alone.csv",
        ]
    )
    assert read_csv(tmp_path / "alone.csv") == rows
    # With the run's config given, its ImageDataModule reads the files, pre-processed the same way.
    main(
        [
            "predict",
            "--config",
            str(run / "config.yaml"),
            "--ckpt_path",
            str(best),
            "--data.predict_root",
            "photos",
            "--prediction_writer.topk",
            "3",
            "--prediction_writer.output",
            "via_config.csv",
        ]
    )
    assert read_csv(tmp_path / "via_config.csv") == rows


def test_checkpoints_carry_the_class_names_of_every_kind_of_dataset(tmp_path, monkeypatch) -> None:
    """Folder names, a Hugging Face ClassLabel's names, torchvision's classes (what `DataFacts` writes)."""
    from helpers.fakedata import patch_torchvision_checks, write_cifar10, write_hf, write_image_folder
    from mixer_lightning.data import ImageDataModule
    from mixer_lightning.data.predict import data_facts

    patch_torchvision_checks(monkeypatch)
    cases = (
        (dict(dataset="folder", root=str(write_image_folder(tmp_path / "folder"))), [f"n0{c:07d}" for c in range(3)]),
        (dict(dataset="hf", root=str(write_hf(tmp_path / "hf", train=8, test=4, classes=4))), ["c0", "c1", "c2", "c3"]),
        (
            dict(dataset="cifar10", root=str(write_cifar10(tmp_path / "cifar")), download=False, pipeline="tensor"),
            [f"class{i}" for i in range(10)],
        ),
    )
    for arguments, names in cases:
        data = ImageDataModule(batch_size=4, **arguments)
        data.setup("fit")
        facts = data_facts(data)
        assert facts["class_names"] == names, arguments["dataset"]
        assert facts["num_classes"] == len(names) and facts["mean"] == pytest.approx(list(data.mean))


def test_predict_root_errors_are_one_line(tmp_path, capsys) -> None:
    run = fit_tiny()
    best = str(run / "checkpoints" / "best.ckpt")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    for root, expected in (("missing", "no such file or folder 'missing'"), ("empty", "'empty' holds no images")):
        with pytest.raises(SystemExit) as exit_info:
            main(["predict", "--ckpt_path", best, "--data.predict_root", root])
        assert exit_info.value.code == 2
        error = last_error(capsys)
        assert error.startswith("mixer: error: data.predict_root: ") and expected in error, error
    assert not list(run.glob("predictions*"))


def test_a_failed_evaluation_leaves_nothing_in_the_run(tmp_path, capsys) -> None:
    """predict of a folder holding a file that is no image fails with one line, after the config of the
    invocation was saved into the checkpoint's run: that config.predict1.yaml is removed with it (an
    evaluation's config is kept only beside its results), and the next invocation takes the name."""
    run = fit_tiny("--trainer.max_epochs", "1")
    best = str(run / "checkpoints" / "best.ckpt")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"not a png at all")
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--ckpt_path", best, "--data.predict_root", "bad"])
    assert exit_info.value.code == 2
    assert last_error(capsys).startswith("mixer: error: data.predict_root: ")
    assert sorted(p.name for p in run.iterdir()) == before
    (tmp_path / "bad" / "x.png").unlink()
    digits_test_pngs(tmp_path / "bad", 2)
    main(["predict", "--ckpt_path", best, "--data.predict_root", "bad"])
    assert (run / "config.predict1.yaml").is_file() and (run / "predictions.csv").is_file()


# --------------------------------------------------------------------- pretrained preprocessing


def tiny_hub_repo(tmp_path: Path) -> Path:
    """A small timm MLP-Mixer saved as a timm hub repo, trained (its pretrained_cfg says) on inputs
    normalised with 0.5/0.5, bicubic, crop_pct 0.9: not the project's defaults."""
    import timm
    from timm.models import save_for_hf

    model_args = {"img_size": 32, "mlp_ratio": [0.0625, 0.0625], "num_classes": 10}
    model = timm.create_model("mixer_s32_224", **model_args)
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "crop_pct": 0.9,
        "interpolation": "bicubic",
        "input_size": (3, 32, 32),
    }
    save_for_hf(model, tmp_path / "repo", model_args=model_args)
    return tmp_path / "repo"


def test_pretrained_preprocessing_becomes_the_data_defaults(tmp_path, monkeypatch, capsys) -> None:
    import huggingface_hub.constants as hub
    from test_pretrained_hub import place_in_cache

    from helpers.fakedata import write_fine_tune_config
    from mixer_lightning.weights import read_weights
    from mixer_lightning.weights.preprocessing import hub_preprocessing

    cache = tmp_path / "hub_cache"
    cache.mkdir()
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", str(cache))):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    place_in_cache(cache, "lab/tiny-mixer", tiny_hub_repo(tmp_path))
    # Read without the weights, it is the preprocessing the weights' reader records.
    preprocessing = hub_preprocessing("hf-hub:lab/tiny-mixer")
    assert preprocessing == {k: v for k, v in read_weights("hf-hub:lab/tiny-mixer").preprocessing.items()}
    assert preprocessing["interpolation"] == "bicubic" and preprocessing["crop_pct"] == 0.9

    write_fine_tune_config(Path("finetune.yaml"), "hf-hub:lab/tiny-mixer", tmp_path / "hf5")
    capsys.readouterr()
    main(["fit", "--config", "finetune.yaml"])
    data = yaml.safe_load(Path("runs/hub/version_0/config.yaml").read_text())["data"]["init_args"]
    assert data["mean"] == [0.5, 0.5, 0.5] and data["std"] == [0.5, 0.5, 0.5]
    assert data["interpolation"] == "bicubic" and data["eval_crop_pct"] == 0.9
    captured = capsys.readouterr()
    assert "(the preprocessing of hf-hub:lab/tiny-mixer)" in captured.out and "warning" not in captured.err

    # A config that says otherwise keeps its value, with one warning line naming both.
    main(["fit", "--config", "finetune.yaml", "--data.std", "[0.25, 0.25, 0.25]", "--data.interpolation", "bilinear"])
    data = yaml.safe_load(Path("runs/hub/version_1/config.yaml").read_text())["data"]["init_args"]
    assert data["std"] == [0.25, 0.25, 0.25] and data["interpolation"] == "bilinear" and data["mean"] == [0.5] * 3
    warnings_ = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mixer: warning:")]
    assert warnings_ == [
        "mixer: warning: the config's preprocessing differs from that of the pretrained weights: data.std "
        "[0.25, 0.25, 0.25] (config) vs [0.5, 0.5, 0.5] (hf-hub:lab/tiny-mixer); data.interpolation bilinear "
        "(config) vs bicubic (hf-hub:lab/tiny-mixer); the config's is used"
    ]


# --------------------------------------------------------------------- console output


CHATTER = ("GPU available", "TPU available", "💡", "litlogger", "LeafSpec", "Seed set to", "| Name", "Restoring states")


def test_a_run_in_a_log_prints_what_runs_and_plain_progress_lines(tmp_path) -> None:
    """stdout is a pipe (as under SLURM or nohup): a header, then plain lines, no carriage returns."""
    code = "import sys; from mixer_lightning.cli import main; main(sys.argv[1:])"
    args = ["fit", "--config", TINY, "--trainer.enable_progress_bar", "true", "--progress.every_n_steps", "3"]
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "\r" not in output
    for chatter in CHATTER:
        assert chatter not in output, chatter
    lines = result.stdout.splitlines()
    assert lines[0].startswith("model  MLPMixerModule (patch_size=2, channels=16, gamma=2") and "parameters" in lines[0]
    # TINY sets limit_train_batches 4 and limit_val_batches 2: the header said "1,294 train, 144 val images"
    assert lines[1] == (
        "data   digits (10 classes, 8×8×1): 128 of 1,294 train (limit_train_batches 4), "
        "64 of 144 val images (limit_val_batches 2), batch 32"
    )
    assert lines[2] == "on     cpu, 1 device, 32-true precision, seed 0"
    assert lines[3] == "run    runs/digits_mixer/version_0"
    assert lines[4] == "train  8 steps (2 epochs × 4 batches); a line every 3 steps"
    progress = [line for line in lines if line.startswith("epoch ") and " step " in line]
    assert [line.split("  ")[1] for line in progress] == ["step 3/8", "step 6/8", "step 8/8"]
    for line in progress:
        for part in ("loss ", "acc ", "lr ", " img/s", "ETA "):
            assert part in line, (part, line)
    assert sum(line.startswith(("epoch 1 validation", "epoch 2 validation")) for line in lines) == 2


def test_progress_lines_read_the_loss_once_per_line_not_once_per_step(capsys, monkeypatch) -> None:
    """The loss of a line is the mean of the steps since the last line, summed where the loss lives and
    read once per line: a per-step `.item()` would be a host sync per step on a GPU."""
    from types import SimpleNamespace

    from mixer_lightning.cli.console import LineProgress

    reads = []
    original_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(1) or original_item(self))
    progress = LineProgress(every_n_steps=3)
    trainer = SimpleNamespace(
        global_step=0, max_epochs=1, current_epoch=0, optimizers=[], world_size=1, is_global_zero=True
    )
    progress._total, progress._start = 6.0, 0.0
    monkeypatch.setattr(LineProgress, "trainer", property(lambda self: trainer))
    for step, loss in enumerate([1.0, 2.0, 6.0, 4.0, 4.0, 4.0], start=1):
        trainer.global_step = step
        progress.on_train_batch_end(trainer, SimpleNamespace(), torch.tensor(loss), (torch.zeros(2, 1),), step - 1)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[2] for line in lines] == ["loss 3.0000", "loss 4.0000"]
    assert not reads  # float() once per line, no .item() per step


def test_the_progress_bar_in_a_terminal_lines_in_a_log(monkeypatch) -> None:
    from mixer_lightning.cli.console import LineProgress, progress_callback

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert progress_callback("auto", 50) is None  # Lightning's tqdm bar
    assert isinstance(progress_callback("lines", 50), LineProgress)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    line = progress_callback("auto", 20)
    assert isinstance(line, LineProgress) and line.every_n_steps == 20
    assert progress_callback("bar", 20) is None


def test_a_failed_run_is_one_line_without_chatter(capsys) -> None:
    import logging

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).addHandler(handler)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "fit",
                    "--config",
                    TINY,
                    "--data.dataset",
                    "cifar10",
                    "--data.root",
                    "nowhere",
                    "--data.download",
                    "false",
                ]
            )
    finally:
        for name in ("lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).removeHandler(handler)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1].startswith("mixer: error: data.root: no cifar10 data under ")
    for chatter in CHATTER:
        assert not any(chatter in text for text in [*records, captured.out, captured.err]), chatter
    assert not Path("runs").exists()


# --------------------------------------------------------------------- mistyped flags and keys


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--model.chanels", "3"],
            "model.chanels: MLPMixerModule has no option 'chanels'; did you mean 'channels'? see `mixer fit --help`",
        ),
        (
            ["--trainer.max_epoch", "3"],
            "trainer.max_epoch: no such option; did you mean 'trainer.max_epochs'? see `mixer fit --help`",
        ),
        (["--dataa.batch_size", "3"], "dataa.batch_size: no such option; did you mean 'data.batch_size'?"),
        (
            ["--model.optimizer.lrr", "0.1"],
            "model.optimizer.init_args.lrr: AdamW has no option 'lrr'; did you mean 'lr'?",
        ),
        (["--data.batch_size", "abc"], "data.batch_size: expected int or null, got 'abc'; see `mixer fit --help`"),
    ],
)
def test_a_mistyped_flag_is_one_line_with_a_suggestion(args, expected, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mixer: error: {expected}"), err
    assert not Path("runs").exists()


def test_a_mistyped_config_key_is_one_line_with_a_suggestion(capsys) -> None:
    for text, expected in (
        (
            "trainer:\n  max_epoch: 3\n",
            "trainer.max_epoch: no such option of `mixer fit`; did you mean 'trainer.max_epochs'?",
        ),
        (
            "model:\n  init_args:\n    chanels: 8\n",
            "model.chanels: MLPMixerModule has no option 'chanels'; did you mean 'channels'?",
        ),
    ):
        Path("typo.yaml").write_text(text)
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", TINY, "--config", "typo.yaml"])
        assert exit_info.value.code == 2
        error = last_error(capsys)
        assert error.startswith(f"mixer: error: {expected}"), error


# --------------------------------------------------------------------- fast start


def test_help_version_and_models_start_without_lightning(tmp_path) -> None:
    """``mixer --help`` and ``--version`` import neither Lightning nor torch; ``mixer models`` answers
    from its cache once the table was computed (here, in this process)."""
    from mixer_lightning.commands import models

    env = {**os.environ, "MIXER_CACHE_DIR": str(tmp_path / "cache")}
    os.environ["MIXER_CACHE_DIR"] = env["MIXER_CACHE_DIR"]
    try:
        rows = models.all_rows()  # computed and cached
    finally:
        del os.environ["MIXER_CACHE_DIR"]
    assert models.cache_file().name.startswith("models-")
    code = (
        "import sys, json\n"
        "from mixer_lightning.cli import main\n"
        "main(['--help']); main(['--version']); main(['models', 'mixer_b16', '--json'])\n"
        "heavy = sorted(m for m in ('lightning', 'torch', 'timm') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "mixer-lightning: MLP-Mixers" in result.stdout and "\nmixer-lightning 0." in result.stdout
    (row,) = json.loads(result.stdout[result.stdout.index("[\n") :])
    assert row == next(r for r in rows if r["name"] == "mixer_b16") and round(row["params_without_head"] / 1e6) == 59


def test_the_models_cache_follows_the_model_code(tmp_path, monkeypatch) -> None:
    from mixer_lightning.commands import models

    monkeypatch.setenv("MIXER_CACHE_DIR", str(tmp_path / "cache"))
    first = models.cache_file()
    fake = tmp_path / "package"
    shutil.copytree(models.PACKAGE / "models", fake / "models")
    shutil.copy(models.PACKAGE / "width.py", fake / "width.py")
    monkeypatch.setattr(models, "PACKAGE", fake)
    assert models.cache_file() == first  # the same code, the same table
    with open(fake / "models" / "registry.py", "a") as f:
        f.write("\n# changed\n")
    assert models.cache_file() != first


# --------------------------------------------------------------------- loggers


def test_the_csv_logger_keeps_run_directories_resume_and_summaries(capsys) -> None:
    csv_overlay = str(CONFIGS / "logger" / "csv.yaml")
    main(["fit", "--config", TINY, "--config", csv_overlay, "--trainer.log_every_n_steps", "1"])
    (run,) = run_dirs("digits_mixer")
    assert {"metrics.csv", "hparams.yaml", "config.yaml", "fit_summary.json"} <= {p.name for p in run.iterdir()}
    assert not list(run.glob("events.out.tfevents*"))
    first = read_csv(run / "metrics.csv")
    assert first and read_json(run / "fit_summary.json")["epochs"] == 2
    capsys.readouterr()
    main(
        [
            "fit",
            "--config",
            TINY,
            "--config",
            csv_overlay,
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.max_epochs",
            "3",
            "--ckpt_path",
            "last",
        ]
    )
    assert run_dirs("digits_mixer") == [run]
    rows = read_csv(run / "metrics.csv")
    assert rows[: len(first)] == [{**row, **{k: "" for k in rows[0] if k not in row}} for row in first]
    assert len(rows) > len(first) and read_json(run / "fit_summary.json")["epochs"] == 3
    assert "Previous log files" not in capsys.readouterr().err
    main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    assert (run / "test_metrics.json").is_file() and run_dirs("digits_mixer") == [run]


def test_wandb_without_the_package_is_one_line_naming_the_extra(capsys) -> None:
    from lightning.pytorch.loggers.wandb import _WANDB_AVAILABLE

    if _WANDB_AVAILABLE:
        pytest.skip("wandb is installed here")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--config", str(CONFIGS / "logger" / "wandb.yaml")])
    assert exit_info.value.code == 2
    assert last_error(capsys) == (
        "mixer: error: trainer.logger: mixer_lightning.loggers.WandbLogger needs the wandb package, which is not "
        "installed; pip install 'mixer-lightning[wandb]' (or use configs/logger/tensorboard.yaml or csv.yaml)"
    )
    assert not Path("runs").exists()


def fake_wandb(monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[dict]]:
    """A stand-in for the wandb package (not installed here): the runs it starts and what it is sent."""
    import lightning.pytorch.loggers.wandb as lightning_wandb

    sent: list[dict] = []

    class Run:
        def __init__(self, **init):
            self.init, self.id, self.name = init, "abc123", init.get("name")
            self.config = types.SimpleNamespace(update=lambda params, allow_val_change=False: sent.append(dict(params)))

        def log(self, metrics):
            sent.append(dict(metrics))

        def define_metric(self, *args, **kwargs):
            pass

    wandb = types.ModuleType("wandb")
    wandb.run = None
    runs: list[Run] = []
    wandb.init = lambda **init: runs.append(Run(**init)) or runs[-1]
    sdk, lib, wandb_run = (types.ModuleType(n) for n in ("wandb.sdk", "wandb.sdk.lib", "wandb.wandb_run"))
    lib.RunDisabled, wandb_run.Run = type("RunDisabled", (), {}), Run
    for name, module in (("wandb", wandb), ("wandb.sdk", sdk), ("wandb.sdk.lib", lib), ("wandb.wandb_run", wandb_run)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(lightning_wandb, "_WANDB_AVAILABLE", True)
    return runs, sent


def test_the_wandb_logger_keeps_the_run_directory(monkeypatch) -> None:
    runs, sent = fake_wandb(monkeypatch)
    overlay = str(CONFIGS / "logger" / "wandb.yaml")
    main(["fit", "--config", TINY, "--config", overlay, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    assert {"config.yaml", "fit_summary.json", "checkpoints"} <= {p.name for p in run.iterdir()}
    assert runs[0].init["dir"] == str(run) and runs[0].init["name"] == "digits_mixer/version_0"
    assert runs[0].init["project"] == "mixer-lightning"
    assert any("val/acc1" in metrics for metrics in sent)
    main(["fit", "--config", TINY, "--config", overlay, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert run_dirs("digits_mixer") == [run] and read_json(run / "fit_summary.json")["epochs"] == 2
    assert runs[1].init["dir"] == str(run)


def test_a_run_without_a_logger_trains_into_a_run_directory_of_its_own(capsys) -> None:
    """``--trainer.logger false`` means no metric logs, not no run directory: the run trains (no learning-rate
    monitor, which needs a logger), its config, checkpoints and summary go into the next free
    runs/mixer/version_N, none into the working directory, and the same command runs again. The saved
    config runs again as it is."""
    for _ in range(2):
        main(["fit", "--config", TINY, "--trainer.logger", "false", "--trainer.max_epochs", "1"])
    runs = run_dirs("mixer")
    assert [run.name for run in runs] == ["version_0", "version_1"]
    for run in runs:
        assert {p.name for p in run.iterdir()} == {"checkpoints", "config.yaml", "fit_summary.json"}  # no events
        assert (run / "checkpoints" / "best.ckpt").is_file()
    assert sorted(p.name for p in Path(".").iterdir()) == ["runs"]
    assert yaml.safe_load((runs[0] / "config.yaml").read_text())["trainer"]["default_root_dir"] is None
    main(["fit", "--config", str(runs[0] / "config.yaml"), "--trainer.max_epochs", "1"])
    assert [run.name for run in run_dirs("mixer")] == ["version_0", "version_1", "version_2"]


def test_logger_overlays_compose_with_an_experiment_config(capsys) -> None:
    for overlay, logger in (
        ("tensorboard", "lightning.pytorch.loggers.TensorBoardLogger"),
        ("csv", "mixer_lightning.loggers.CSVLogger"),
    ):
        with pytest.raises(SystemExit):
            main(
                [
                    "fit",
                    "--config",
                    str(CONFIGS / "quickstart.yaml"),
                    "--config",
                    str(CONFIGS / "logger" / f"{overlay}.yaml"),
                    "--print_config",
                ]
            )
        config = yaml.safe_load(capsys.readouterr().out)["trainer"]["logger"]
        assert config["class_path"] == logger
        assert config["init_args"]["save_dir"] == "runs" and config["init_args"]["name"] == "quickstart"
    assert (ROOT / "configs" / "logger" / "wandb.yaml").is_file()
