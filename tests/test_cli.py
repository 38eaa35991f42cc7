"""The `mixer` command line, driven through `main` exactly as the console script runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers import CONFIGS, TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


def test_fit_then_test_and_predict_from_the_saved_config(capsys: pytest.CaptureFixture[str]) -> None:
    main(["fit", "--config", TINY])
    (run,) = run_dirs("digits_mixer")
    best, last = run / "checkpoints" / "best.ckpt", run / "checkpoints" / "last.ckpt"
    assert best.is_file() and last.is_file()
    assert (run / "config.yaml").is_file()
    summary = read_json(run / "fit_summary.json")
    assert summary["monitor"] == "val/acc1" and Path(summary["best_checkpoint"]) == best
    assert "Best checkpoint (val/acc1" in capsys.readouterr().out

    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)])
    test_run = run_dirs("digits_mixer")[-1]
    metrics = read_json(test_run / "test_metrics.json")
    assert {"test/loss", "test/acc1", "test/acc5"} <= set(metrics) and metrics["checkpoint"][
        "path"
    ] == "checkpoints/best.ckpt"
    assert 0.0 <= metrics["test/acc1"] <= metrics["test/acc5"] <= 1.0

    # The same checkpoint evaluated again gives exactly the same figures.
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)])
    again = read_json(run_dirs("digits_mixer")[-1] / "test_metrics.json")
    assert {k: again[k] for k in again if k.startswith("test/")} == {
        k: metrics[k] for k in metrics if k.startswith("test/")
    }

    main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)])
    predictions = torch.load(run_dirs("digits_mixer")[-1] / "predictions.pt")["probabilities"]
    assert predictions.shape == (359, 10)  # the digits test split, every class
    torch.testing.assert_close(predictions.sum(dim=1), torch.ones(359))


def test_quickstart_config_trains_its_model() -> None:
    main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_steps", "2"])
    (run,) = run_dirs("quickstart")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 2
    hparams = checkpoint["hyper_parameters"]
    assert (hparams["channels"], hparams["tokens"], hparams["num_blocks"]) == (64, 16, 4)  # the README's model
    assert (hparams["num_classes"], hparams["image_size"], hparams["in_chans"]) == (10, 8, 1)  # the digits
    state = checkpoint["state_dict"]
    assert state["net.blocks.3.channel_mixing.mlp.fc1.weight"].shape == (256, 64)  # D_C = γC
    assert torch.count_nonzero(state["net.head.weight"]) > 0  # trained: the head starts at zero
    assert read_json(run / "fit_summary.json")["steps"] == 2


def test_print_config_shows_the_model_but_not_the_linked_data_facts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--print_config"])
    assert exit_info.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    init_args = config["model"]["init_args"]
    assert init_args["channels"] == 64 and init_args["tokens"] == 16
    assert init_args["optimizer"]["class_path"] == "torch.optim.AdamW"
    for linked in ("num_classes", "image_size", "in_chans"):
        assert linked not in init_args  # they come from the data module
    assert config["seed_everything"] == 0
    assert config["checkpoint"]["monitor"] == "val/acc1"


def test_rerun_into_the_same_run_directory_is_refused_or_resumed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--config", TINY, "--trainer.max_epochs", "1", "--trainer.logger.init_args.version", "fixed"]
    main(args)
    config = Path("runs/digits_mixer/fixed/config.yaml").read_text()
    with pytest.raises(SystemExit) as exit_info:  # a run directory is never overwritten (issue 19)
        main(args)
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("mixer: error: trainer.logger.init_args.version: 'runs/digits_mixer/fixed' holds a run already")
    )
    main([*args, "--trainer.max_epochs", "2", "--ckpt_path", "last"])  # or resumed
    assert Path("runs/digits_mixer/fixed/config.yaml").read_text() == config
    assert Path("runs/digits_mixer/fixed/config.resume1.yaml").is_file()


def test_data_facts_are_linked_into_the_model(tmp_path: Path) -> None:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    checkpoint = torch.load(run_dirs("digits_mixer")[-1] / "checkpoints" / "last.ckpt", weights_only=False)
    hparams = checkpoint["hyper_parameters"]
    assert (hparams["num_classes"], hparams["image_size"], hparams["in_chans"]) == (10, 8, 1)


def test_a_config_mistake_is_one_line_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--model.patch_size", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "mixer: error: model.patch_size: 3 does not divide image_size 8; choose a divisor of 8 (or resize the images)"
    )
    assert not any("Traceback" in line for line in err)
    assert not Path("runs").exists()  # nothing was written

    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY, "--data.dataset", "mnist3d"])
    assert "data.dataset: unknown dataset 'mnist3d'" in capsys.readouterr().err


def test_debug_flag_shows_the_traceback() -> None:
    from mixer_lightning.errors import ConfigError, find_config_error

    with pytest.raises(Exception) as error:
        main(["fit", "--config", TINY, "--model.channels", "0", "--debug"])
    assert not isinstance(error.value, SystemExit)  # the exception itself, with its traceback
    cause = find_config_error(error.value)  # (jsonargparse may wrap it)
    assert isinstance(cause, ConfigError) and cause.field == "model.channels"


def test_help_lists_lightning_and_project_commands(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: mixer") and "mixer-lightning: MLP-Mixers" in out
    assert "Lightning Trainer command line tool" not in out
    for command in ("fit", "validate", "test", "predict", "models", "convert", "sweep", "export"):
        assert f"\n  {command} " in out, command
    main(["--version"])
    assert capsys.readouterr().out.strip().startswith("mixer-lightning 0.")


def test_project_command_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    main(["models", "mixer_s*", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert {row["name"] for row in rows} == {"mixer_s16", "mixer_s32", "mixer_ss8", "mixer_ss_w"}
    with pytest.raises(SystemExit) as exit_info:
        main(["models", "--no-such-flag"])
    assert exit_info.value.code == 2


def test_installed_console_script() -> None:
    script = Path(sys.executable).with_name("mixer")
    assert script.is_file(), "the `mixer` console script is not installed (pip install -e .)"
    result = subprocess.run([str(script), "models", "mixer_b16", "--json"], capture_output=True, text=True, check=True)
    (row,) = json.loads(result.stdout)
    assert row["family"] == "mlp_mixer" and round(row["params_without_head"] / 1e6) == 59


def test_project_commands_start_without_importing_lightning() -> None:
    # `mixer width` is arithmetic: it must not pay Lightning's (and torch's) import time.
    code = (
        "import sys\n"
        "from mixer_lightning.cli import main\n"
        "main(['width', '--omega', '2**18', '--json'])\n"
        "heavy = sorted(m for m in ('lightning', 'torch') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["optimum"]["S"] == 64
