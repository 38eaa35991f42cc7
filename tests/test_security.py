"""Nothing runs code named in a file: a checkpoint is data, a config names only trusted classes.

A plain-data checkpoint passes ``torch.load(weights_only=True)``; the classes it names (its network's
``class_path``, an optimiser's) must lie in trusted packages before anything imports them. Each entry point that reads a name from a file is driven through the real ``mixer``
command with a hostile file; the shell command it carries must not run, and the refusal is one line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS, error_field
from mixer_lightning.cli import main

PWNED = "pwned.txt"


def hostile_checkpoint(path: Path, **hparams) -> str:
    """A plain-data checkpoint (it passes weights_only=True) whose module class is `os.system`."""
    hparams = hparams or {"_class_path": "os.system", "command": f"id > {PWNED}"}
    torch.save({"state_dict": {}, "hyper_parameters": hparams, "pytorch-lightning_version": "2.6.0"}, path)
    assert torch.load(path, weights_only=True)["hyper_parameters"] == hparams  # the unpickler lets it through
    return str(path)


def refused(capsys, args: list[str]) -> str:
    """The field of the one-line refusal (exit status 2) of `mixer args`; nothing the file names ran."""
    field = error_field(capsys, args)
    assert not Path(PWNED).exists(), "the checkpoint's command ran"
    return field


DATA = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.mark.parametrize(
    "command",
    [
        ["cka", "--ckpt", "{ckpt}", "--ckpt", "{ckpt}", "--config", DATA],
        ["visualize", "--ckpt", "{ckpt}", "--out", "pictures"],
        ["fewshot", "--ckpt", "{ckpt}", "--config", DATA],
        ["test", "--config", DATA, "--ckpt_path", "{ckpt}"],
        ["fit", "--config", DATA, "--ckpt_path", "{ckpt}", "--trainer.max_epochs", "1"],
        ["fit", "--config", DATA, "--model.init_from", "{ckpt}", "--trainer.fast_dev_run", "true"],
        ["convert", "--from", "{ckpt}", "--model", "mixer_s16", "--out", "converted.ckpt"],
    ],
    ids=["cka", "visualize", "fewshot", "test", "fit-resume", "init_from", "convert"],
)
def test_a_checkpoint_naming_os_system_is_refused_and_runs_nothing(command, tmp_path, capsys) -> None:
    ckpt = hostile_checkpoint(tmp_path / "hostile.ckpt")
    field = refused(capsys, [a.replace("{ckpt}", ckpt) for a in command])
    assert field.lstrip("-") in ("ckpt", "ckpt_path", "model.init_from", "from")
    assert not Path("converted.ckpt").exists() and not Path("pictures").exists()


def test_a_class_path_nested_in_hyper_parameters_is_refused(tmp_path, capsys) -> None:
    ckpt = hostile_checkpoint(
        tmp_path / "nested.ckpt",
        net={"class_path": "mixer_lightning.models.MLPMixer", "init_args": {}},
        optimizer={"class_path": "subprocess.Popen", "init_args": {"args": ["id"]}},
    )
    assert refused(capsys, ["test", "--config", DATA, "--ckpt_path", ckpt]) == "ckpt_path"


def test_a_config_naming_an_untrusted_class_is_refused_before_import(tmp_path, capsys, monkeypatch) -> None:
    config = yaml.safe_load(Path(DATA).read_text())
    config["trainer"] = {"callbacks": [{"class_path": "os.system", "init_args": {"command": f"id > {PWNED}"}}]}
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(yaml.safe_dump(config))
    assert refused(capsys, ["fit", "--config", str(hostile), "--trainer.fast_dev_run", "true"]).startswith("trainer")
    # The same file read by the project's own commands (sweep manifests, analysis configs).
    refused(capsys, ["sweep", "--config", str(hostile), "--omega", "2**10", "--emit", "sweep"])
    assert not Path("sweep").exists()
    # A package the user trusts explicitly is let through to jsonargparse (which then checks the type).
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "os")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(hostile), "--trainer.fast_dev_run", "true"])
    assert exit_info.value.code != 0 and not Path(PWNED).exists()  # os.system is not a Callback


def test_a_pickle_refused_by_torch_says_it_was_refused_for_safety(tmp_path, capsys) -> None:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"id > {PWNED}",))

    path = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": Payload()}}, path)
    assert refused(capsys, ["test", "--config", DATA, "--ckpt_path", str(path)]) == "ckpt_path"
    assert refused(capsys, ["cka", "--ckpt", str(path), "--ckpt", str(path), "--config", DATA]) == "ckpt"


def test_a_text_file_given_as_a_checkpoint_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "notes.ckpt"
    path.write_text("hello world\n")
    assert refused(capsys, ["test", "--config", DATA, "--ckpt_path", str(path)]) == "ckpt_path"
    assert refused(capsys, ["fewshot", "--ckpt", str(path), "--config", DATA]) == "ckpt"


# --- Second red-team round: every string jsonargparse would import is checked, however it arrives ---

ZEN = "this.Zen"  # importing Python's `this` prints the Zen of Python: an import with a visible effect


def assert_this_not_imported(capsys_output: str) -> None:
    import sys

    assert "this" not in sys.modules, "the config's module was imported"
    assert "Zen of Python" not in capsys_output


@pytest.fixture
def no_this():
    import sys

    sys.modules.pop("this", None)
    yield
    sys.modules.pop("this", None)


@pytest.mark.parametrize(
    "files",
    [
        {"c.txt": {"trainer": {"callbacks": [ZEN]}}},  # a bare dotted name, in a file not named .yaml
        {"c.YAML": {"trainer": {"callbacks": [{"class_path": ZEN}]}}},
        {"c": {"trainer": {"callbacks": [ZEN]}}},  # no extension
        {"c.yaml": {"data": "dm.txt"}, "dm.txt": {"class_path": ZEN}},  # a file named inside a config
        {"c.yaml": {"trainer": {"callbacks": ["cb.yaml"]}}, "cb.yaml": {"class_path": ZEN}},
        {"c.yaml": {"model": {"optimizer": ZEN}}},  # a callable
    ],
    ids=["bare-name-txt", "upper-YAML", "no-extension", "nested-data-file", "nested-callback-file", "callable"],
)
def test_a_name_to_import_is_refused_in_any_file_and_position(files, tmp_path, capsys, no_this) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(content))
    first = next(iter(files))
    refused(capsys, ["fit", "--config", DATA, "--config", first, "--trainer.fast_dev_run", "true"])
    assert_this_not_imported(capsys.readouterr().out)
    assert not Path("runs").exists()


def test_a_name_on_the_command_line_is_refused(tmp_path, capsys, no_this) -> None:
    assert refused(capsys, ["fit", "--config", DATA, "--trainer.callbacks", ZEN, "--trainer.fast_dev_run", "true"])
    assert_this_not_imported(capsys.readouterr().out)


def test_a_trusted_package_cannot_reach_an_untrusted_object_through_an_attribute(tmp_path, capsys) -> None:
    # torch.os is the os module: the policy checks where the object really lives (posix.system).
    hostile = tmp_path / "c.yaml"
    hostile.write_text(yaml.safe_dump({"model": {"optimizer": "torch.os.system"}}))
    assert refused(capsys, ["fit", "--config", DATA, "--config", str(hostile), "--trainer.fast_dev_run", "true"])


def test_a_run_s_saved_config_is_checked_before_test_imports_from_it(trained, tmp_path, capsys, no_this) -> None:
    import shutil

    run = Path(trained("mixer")).parent.parent
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["trainer"]["callbacks"] = [ZEN]
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    refused(capsys, ["test", "--ckpt_path", str(copy / "checkpoints" / "last.ckpt")])
    assert_this_not_imported(capsys.readouterr().out)
    assert not (copy / "test_metrics.json").exists()


def test_a_sweep_manifest_naming_a_text_config_is_checked(tmp_path, capfd, no_this) -> None:
    """(capfd: the point's fit is a `mixer` process of its own, which refuses the config on its stderr.)"""
    sweep = tmp_path / "sweep"
    (sweep / "configs").mkdir(parents=True)  # a manifest's configs lie in the sweep's configs/ (or are refused)
    (sweep / "configs" / "x.txt").write_text(yaml.safe_dump({"trainer": {"callbacks": [ZEN]}}))
    run = {
        "name": "a",
        "seed": 0,
        "config": str(sweep / "configs" / "x.txt"),
        "run_dir": str(sweep / "runs" / "a" / "seed0"),
    }
    (sweep / "sweep.json").write_text(json.dumps({"version": 2, "runs": [run]}))
    assert refused(capfd, ["sweep", "point", str(sweep), "a"]) == "trainer.callbacks"
    assert_this_not_imported(capfd.readouterr().out)


def test_a_package_trusted_earlier_in_the_process_is_not_trusted_later(tmp_path, capsys, monkeypatch) -> None:
    hostile = tmp_path / "c.yaml"
    hostile.write_text(yaml.safe_dump({"model": {"optimizer": "os.system"}}))
    args = ["fit", "--config", DATA, "--config", str(hostile), "--trainer.fast_dev_run", "true"]
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "os,posix")
    with pytest.raises(SystemExit):
        main(args)  # trusted: jsonargparse may import it (then it fails as an optimiser, or not at all)
    capsys.readouterr()
    monkeypatch.delenv("MIXER_TRUSTED_MODULES")
    refused(capsys, args)


def test_parallel_sweep_children_never_import_from_the_working_directory(tmp_path, capsys) -> None:
    # A module in the working directory named like a package the children import: `python -m` (what
    # the children were started with) puts the working directory first on sys.path and runs it.
    (tmp_path / "yaml.py").write_text(f"open({PWNED!r}, 'w').write('ran')\nraise SystemExit('shadowed')\n")
    sweep = tmp_path / "sweep"
    (sweep / "configs").mkdir(parents=True)  # a manifest's configs lie in the sweep's configs/ (or are refused)
    config = sweep / "configs" / "digits_mixer.yaml"
    config.write_text((TEST_CONFIGS / "digits_mixer.yaml").read_text())
    runs = []
    for name in ("a", "b"):
        run_dir = sweep / "runs" / name / "seed0"
        (run_dir).mkdir(parents=True)
        # finished: the child only has to start and say so
        (run_dir / "test_metrics.json").write_text('{"test/acc1": 0.5}')
        runs.append({"name": name, "seed": 0, "config": str(config), "run_dir": str(run_dir)})
    (sweep / "sweep.json").write_text(json.dumps({"version": 2, "runs": runs}))
    from mixer_lightning.commands.sweep.parallel import run_points_in_parallel

    failed = run_points_in_parallel(sweep, runs, parallel=2, log=lambda line: None)
    assert not Path(PWNED).exists(), "a child imported yaml.py from the working directory"
    assert failed == []
