"""Start-up (issue 26): ``mixer COMMAND --help`` and a misspelt flag are answered from the parser cache
(`mixer_lightning.cli.parser_cache`) without importing Lightning, with exactly the full parser's
answer, and never from a cache that another version of the code or the libraries wrote.
The times themselves are measured by ``benchmarks/startup.sh`` (benchmarks/RESULTS.md), not here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mixer_lightning.cli import lightning as lightning_cli
from mixer_lightning.cli import main, parser_cache

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
MISSPELT = [
    ["fit", "--config", QUICKSTART, "--trainer.max_epoch", "3"],
    ["fit", "--config", QUICKSTART, "--dataa.batch_size", "8"],
    ["fit", "--config", QUICKSTART, "--checkpoint.monitr", "val/acc5"],
    ["fit", "--config", QUICKSTART, "--trainer.max_epochs", "2", "--seed_everythin", "1"],
    ["test", "--config", QUICKSTART, "--trainer.limit_test_batche", "2"],
]


class FullParser(Exception):
    """Raised by the stand-in for the full parser: the cache did not answer."""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MIXER_CACHE_DIR", str(folder))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("MIXER_NO_PARSER_CACHE", raising=False)
    return folder


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | None, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _without_full_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(argv: list[str]) -> None:
        raise FullParser(argv)

    monkeypatch.setattr(lightning_cli, "run", refuse)


def _console(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``mixer ARGS`` as the console script runs it (`main()` reading sys.argv), imports timed."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mixer_lightning.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_cached_help_is_the_full_parsers_and_imports_no_lightning(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "MIXER_CACHE_DIR": str(cache_dir), "COLUMNS": "100"}
    full = _console(["fit", "--help"], env)  # the full parser (empty cache); it fills the cache
    assert full.returncode == 0, full.stderr[-2000:]
    # Complete although the console script ends without the interpreter's teardown (flushed first):
    # it ends as the help of an in-process full parser does.
    in_process = _run(["fit", "--help"], capsys)
    assert in_process[0] == 0 and in_process[1].splitlines()[-4:] == full.stdout.splitlines()[-4:]
    assert "lightning.pytorch" in full.stderr  # (-X importtime: what it imported)
    Path("runs").mkdir()  # the working directory (sys.path[0] of `python -m`) changes: still a hit
    cached = _console(["fit", "--help"], env)
    assert cached.returncode == 0, cached.stderr[-2000:]
    assert cached.stdout == full.stdout  # byte for byte
    imported = {line.rsplit("|", 1)[-1].strip() for line in cached.stderr.splitlines() if "|" in line}
    assert not {"lightning", "torch", "torchmetrics"} & imported, sorted({"lightning", "torch"} & imported)
    # Another terminal width is another help text: the full parser again.
    narrow = _console(["fit", "--help"], {**env, "COLUMNS": "80"})
    assert narrow.stdout != full.stdout and "lightning.pytorch" in narrow.stderr


@pytest.mark.parametrize("args", MISSPELT, ids=lambda args: f"{args[0]}-{args[-2]}")
def test_misspelt_flag_answered_from_the_cache_as_the_full_parser(
    args: list[str], cache_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    full = _run(args, capsys)  # empty cache: the full parser answers and fills the cache
    assert full[0] == 2 and "did you mean" in full[2], full
    assert list(cache_dir.glob("cli/parser-*.json"))
    _without_full_parser(monkeypatch)
    assert _run(args, capsys) == full  # the same line, the same status, no parser built
    assert not Path("runs").exists()  # nothing written


@pytest.mark.parametrize(
    "tail",
    [
        ["--model.chanels", "3"],  # a class's argument: the full parser knows the class's signature
        ["--trainer.max_epoch=3"],  # flags with "=" are named their own way by jsonargparse
        ["--no_such_thing", "1"],  # nothing close: the full parser's own message
        ["--trainer.max_epoch", "3", "--print_config"],
        ["--trainer.callbacks+", "LearningRateMonitor"],
    ],
)
def test_what_the_cache_does_not_certainly_know_goes_to_the_full_parser(
    tail: list[str], cache_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(MISSPELT[0], capsys)  # fills the cache
    _without_full_parser(monkeypatch)
    with pytest.raises(FullParser):
        main(["fit", "--config", QUICKSTART, *tail])
    # A config file that does not read: the full parser says so, not a did-you-mean.
    broken = Path("broken.yaml")
    broken.write_text("model: [unclosed\n")
    with pytest.raises(FullParser):
        main(["fit", "--config", str(broken), "--trainer.max_epoch", "3"])
    # validate/test/predict completed from a checkpoint's run: the full parser reads it first.
    with pytest.raises(FullParser):
        main(["test", "--ckpt_path", "missing.ckpt", "--trainer.max_epoch", "3"])


def test_changed_source_or_library_version_misses(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fingerprint hashes the package's sources: point it at a copy that this test may edit.
    copy = tmp_path / "package"
    shutil.copytree(parser_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(parser_cache, "PACKAGE", copy)
    args = MISSPELT[0]
    full = _run(args, capsys)
    real_run = lightning_cli.run
    _without_full_parser(monkeypatch)
    assert _run(args, capsys) == full  # a hit
    # An edited source file (same size, same modification time: only its content differs).
    source = copy / "cli" / "suggestions.py"
    text, stat = source.read_text(), source.stat()
    source.write_text(text.replace("did you mean", "did you meaN"))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(FullParser):
        main(args)
    source.write_text(text)
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _run(args, capsys) == full  # the original code: its cache again
    # Another installed version of a library that makes the parser.
    import importlib.metadata

    installed = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9" if name == "lightning" else installed(name))
    with pytest.raises(FullParser):
        main(args)
    monkeypatch.setattr(importlib.metadata, "version", installed)
    # A setting of jsonargparse or Lightning read from the environment.
    monkeypatch.setenv("JSONARGPARSE_DEFAULT_ENV", "true")
    with pytest.raises(FullParser):
        main(args)
    monkeypatch.delenv("JSONARGPARSE_DEFAULT_ENV")
    monkeypatch.setattr(lightning_cli, "run", real_run)
    assert _run(args, capsys) == full


def test_corrupt_cache_is_ignored_and_replaced(
    cache_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = MISSPELT[0]
    full = _run(args, capsys)
    (path,) = cache_dir.glob("cli/parser-*.json")
    for damaged in ('{"format": 1, "parsers": {"fit": {"options": 3}}}', '{"format": 1, "pars', "\0\0\0"):
        path.write_text(damaged)
        assert _run(args, capsys) == full  # the full parser (the damaged file is not read as a cache)
        assert json.loads(path.read_text())["parsers"]["fit"]["options"]  # and it was written anew


def test_console_exits_complete_after_print_config_and_errors(cache_dir: Path) -> None:
    # The console script skips the interpreter's teardown after --print_config and argument errors:
    # its output is still complete (flushed), its status the usual one.
    env = {**os.environ, "MIXER_CACHE_DIR": str(cache_dir), "MIXER_NO_PARSER_CACHE": "1"}
    printed = _console(["fit", "--config", QUICKSTART, "--print_config"], env)
    assert printed.returncode == 0, printed.stderr[-2000:]
    import yaml

    config = yaml.safe_load(printed.stdout)
    assert config["model"]["init_args"]["channels"] == 64 and "trainer" in config
    misspelt = _console(MISSPELT[0][:1] + MISSPELT[0][1:], env)
    assert misspelt.returncode == 2
    assert misspelt.stderr.rstrip().endswith(
        "mixer: error: trainer.max_epoch: no such option; did you mean 'trainer.max_epochs'? see `mixer fit --help`"
    )
