"""Command-line flags win over ``--config`` files wherever they stand (docs/reliability.md, "Flags
win over config files"): jsonargparse applies arguments left to right, so a flag before a
``--config`` used to be applied and then overwritten by the file."""

from __future__ import annotations

import pytest
import yaml

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
SW_MLP = str(TEST_CONFIGS / "sw_mlp_digits.yaml")


def printed_config(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict:
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--print_config"])
    assert exit_.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def test_a_checkpoint_flag_before_the_runs_config_tests_that_checkpoint(capsys) -> None:
    """``mixer test --ckpt_path BEST --config RUN/config.yaml``: the run's config.yaml says
    ``ckpt_path: null``, which used to cancel the flag, so an untrained model was tested (into a new
    version_N). Both orders now test the checkpoint, in its run directory, with the same figures."""
    main(["fit", "--config", TINY])
    (run,) = run_dirs("digits_mixer")
    best = str(run / "checkpoints" / "best.ckpt")
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", best])
    expected = read_json(run / "test_metrics.json")
    (run / "test_metrics.json").unlink()
    main(["test", "--ckpt_path", best, "--config", str(run / "config.yaml")])
    assert run_dirs("digits_mixer") == [run]  # no new version_N: the checkpoint's run was evaluated
    got = read_json(run / "test_metrics.json")
    assert got["test/loss"] == expected["test/loss"] and got["test/acc1"] == expected["test/acc1"]


@pytest.mark.parametrize("config_flag", ["--config", "-c", "--config="])
def test_model_flags_before_the_config_are_parsed_against_its_class_and_win(config_flag, capsys) -> None:
    """A model flag before the ``--config`` that names the model class used to be parsed against the
    default class (``ClassifierModule has no option 'density'``), and any flag the file also sets
    was overwritten by it (``seed_everything``, ``trainer.max_epochs``)."""
    config = [config_flag + SW_MLP] if config_flag.endswith("=") else [config_flag, SW_MLP]
    args = ["fit", "--model.init_args.density", "0.5", "--seed_everything", "3", "--trainer.max_epochs", "5"]
    printed = printed_config(capsys, [*args, *config])
    assert printed["model"]["class_path"] == "mixer_lightning.tasks.SWMLPModule"
    assert printed["model"]["init_args"]["density"] == 0.5
    assert printed["seed_everything"] == 3 and printed["trainer"]["max_epochs"] == 5
    # Among config files the later still wins; a flag wins over both, wherever it stands.
    printed = printed_config(capsys, ["fit", "--trainer.max_epochs", "5", "--config", TINY, "--config", SW_MLP])
    assert printed["model"]["class_path"] == "mixer_lightning.tasks.SWMLPModule"
    assert (
        printed["trainer"]["max_epochs"] == 5 and printed["trainer"]["logger"]["init_args"]["name"] == "sw_mlp_digits"
    )


def test_a_short_model_flag_before_the_config_names_the_configs_class(capsys) -> None:
    """``--model.channels 8 --config CFG``: an error about the wrong class ('ClassifierModule has no
    option channels') before; the flag now applies to the config's MLPMixerModule."""
    printed = printed_config(capsys, ["fit", "--model.channels", "8", "--config", TINY])
    assert printed["model"]["class_path"] == "mixer_lightning.tasks.MLPMixerModule"
    assert printed["model"]["init_args"]["channels"] == 8
