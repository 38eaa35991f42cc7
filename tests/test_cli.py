"""The `mixer` command line, driven through `main` exactly as the console script runs it: exit codes, the
fields errors name, and the files a run leaves; never the wording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers import CONFIGS, TEST_CONFIGS, error_field, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
ONE_EPOCH = ["--trainer.max_epochs", "1"]


def test_fit_then_evaluate_inside_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    main(["fit", "--config", TINY])
    (run,) = run_dirs("digits_mixer")
    best, last = run / "checkpoints" / "best.ckpt", run / "checkpoints" / "last.ckpt"
    assert best.is_file() and last.is_file() and (run / "config.yaml").is_file()
    summary = read_json(run / "fit_summary.json")
    assert summary["monitor"] == "val/acc1" and Path(summary["best_checkpoint"]) == best

    main(["test", "--ckpt_path", str(best)])  # no --config: the run's own comes with the checkpoint
    metrics = read_json(run / "test_metrics.json")
    assert {"test/loss", "test/acc1", "test/acc5"} <= set(metrics)
    assert metrics["checkpoint"]["path"] == "checkpoints/best.ckpt" and metrics["config"] == "config.test1.yaml"
    assert (run / "config.test1.yaml").is_file() and run_dirs("digits_mixer") == [run]  # no new run

    main(["test", "--ckpt_path", str(last)])  # another checkpoint's results never replace these
    assert read_json(run / "test_metrics.json") == metrics
    assert read_json(run / "test_metrics.last.json")["checkpoint"]["path"] == "checkpoints/last.ckpt"

    main(["predict", "--ckpt_path", str(best)])
    predictions = torch.load(run / "predictions.pt")["probabilities"]
    assert predictions.shape == (359, 10)  # the digits test split, every class
    torch.testing.assert_close(predictions.sum(dim=1), torch.ones(359))


def test_the_network_its_arguments_and_the_data_facts_are_in_the_checkpoint() -> None:
    main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_steps", "2"])
    (run,) = run_dirs("quickstart")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert hparams["net"]["class_path"] == "mixer_lightning.models.MLPMixer"
    net = hparams["net"]["init_args"]
    assert (net["channels"], net["tokens"], net["num_blocks"]) == (64, 16, 4)  # the README's model
    assert (hparams["num_classes"], hparams["image_size"], hparams["in_chans"]) == (10, 8, 1)  # the digits
    assert checkpoint["state_dict"]["net.blocks.3.channel_mixing.mlp.fc1.weight"].shape == (256, 64)  # D_C = γC
    assert read_json(run / "fit_summary.json")["steps"] == 2


def test_print_config_shows_the_network_but_not_the_linked_data_facts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.net.channels", "32", "--print_config"])
    assert exit_info.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["net"]["init_args"]["channels"] == 32
    assert not {"num_classes", "image_size", "in_chans"} & set(config["model"]["net"]["init_args"])
    assert config["seed_everything"] == 0 and config["checkpoint"]["monitor"] == "val/acc1"


def test_a_run_directory_is_never_overwritten_but_resumed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--config", TINY, *ONE_EPOCH, "--trainer.logger.init_args.version", "fixed"]
    main(args)
    config = Path("runs/digits_mixer/fixed/config.yaml").read_text()
    assert error_field(capsys, args) == "trainer.logger.init_args.version"
    main([*args, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert Path("runs/digits_mixer/fixed/config.yaml").read_text() == config
    assert yaml.safe_load(Path("runs/digits_mixer/fixed/config.resume1.yaml").read_text())["trainer"]["max_epochs"] == 2
    assert torch.load("runs/digits_mixer/fixed/checkpoints/last.ckpt", weights_only=True)["epoch"] == 2


def test_ckpt_path_last_resumes_the_latest_run_in_its_own_directory() -> None:
    main(["fit", "--config", TINY, *ONE_EPOCH])
    main(["fit", "--config", TINY, *ONE_EPOCH])
    main(["fit", "--config", TINY, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    first, second = run_dirs("digits_mixer")  # no third run: version_1 went on
    assert (second / "config.resume1.yaml").is_file() and not (first / "config.resume1.yaml").exists()
    assert read_json(second / "fit_summary.json")["epochs"] == 2


def test_a_second_writer_of_a_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from filelock import FileLock

    run = Path("runs/digits_mixer/fixed")
    run.mkdir(parents=True)
    with FileLock(run / ".mixer.lock"):  # another process's fit of this run
        args = ["fit", "--config", TINY, *ONE_EPOCH, "--trainer.logger.init_args.version", "fixed"]
        assert error_field(capsys, args, code=1) == "trainer.logger"
    assert not (run / "config.yaml").exists()


@pytest.mark.parametrize(
    ("flag", "field"),
    [
        (["--model.net.patch_size", "3"], "model.net.patch_size"),  # the project's own check
        (["--data.dataset", "mnist3d"], "data.dataset"),
        (["--trainer.max_epochs", "abc"], "trainer.max_epochs"),  # jsonargparse's: the key it names
        (["--ckpt_path", "nope.ckpt"], "ckpt_path"),
    ],
)
def test_a_mistake_is_one_line_naming_the_field_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], flag: list[str], field: str
) -> None:
    assert error_field(capsys, ["fit", "--config", TINY, *flag]) == field
    assert not Path("runs").exists()


@pytest.mark.parametrize(
    ("flag", "field", "meant"),
    [
        ("--trainer.max_epoch", "trainer.max_epoch", "trainer.max_epochs"),  # no silent abbreviation
        ("--dataa.batch_size", "dataa.batch_size", "data.batch_size"),
        ("--model.net.chanels", "model.net.chanels", "model.net.channels"),
        # the model is no subclass group here: its arguments go without init_args (it suggested itself)
        (
            "--model.init_args.optimizer.init_args.lr",
            "model.init_args.optimizer.init_args.lr",
            "model.optimizer.init_args.lr",
        ),
    ],
)
def test_a_misspelt_key_gets_a_did_you_mean(
    capsys: pytest.CaptureFixture[str], flag: str, field: str, meant: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, flag, "3"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and line.startswith(f"mixer: error: {field}: ") and repr(meant) in line


def test_debug_shows_the_traceback() -> None:
    from mixer_lightning.errors import ConfigError

    with pytest.raises(Exception) as error:
        main(["fit", "--config", TINY, "--model.net.patch_size", "3", "--debug"])
    chain = [error.value, error.value.__cause__, error.value.__context__]
    assert any(isinstance(e, ConfigError) and e.field.endswith("patch_size") for e in chain)


@pytest.mark.parametrize(
    ("flag", "raised"),
    [
        (["--model.optimizer.lr", "-1"], "ValueError"),  # torch's AdamW
        (["--checkpoint.save_top_k", "-5"], "MisconfigurationException"),  # Lightning's ModelCheckpoint
        (["--seed_everything", "-5"], "ValueError"),  # numpy's seed
    ],
)
def test_a_librarys_error_is_its_type_and_first_line(
    capsys: pytest.CaptureFixture[str], flag: list[str], raised: str
) -> None:
    """A value a library refuses was its full traceback (docs/reliability.md says `mixer` prints its first line)."""
    assert error_field(capsys, ["fit", "--config", TINY, *ONE_EPOCH, *flag], code=1) == raised


def test_an_error_raised_inside_the_package_is_a_bug_and_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mixer_lightning.cli.lightning.fit_summary", None)  # called after the fit: a TypeError here
    with pytest.raises(TypeError):
        main(["fit", "--config", TINY, *ONE_EPOCH, "--trainer.limit_train_batches", "1"])


def test_an_optimiser_switched_by_a_flag_takes_its_own_defaults() -> None:
    main(["fit", "--config", TINY, *ONE_EPOCH, "--model.optimizer", "torch.optim.SGD", "--model.optimizer.lr", "0.1"])
    states = torch.load(run_dirs("digits_mixer")[0] / "checkpoints" / "last.ckpt", weights_only=True)
    group = states["optimizer_states"][0]["param_groups"][0]
    assert "nesterov" in group and group["momentum"] == 0 and group["initial_lr"] == pytest.approx(0.1)
    assert {g["weight_decay"] for g in states["optimizer_states"][0]["param_groups"]} == {0}  # SGD's own, not AdamW's


def test_help_version_and_the_project_commands(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    for command in ("fit", "validate", "test", "predict", "models", "convert", "sweep", "export"):
        assert f"\n  {command} " in out, command
    main(["--version"])
    assert capsys.readouterr().out.startswith("mixer-lightning ")
    main(["models", "mixer_s*", "--json"])
    assert {row["name"] for row in json.loads(capsys.readouterr().out)} >= {"mixer_s16", "mixer_s32"}
    assert error_field(capsys, ["modles"]) == "command"
    assert error_field(capsys, ["models", "--no-such-flag"]) != ""


def test_the_console_script_runs_and_project_commands_start_without_lightning() -> None:
    script = Path(sys.executable).with_name("mixer")
    result = subprocess.run([str(script), "models", "mixer_b16", "--json"], capture_output=True, text=True, check=True)
    assert round(json.loads(result.stdout)[0]["params_without_head"] / 1e6) == 59
    code = (
        "import sys\nfrom mixer_lightning.cli import main\nmain(['width', '--omega', '2**18', '--json'])\n"
        "assert not {'lightning', 'torch'} & set(sys.modules), 'width imported Lightning or torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
