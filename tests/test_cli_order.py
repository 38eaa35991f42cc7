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


NOTES: list[str] = []


def printed_with_notes(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict:
    """`printed_config`, keeping what went to stderr in NOTES[-1]."""
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--print_config"])
    assert exit_.value.code in (0, None)
    captured = capsys.readouterr()
    NOTES.append(captured.err)
    return yaml.safe_load(captured.out)


def test_an_optimiser_switched_by_a_flag_takes_its_own_defaults_for_what_nobody_set(capsys, tmp_path) -> None:
    """X2: ``--model.init_args.optimizer torch.optim.SGD`` over the default AdamW trained SGD with
    AdamW's weight_decay 0.01 (SGD's is 0): jsonargparse keeps a replaced class's init args, its
    defaults included. What no config or flag set now takes the new class's default, said in one line;
    what someone wrote still carries over; --print_config shows what trains."""
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1", "--model.init_args.optimizer", "torch.optim.SGD"])
    err = capsys.readouterr().err
    assert "mixer: note: SGD takes its own default weight_decay=0, not 0.01" in err
    assert "--model.init_args.optimizer.init_args.weight_decay" in err
    (run,) = run_dirs("digits_mixer")
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["optimizer"]
    assert saved["class_path"] == "torch.optim.SGD" and saved["init_args"]["weight_decay"] == 0
    # The run's own config trains the same and says nothing: every value in it is written.
    printed = printed_with_notes(capsys, ["fit", "--config", str(run / "config.yaml")])
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["weight_decay"] == 0
    # A value someone wrote carries over (a config's AdamW lr 0.003 into SGD), one given by flag too.
    switched = ["fit", "--config", SW_MLP, "--model.init_args.optimizer", "SGD"]
    optimizer = printed_with_notes(capsys, switched)["model"]["init_args"]["optimizer"]["init_args"]
    assert (optimizer["lr"], optimizer["weight_decay"]) == (0.003, 0) and "not 0.01" in NOTES[-1]
    kept = [*switched, "--model.init_args.optimizer.init_args.weight_decay", "0.01"]
    assert printed_with_notes(capsys, kept)["model"]["init_args"]["optimizer"]["init_args"]["weight_decay"] == 0.01
    assert "mixer: note" not in NOTES[-1]
    # The other way: a config's SGD that sets no weight_decay, AdamW by flag: AdamW's 0.01, not SGD's 0;
    # from a saved config.yaml, which writes weight_decay: 0.0, the 0 carries over as written.
    overlay = tmp_path / "sgd.yaml"
    overlay.write_text(
        "model:\n  init_args:\n    optimizer:\n      class_path: torch.optim.SGD\n      init_args: {lr: 0.02}\n"
    )
    to_adamw = ["--model.optimizer", "torch.optim.AdamW"]
    adamw = printed_with_notes(capsys, ["fit", "--config", TINY, "--config", str(overlay), *to_adamw])
    assert adamw["model"]["init_args"]["optimizer"]["init_args"]["weight_decay"] == 0.01
    assert adamw["model"]["init_args"]["optimizer"]["init_args"]["lr"] == 0.02
    adamw = printed_with_notes(capsys, ["fit", "--config", str(run / "config.yaml"), *to_adamw])
    assert adamw["model"]["init_args"]["optimizer"]["init_args"]["weight_decay"] == 0
    assert "mixer: note" not in NOTES[-1]
