"""Inputs read within bounds (issue 25, RC15 and RC16): YAML alias bombs and deep nesting, FIFOs named
anywhere an input is read, over-long values, and what error lines may echo, each answered by one line
naming the field, at once. Every case that used to hang runs under an alarm (`no_hang`), so that a
regression fails here instead of hanging the test run."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import CONFIGS, TEST_CONFIGS, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
# Nine anchors of nine aliases each: 459 bytes that PyYAML parses in a millisecond into 9^9 shared
# references; walking, copying or printing the tree expands them (an 8-level file: four CPU-minutes).
BOMB = "\n".join(
    [
        'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)),
        "trainer: {max_epochs: *a8}",
    ]
)
DEEP = "x: " + "[" * 100_000  # PyYAML recursed once per level: a 3,000-line RecursionError after 18 s


class Hung(BaseException):
    """Raised by the alarm of `no_hang` (a BaseException: ``mixer`` translates Exceptions)."""


@contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """Fail, instead of waiting forever, when the block outlives `seconds` (a FIFO's open blocks in the
    kernel; SIGALRM interrupts it). Generous: each case answers in about a second on a busy machine."""

    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused(argv: list[str], capsys: pytest.CaptureFixture, code: int = 2) -> str:
    """The one line ``mixer`` prints for `argv` (run under `no_hang`), after checking it exits with `code`."""
    capsys.readouterr()
    with no_hang(), pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err[-5:]
    assert len(err[0]) <= 300, err[0]
    return err[0]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """The bomb, the deep file, a FIFO, and configs that name each of them (relative to the config's
    folder, as jsonargparse reads them)."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "bomb.yaml").write_text(BOMB + "\n")
    (folder / "deep.yaml").write_text(DEEP + "\n")
    os.mkfifo(folder / "fifo")
    for name, named in (("names_bomb", "bomb.yaml"), ("names_deep", "deep.yaml"), ("names_fifo", "fifo")):
        (folder / f"{name}.yaml").write_text(f"data: {named}\n")
    (folder / "names_fifo_deeper.yaml").write_text("trainer:\n  callbacks:\n    - names_fifo.yaml\n")
    return {path.stem: str(path) for path in folder.iterdir()}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "{bomb}"], "config: '{bomb}' expands to 9.3e+08 values through YAML aliases, refused"),
        (["--config", "{deep}"], "config: '{deep}' nests deeper than 100 levels, refused"),
        (["--config", "{names_bomb}"], "data: '{bomb}' expands to 9.3e+08 values through YAML aliases"),
        (["--config", "{names_deep}"], "data: '{deep}' nests deeper than 100 levels"),
        (["--data", "{bomb}"], "data: '{bomb}' expands to 9.3e+08 values"),
        (["--trainer.callbacks", BOMB], "trainer.callbacks: the value expands to 9.3e+08 values through YAML aliases"),
        (["--trainer.callbacks", DEEP], "trainer.callbacks: the value nests deeper than 100 levels"),
    ],
    ids=["config", "deep-config", "named-in-config", "deep-named-in-config", "group-file", "flag", "deep-flag"],
)
def test_yaml_alias_bombs_and_deep_nesting_are_refused_in_one_line(
    argv: list[str], message: str, inputs: dict[str, str], capsys: pytest.CaptureFixture
) -> None:
    """As a config, as a file named inside one, as a group's file, as a flag value: refused from the
    parsed node graph before anything expands it (it took minutes, or a 3,000-line RecursionError)."""
    filled = [arg if arg in (BOMB, DEEP) else arg.format(**inputs) for arg in argv]
    line = refused(["fit", "--config", TINY, *filled], capsys)
    assert line.startswith("mixer: error: " + message.format(**inputs)), line
    assert not Path("runs").exists()  # nothing written


def test_jsonargparse_reads_yaml_within_bounds_too(
    inputs: dict[str, str], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files and values that the early check does not read (here: none, it is switched off) are
    bounded where jsonargparse loads them (`mixer_lightning.safety.config_files.install_bounded_yaml_loader`)."""
    from mixer_lightning.cli import arguments

    monkeypatch.setattr(arguments, "NESTED_FILES_DEPTH", 0)
    monkeypatch.setattr(arguments, "yaml_bounds_problem", lambda text: None)
    line = refused(["fit", "--config", TINY, "--config", inputs["names_bomb"]], capsys)
    expected = f"mixer: error: config: a YAML value of {len(BOMB) + 1} characters expands to 9.3e+08 values"
    assert line.startswith(expected), line
    line = refused(["fit", "--config", TINY, "--trainer.callbacks", DEEP], capsys)
    assert line.startswith("mixer: error: config: a YAML value of 100,003 characters nests deeper than 100 levels")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-c", "{fifo}"], "config: '{fifo}' is a FIFO (not a regular file); give the path of a YAML file"),
        (["--config", TINY, "--data", "{fifo}"], "data: '{fifo}' is a FIFO (not a regular file)"),
        (["--config", TINY, "--model", "{fifo}"], "model: '{fifo}' is a FIFO (not a regular file)"),
        (["--config", TINY, "--trainer.callbacks", "{fifo}"], "trainer.callbacks: '{fifo}' is a FIFO"),
        (["--config", TINY, "--config", "{names_fifo}"], "data: 'fifo' (named in '{names_fifo}') is a FIFO"),
        (
            ["--config", TINY, "--config", "{names_fifo_deeper}"],
            "trainer.callbacks[0].data: 'fifo' (named in '{names_fifo}') is a FIFO",
        ),
        (["--config", TINY, "--ckpt_path", "{fifo}"], "ckpt_path: '{fifo}' is a FIFO"),
    ],
    ids=["-c", "data", "model", "callbacks", "named-in-config", "named-two-files-deep", "ckpt_path"],
)
def test_a_fifo_named_as_an_input_is_refused_instead_of_read(
    argv: list[str], message: str, inputs: dict[str, str], capsys: pytest.CaptureFixture
) -> None:
    """jsonargparse opens any existing file given to a group or a class-typed option, or named inside a
    config, FIFOs included: it waited for a writer forever (``-c FIFO`` was already refused)."""
    line = refused(["fit", *[arg.format(**inputs) for arg in argv]], capsys)
    assert line.startswith("mixer: error: " + message.format(**inputs)), line


def test_a_config_that_is_a_fifo_or_a_folder_says_so(inputs: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    """The project's own config reader (sweeps, analysis commands) said "no such file"."""
    line = refused(["bench", "--config", inputs["fifo"]], capsys)
    assert line.startswith(f"mixer: error: config: '{inputs['fifo']}' is a FIFO (not a regular file)"), line
    line = refused(["bench", "--config", str(Path(inputs["fifo"]).parent)], capsys)
    assert line.startswith(f"mixer: error: config: '{Path(inputs['fifo']).parent}' is a folder"), line


def test_a_device_as_the_images_to_predict_says_what_it_is(capsys: pytest.CaptureFixture) -> None:
    """/dev/zero was "no such file or folder"; read as an image it would never end."""
    line = refused(["predict", "--config", TINY, "--data.predict_root", "/dev/zero"], capsys)
    assert line.startswith("mixer: error: data.predict_root: '/dev/zero' is a character device"), line
    from mixer_lightning.data.predict import list_images  # the same for a predict_root set in code

    with pytest.raises(Exception, match="'/dev/zero' is a character device, not an image file or a folder"):
        list_images(["/dev/zero"])


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--config", TINY, "--trainer.max_epochs", "x" * 5000],
        ["fit", "--config", TINY, "--ckpt_path", "x" * 300],
        ["test", "--ckpt_path", "x" * 300],
        ["predict", "--config", TINY, "--data.predict_root", "x" * 300],
        ["fit", "--config", TINY, "--" + "x" * 300, "1"],
        ["width", "--omega", "2**10", "--plot", "x" * 300 + ".png"],
    ],
    ids=["int-flag", "fit-ckpt_path", "test-ckpt_path", "predict_root", "option-name", "output"],
)
def test_a_value_longer_than_a_file_name_is_one_short_line(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    """A path component over 255 bytes raised ENAMETOOLONG from pathlib's checks: a 20-line traceback,
    or a line echoing all 5,000 characters. Now the value is cut to ~80 characters."""
    line = refused(argv, capsys)
    assert "x" * 81 not in line and "characters" in line, line


def test_argument_errors_echo_neither_a_file_nor_a_parsed_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A class option given a text file echoed the whole file (1,300 characters for /etc/passwd), and a
    nested value ended with jsonargparse's "Got value: Namespace(class_path=...)" dump."""
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"user{i}:x:{i}:{i}:private:/home/user{i}:/bin/sh\n" for i in range(24)))  # as /etc/passwd
    line = refused(["fit", "--config", TINY, "--model", str(notes)], capsys)
    assert line.startswith(
        "mixer: error: model: expected ClassifierModule or null, got the content of a file (24 lines)"
    )
    assert "private" not in line
    line = refused(["fit", "--config", TINY, "--model.optimizer.lr", "nan"], capsys)
    assert line.startswith("mixer: error: model.optimizer.") and "Namespace(" not in line and "NestedArg" not in line


@pytest.mark.parametrize(
    "code, message",
    [
        (errno.EISDIR, "path: 'out/w.json' is a folder, where a file belongs"),
        (errno.ENOTDIR, "path: 'out/w.json' goes through a file as if it were a folder"),
        (errno.EACCES, "path: 'out/w.json' cannot be accessed: permission denied"),
        (errno.EROFS, "path: 'out/w.json' lies on a read-only file system"),
        (errno.ENAMETOOLONG, "path: 'out/w.json' has a name longer than the file system allows"),
    ],
    ids=["EISDIR", "ENOTDIR", "EACCES", "EROFS", "ENAMETOOLONG"],
)
def test_an_os_error_on_a_named_file_is_one_line(
    code: int, message: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Errors of the file system on a file the command names (a folder where a file belongs, no
    permission, a read-only disk) were tracebacks wherever no writer translated them."""
    from mixer_lightning.commands import width

    def fail(args):
        raise OSError(code, os.strerror(code), "out/w.json")

    monkeypatch.setattr(width, "run", fail)
    line = refused(["width", "--omega", "2**10"], capsys)
    assert line.startswith("mixer: error: " + message), line


def test_metrics_csv_replaced_by_a_folder_is_one_line_on_resume(capsys: pytest.CaptureFixture) -> None:
    """The CSV logger appends to a resumed run's metrics.csv; a folder there was 110 lines of two chained
    IsADirectoryError tracebacks."""
    csv_overlay = str(CONFIGS / "logger" / "csv.yaml")
    main(["fit", "--config", TINY, "--config", csv_overlay, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    (run / "metrics.csv").unlink()
    (run / "metrics.csv").mkdir()
    line = refused(
        ["fit", "--config", TINY, "--config", csv_overlay, "--trainer.max_epochs", "2", "--ckpt_path", "last"], capsys
    )
    assert line.startswith(f"mixer: error: trainer.logger: '{run / 'metrics.csv'}' is not a file"), line
    assert (run / "checkpoints" / "last.ckpt").is_file()  # nothing already written is lost


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_logger_thread_failing_on_a_full_disk_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorBoard writes its events from a thread: on a full disk that thread printed "Exception in
    thread ... Traceback" before the main thread's one line (under pytest, whose own hook catches it:
    a warning, and no line). Now: one warning line, then the main thread's error."""
    from tensorboard.summary.writer import record_writer

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/events.out.tfevents")

    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    capsys.readouterr()
    with no_hang(), pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("mixer:")]
    assert len(lines) == 2, lines
    assert lines[0].startswith("mixer: warning: ") and "stopped: disk: no space left on the device" in lines[0]
    assert lines[1].startswith("mixer: error: disk: no space left on the device"), lines
