"""Daily use through the real `mixer` command: evaluation and prediction in the checkpoint's run directory,
a folder of images predicted to a CSV, pretrained preprocessing as the data defaults, console output for
terminals and logs, did-you-mean for mistyped keys, a fast ``mixer --help``, the CSV and W&B loggers."""

from __future__ import annotations

import csv
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

from helpers import CONFIGS, ROOT, TEST_CONFIGS, error_field, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


def fit_tiny(*extra: str) -> Path:
    main(["fit", "--config", TINY, *extra])
    return run_dirs("digits_mixer")[-1]


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
    assert error_field(capsys, ["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")]).startswith("trainer")
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written
    assert "evil_lab" not in sys.modules


def test_no_config_and_a_checkpoint_outside_a_run_are_one_line(tmp_path, capsys) -> None:
    assert error_field(capsys, ["fit"]) == "model.net"  # the network and the data come from a config
    run = fit_tiny()
    shutil.copy(run / "checkpoints" / "best.ckpt", tmp_path / "model.ckpt")
    assert error_field(capsys, ["test", "--ckpt_path", "model.ckpt"]) == "config"


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
        (
            dict(dataset="folder", root=str(write_image_folder(tmp_path / "folder")), image_size=16),
            [f"n0{c:07d}" for c in range(3)],
        ),
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
    for root in ("missing", "empty"):
        assert error_field(capsys, ["predict", "--ckpt_path", best, "--data.predict_root", root]) == "data.predict_root"
    assert not list(run.glob("predictions*"))


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

    # A config that sets a value of its own keeps it.
    main(["fit", "--config", "finetune.yaml", "--data.std", "[0.25, 0.25, 0.25]", "--data.interpolation", "bilinear"])
    data = yaml.safe_load(Path("runs/hub/version_1/config.yaml").read_text())["data"]["init_args"]
    assert data["std"] == [0.25, 0.25, 0.25] and data["interpolation"] == "bilinear" and data["mean"] == [0.5] * 3


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
    assert [line[:7] for line in lines[:5]] == ["model  ", "data   ", "on     ", "run    ", "train  "]
    assert "2,490 parameters" in lines[0] and "S=16, C=16" in lines[0]  # the widths H&K compare models by
    assert "1,294 train, 144 val images" in lines[1] and lines[3].endswith("runs/digits_mixer/version_0")
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

    from mixer_lightning.callbacks.console import LineProgress

    reads = []
    original_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(1) or original_item(self))
    progress = LineProgress(every_n_steps=3)
    trainer = SimpleNamespace(
        global_step=0, max_epochs=1, current_epoch=0, optimizers=[], world_size=1, is_global_zero=True, callbacks=[]
    )
    progress.total, progress.start = 6.0, 0.0
    monkeypatch.setattr(LineProgress, "trainer", property(lambda self: trainer))
    for step, loss in enumerate([1.0, 2.0, 6.0, 4.0, 4.0, 4.0], start=1):
        trainer.global_step = step
        progress.on_train_batch_end(trainer, SimpleNamespace(), torch.tensor(loss), (torch.zeros(2, 1),), step - 1)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[2] for line in lines] == ["loss 3.0000", "loss 4.0000"]
    assert not reads  # float() once per line, no .item() per step


def test_the_progress_bar_in_a_terminal_lines_in_a_log(monkeypatch) -> None:
    from mixer_lightning.callbacks.console import LineProgress, line_progress

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert line_progress({"mode": "auto", "every_n_steps": 50}) == []  # Lightning's bar
    assert isinstance(line_progress({"mode": "lines", "every_n_steps": 50})[0], LineProgress)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    (line,) = line_progress({"mode": "auto", "every_n_steps": 20})
    assert isinstance(line, LineProgress) and line.every_n_steps == 20
    assert line_progress({"mode": "bar", "every_n_steps": 20}) == []


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
    assert captured.err.strip().splitlines()[-1].startswith("mixer: error: data.root: ")
    for chatter in CHATTER:
        assert not any(chatter in text for text in [*records, captured.out, captured.err]), chatter
    assert not [p for p in Path(".").rglob("*") if p.suffix in (".ckpt", ".yaml", ".json")]  # nothing of the run


# --------------------------------------------------------------------- mistyped flags and keys


@pytest.mark.parametrize(
    ("text", "field", "meant"),
    [
        ("trainer:\n  max_epoch: 3\n", "trainer.max_epoch", "trainer.max_epochs"),
        ("model:\n  net:\n    init_args:\n      chanels: 8\n", "model.net.init_args.chanels", "model.net.channels"),
    ],
)
def test_a_mistyped_config_key_is_one_line_with_a_suggestion(text, field, meant, capsys) -> None:
    Path("typo.yaml").write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--config", "typo.yaml"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and line.startswith(f"mixer: error: {field}: ") and repr(meant) in line


# --------------------------------------------------------------------- fast start


def test_help_and_version_start_without_lightning(tmp_path) -> None:
    code = (
        "import sys\nfrom mixer_lightning.cli import main\nmain(['--help']); main(['--version'])\n"
        "heavy = sorted(m for m in ('lightning', 'torch', 'timm') if m in sys.modules)\nassert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: mixer") and "\nmixer-lightning " in result.stdout


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
    assert {"fit_summary.json", "checkpoints"} <= {p.name for p in run.iterdir()}
    assert runs[0].init["dir"] == str(run) and runs[0].init["name"] == "digits_mixer/version_0"
    assert runs[0].init["project"] == "mixer-lightning"
    assert any("val/acc1" in metrics for metrics in sent)
    main(["fit", "--config", TINY, "--config", overlay, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert run_dirs("digits_mixer") == [run] and read_json(run / "fit_summary.json")["epochs"] == 2
    assert runs[1].init["dir"] == str(run)


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
