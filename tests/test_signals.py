"""Stops by signal outside the training window (issue 25 RC13): Ctrl+C, SIGTERM or SIGHUP while a run
is set up or checks its validation loop, and a second Ctrl+C, end with one ``mixer:`` line and exit
status 128 + the signal (not Lightning's "Detected KeyboardInterrupt" and status 1); a run stopped
before its first checkpoint leaves no run directory; SIGHUP during training stops as SIGTERM does; a
signal inherited as ignored (``nohup``) stays ignored; ``mixer`` leaves the signal handlers of its
process as it found them. Inside training: tests/test_reliability.py (the resumable stop)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TEST_CONFIGS
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))
QUICK = ["--config", TINY, "--trainer.max_epochs", "2", "--trainer.logger.init_args.name", "sig"]


@pytest.fixture(autouse=True)
def _signals_as_in_a_terminal(signals_as_in_a_terminal: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here as from a terminal (conftest's `signals_as_in_a_terminal`), trusting tests/helpers."""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")


def signal_config(tmp_path: Path, **init_args) -> str:
    path = tmp_path / "signal.yaml"
    callback = {"class_path": "helpers.signaller.SignalAt", "init_args": init_args}
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    return str(path)


def stopped(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The exit status of ``mixer ARGV`` and the last line it printed to stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    return exit_info.value.code, err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "moment, signame, code",
    [
        ("fit_start", "SIGINT", 130),  # the model and data set up, before the sanity check
        ("sanity_check_start", "SIGINT", 130),
        ("fit_start", "SIGHUP", 129),
        ("sanity_check_start", "SIGHUP", 129),
        ("sanity_check_start", "SIGTERM", 143),
    ],
)
def test_a_signal_before_training_is_one_line_and_leaves_no_run(
    moment: str, signame: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    status, last = stopped(
        ["fit", *QUICK, "--config", signal_config(tmp_path, moment=moment, signals=[signame])], capsys
    )
    assert (status, last) == (code, f"mixer: stopped by {signame} before training started (nothing new to resume)")
    assert not Path("runs").exists()  # the run directory claimed for it is removed
    assert {signum: signal.getsignal(signum) for signum in before} == before  # handlers as they were


def test_a_signal_during_test_is_one_line(trained, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = trained("mixer")
    status, last = stopped(
        [
            "test",
            "--config",
            TINY,
            "--ckpt_path",
            ckpt,
            "--config",
            signal_config(tmp_path, moment="test_start", signals=["SIGINT"]),
        ],
        capsys,
    )
    assert (status, last) == (130, "mixer: stopped by SIGINT before its results were written")


def test_a_second_ctrl_c_stops_at_once_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The first Ctrl+C asks for a stop at the next resumable step; the second stops at once, keeping the
    last.ckpt written before (of step 2 here: step 3's is never reached)."""
    status, last = stopped(
        [
            "fit",
            *QUICK,
            "--step_checkpoint.every_n_train_steps",
            "2",
            "--config",
            signal_config(tmp_path, moment="train_batch_end", step=3, signals=["SIGINT", "SIGINT"]),
        ],
        capsys,
    )
    run = Path("runs/sig/version_0")
    assert status == 130
    assert last == (
        f"mixer: stopped at once by SIGINT (Ctrl+C again while stopping); last.ckpt of step 2 kept: "
        f"{run}/checkpoints/last.ckpt; continue with the same command and --ckpt_path last"
    )
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2


class _SignalMidWrite:
    """A checkpoint file that receives a second Ctrl+C in the middle of torch.save's writing, once the run
    is stopping (its `ResumeCheckpoint` handler has had the first): where a CI machine's impatient second
    Ctrl+C fell. torch.save turns the handler's exception into "RuntimeError: ... unexpected pos" with the
    `Interrupted` as its context."""

    def __init__(self, f) -> None:
        self.f, self.writes = f, 0

    def write(self, data) -> int:
        self.writes += 1
        if self.writes == 3:
            handler = signal.getsignal(signal.SIGINT)
            if getattr(getattr(handler, "__self__", None), "_stop_signal", None) is not None:
                signal.raise_signal(signal.SIGINT)
        return self.f.write(data)

    def __getattr__(self, name: str):
        return getattr(self.f, name)


@pytest.mark.parametrize("first_save", [False, True], ids=["a-step-checkpoint-before", "no-checkpoint-before"])
def test_a_second_ctrl_c_while_last_ckpt_is_written_keeps_the_one_before(
    first_save: bool, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second Ctrl+C lands while the stop writes last.ckpt: one line naming the last.ckpt kept (the
    step-2 one, whole: the interrupted write never replaces it) or saying none was saved, exit 130; not
    torch's "RuntimeError: [enforce fail at inline_container.cc] unexpected pos" and exit 1."""
    save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: save(obj, _SignalMidWrite(f), *a, **k))
    every = "5" if first_save else "2"
    status, last = stopped(
        [
            "fit",
            *QUICK,
            "--step_checkpoint.every_n_train_steps",
            every,
            "--config",
            signal_config(tmp_path, moment="train_batch_end", step=3, signals=["SIGINT"]),
        ],
        capsys,
    )
    folder = Path("runs/sig/version_0/checkpoints")
    assert status == 130
    if first_save:
        assert last == "mixer: stopped at once by SIGINT (Ctrl+C again while stopping); no checkpoint saved"
        assert not folder.exists() or not any(folder.iterdir())
    else:
        assert last == (
            f"mixer: stopped at once by SIGINT (Ctrl+C again while stopping); last.ckpt of step 2 kept: "
            f"{folder}/last.ckpt; continue with the same command and --ckpt_path last"
        )
        assert sorted(path.name for path in folder.iterdir()) == ["last.ckpt"]  # no temporary file left
        assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 2


def test_a_second_ctrl_c_before_the_first_checkpoint_leaves_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    status, last = stopped(
        ["fit", *QUICK, "--config", signal_config(tmp_path, moment="train_batch_end", step=1, signals=["SIGINT"] * 2)],
        capsys,
    )
    assert (status, last) == (
        130,
        "mixer: stopped at once by SIGINT (Ctrl+C again while stopping); no checkpoint saved",
    )
    assert not Path("runs").exists()


@pytest.mark.parametrize("first, second, code", [("SIGINT", "SIGINT", 130), ("SIGTERM", "SIGINT", 143)])
def test_a_signal_while_a_stopped_run_is_torn_down_reports_the_saved_stop(
    first: str, second: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A second Ctrl+C that comes after the stop saved last.ckpt, while Lightning tears the run down
    (its DataLoader workers are shut down there): the line is the stop's, with its last.ckpt, not
    "stopped by SIGINT before training started (nothing new to resume)", which a CI machine printed."""
    config = tmp_path / "stopping.yaml"
    callbacks = [
        {"class_path": "helpers.signaller.SignalAt", "init_args": init_args}
        for init_args in (
            {"moment": "train_batch_end", "step": 3, "signals": [first]},
            {"moment": "stopping", "signals": [second]},
        )
    ]
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    status, last = stopped(
        ["fit", *QUICK, "--step_checkpoint.every_n_train_steps", "2", "--config", str(config)], capsys
    )
    run = Path("runs/sig/version_0")
    assert (status, last) == (
        code,
        f"mixer: stopped by {first} at step 3 (epoch 0); last.ckpt saved: {run}/checkpoints/last.ckpt; "
        "continue with the same command and --ckpt_path last",
    )
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3


def test_a_signal_while_a_failed_run_is_torn_down_names_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl+C while a run that failed is torn down (Lightning shuts its loggers and workers down before it
    re-raises): the line says so and names the error, not "stopped by SIGINT before training started",
    the moment the CLI had before training, which hid the failure."""
    config = tmp_path / "failing.yaml"
    callbacks = [
        {
            "class_path": "helpers.killer.KillAt",
            "init_args": {"moment": "train_batch_end", "step": 2, "signal": "CRASH"},
        },
        {"class_path": "helpers.signaller.SignalAt", "init_args": {"moment": "failing", "signals": ["SIGINT"]}},
    ]
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    status, last = stopped(["fit", *QUICK, "--config", str(config)], capsys)
    assert (status, last) == (
        130,
        "mixer: stopped by SIGINT while the run was ending on an error "
        "(Crash: simulated crash (train_batch_end, step 2, epoch -1))",
    )


def test_the_same_stop_signal_twice_is_one_stop_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """SIGTERM twice before the next resumable point (SLURM's scancel signals the job step, srun forwards
    it again) is one stop: one "received" line, not two."""
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                *QUICK,
                "--config",
                signal_config(tmp_path, moment="train_batch_end", step=3, signals=["SIGTERM", "SIGTERM"]),
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 143
    assert err.count("SIGTERM received") == 1, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("mixer: stopped by SIGTERM at step 3 (epoch 0); last.ckpt saved: ")


def test_a_fit_after_one_stopped_at_once_in_the_same_process_stops_on_a_signal_again(tmp_path: Path) -> None:
    """A stop at once leaves later signals ignored while it unwinds (`errors.Interrupted.unwinding`); the
    next fit of the same Python process (a notebook, a script with a plain Trainer) heeds them again."""
    from mixer_lightning.errors import Interrupted
    from mixer_lightning.safety.checkpoints import ResumeCheckpoint

    with pytest.raises(Interrupted):
        raise Interrupted(signal.SIGINT, "stopped at once")
    assert Interrupted.unwinding
    resume = ResumeCheckpoint(dirpath=tmp_path)
    resume._install_handlers()  # as the next fit's training starts
    try:
        resume._on_signal(signal.SIGTERM, None)
    finally:
        resume._restore_handlers()
        Interrupted.unwinding = False
    assert resume._stop_signal == signal.SIGTERM


def test_a_hang_up_during_training_stops_as_sigterm(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A closed terminal stops the run at the next resumable step, with last.ckpt (exit status 129)."""
    status, last = stopped(
        ["fit", *QUICK, "--config", signal_config(tmp_path, moment="train_batch_end", step=3, signals=["SIGHUP"])],
        capsys,
    )
    run = Path("runs/sig/version_0")
    assert (status, last) == (
        129,
        f"mixer: stopped by SIGHUP at step 3 (epoch 0); last.ckpt saved: {run}/checkpoints/last.ckpt; "
        "continue with the same command and --ckpt_path last",
    )
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3


def test_a_signal_inherited_as_ignored_stays_ignored(tmp_path: Path) -> None:
    """``nohup mixer fit ...``: hang-ups before and during training do not stop the run."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    config = tmp_path / "hangups.yaml"
    callbacks = [
        {"class_path": "helpers.signaller.SignalAt", "init_args": {"moment": moment, "signals": ["SIGHUP"], "step": 2}}
        for moment in ("fit_start", "train_batch_end")
    ]
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    main(["fit", *QUICK, "--config", str(config)])
    assert (Path("runs/sig/version_0") / "fit_summary.json").is_file()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


# ------------------------------------------------------------------------------ a real process


def _terminal_like() -> None:
    """As a shell's foreground job: SIGINT and SIGHUP at their default (pytest may run in the background)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGHUP", 129)])
def test_a_real_process_stopped_in_its_sanity_check_is_one_line(signame: str, code: int, tmp_path: Path) -> None:
    """`mixer fit` in its own process group, signalled as a terminal does (the whole group, DataLoader
    workers included) while it checks its validation loop: one line, 128 + signal, no run directory.
    `HoldSanityCheck` holds it there (a fixed wait after its config.yaml let a fast machine finish the
    sanity check and an epoch first)."""
    marker = tmp_path / "sanity_check_started"
    hold = tmp_path / "hold.yaml"
    callback = {"class_path": "helpers.signaller.HoldSanityCheck", "init_args": {"marker": str(marker)}}
    hold.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    fit = subprocess.Popen(
        [MIXER, "fit", *QUICK, "--config", str(hold), "--data.init_args.num_workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        preexec_fn=_terminal_like,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert fit.poll() is None, fit.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(fit.pid, getattr(signal, signame))
    _, err = fit.communicate(timeout=120)
    assert fit.returncode == code, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert (
        err.strip().splitlines()[-1] == f"mixer: stopped by {signame} before training started (nothing new to resume)"
    )
    assert not Path("runs/sig").exists() or not any(Path("runs/sig").iterdir())


def _fit_until_its_first_checkpoint(*flags: str) -> tuple[subprocess.Popen, float]:
    """`mixer fit` (30 epochs, last.ckpt every 3 steps, `flags`) in its own process group as a terminal's
    foreground job, once its first last.ckpt exists; and the monotonic time by which the test gives up."""
    fit = subprocess.Popen(
        [MIXER, "fit", *QUICK, "--trainer.max_epochs", "30", "--step_checkpoint.every_n_train_steps", "3", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_terminal_like,
        start_new_session=True,
    )
    last = Path("runs/sig/version_0/checkpoints/last.ckpt")
    deadline = time.monotonic() + 120
    while not last.exists():
        assert fit.poll() is None, fit.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return fit, deadline


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals, code",
    [(["SIGHUP"], 129), (["SIGINT", "SIGINT"], 130), (["SIGTERM"], 143)],
    ids=["hang-up", "ctrl-c-twice", "scancel"],
)
def test_a_terminal_signal_during_training_with_workers_is_one_line(signals: list[str], code: int) -> None:
    """A terminal's hang-up or Ctrl+C reaches the DataLoader workers with the run, and so does SLURM's
    SIGTERM (scancel, a pre-emption: every process of the job): they leave the stop to the run, which
    ends with one line and 128 + the signal (not "DataLoader worker ... is killed by signal: Hangup" or
    "... exited unexpectedly", exit 1)."""
    fit, _ = _fit_until_its_first_checkpoint("--trainer.limit_train_batches", "40", "--data.init_args.num_workers", "2")
    for signame in signals:
        os.killpg(fit.pid, getattr(signal, signame))
        time.sleep(0.02)
    _, err = fit.communicate(timeout=120)
    assert fit.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("mixer: stopped ")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2], ids=["no-workers", "2-workers"])
def test_ctrl_c_pressed_again_and_again_until_the_process_ends_is_one_line(workers: int) -> None:
    """A user who holds Ctrl+C down: SIGINT to the process group every few milliseconds from the first
    until the process is gone, through the stop, its tear-down and the interpreter's exit. One line, exit
    status 130, no "KeyboardInterrupt" traceback from a signal that came after the line was printed. With
    workers, nothing from them either (a stop that cut a batch's transfer short made a worker print
    "ConnectionResetError": `test_a_worker_whose_batch_transfer_the_run_cuts_short_says_nothing`)."""
    fit, deadline = _fit_until_its_first_checkpoint("--data.init_args.num_workers", str(workers))
    sent = 0
    while fit.poll() is None and time.monotonic() < deadline:
        try:
            os.killpg(fit.pid, signal.SIGINT)
        except ProcessLookupError:  # the group is gone between poll() and killpg()
            break
        sent += 1
        time.sleep(0.003)
    _, err = fit.communicate(timeout=120)
    assert sent >= 2
    assert fit.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("mixer: stopped")] == [err.strip().splitlines()[-1]]


class _SignalDispositions(torch.utils.data.Dataset):
    """What a DataLoader worker does with each stop signal: 1 where it ignores it."""

    NAMES = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([signal.getsignal(getattr(signal, n)) is signal.SIG_IGN for n in self.NAMES])


def test_dataloader_workers_leave_every_stop_signal_to_the_run(tmp_path: Path) -> None:
    """SLURM signals every process of a job step (scancel's SIGTERM, the requeue signal SIGUSR1): torch's
    worker dies of a SIGTERM its parent did not send, and of SIGUSR1's default action, which failed the
    run ("DataLoader worker ... exited unexpectedly") instead of stopping it with last.ckpt. Every loader
    of the data module starts its workers ignoring them (the slow test above signals a real run)."""
    from helpers.fakedata import write_image_folder
    from mixer_lightning.data import ImageDataModule
    from mixer_lightning.data.sampling import leave_stops_to_the_run

    loader = torch.utils.data.DataLoader(_SignalDispositions(), num_workers=1, worker_init_fn=leave_stops_to_the_run)
    assert next(iter(loader)).tolist() == [[True] * 5]
    plain = torch.utils.data.DataLoader(_SignalDispositions(), num_workers=1)
    assert next(iter(plain)).tolist() != [[True] * 5]  # torch's own worker does not
    root = write_image_folder(tmp_path / "images")
    data = ImageDataModule(dataset="folder", root=str(root), image_size=16, num_workers=1, val_split=0.25)
    data.setup("fit")
    for made in (data.train_dataloader(), data.val_dataloader()):
        assert made.num_workers == 1 and made.worker_init_fn is leave_stops_to_the_run


def test_a_process_leaving_a_loader_with_workers_unfinished_still_exits(tmp_path: Path) -> None:
    """The workers ignore SIGTERM (above), which multiprocessing's exit handler sends daemonic children
    before waiting for them: a process that ended with a loader's iterator still alive (a run that failed
    mid-epoch, or was stopped at once) waited for its workers forever. They are now killed at exit,
    without a word from torch's SIGCHLD handler."""
    result = _python_script(
        tmp_path,
        "import torch\n"
        + _a_loader_with_workers("list(range(64)), batch_size=2, num_workers=2")
        + "kept = iter(loader)\n"
        "next(kept)\n"
        "import builtins; builtins.kept = kept  # alive until the interpreter exits\n"
        "print('done', flush=True)\n",
    )
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]
    # and quietly: torch's SIGCHLD handler answered each kill with "DataLoader worker ... is killed by
    # signal: Killed" and a traceback, the tail of a run stopped at once by a second Ctrl+C
    assert "Traceback" not in result.stderr and "killed by signal" not in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # a Python process of its own with a DataLoader worker (~5 s)
def test_a_worker_whose_batch_transfer_the_run_cuts_short_says_nothing(tmp_path: Path) -> None:
    """A stop at once can land while the run fetches a batch's file descriptor from a worker's resource
    sharer (torch's ``file_descriptor`` sharing): the run hangs up mid-transfer, and the worker's sharer
    thread printed a ``ConnectionResetError`` traceback of its own under the run's one stop line (seen
    once in ~12 held-Ctrl+C runs with workers). The run reports the stop; the worker now says nothing.
    Here the run's side is cut deterministically: its fetch connects, hangs up unread and is interrupted."""
    result = _python_script(
        tmp_path,
        "import socket, sys, time, torch\n"
        "from multiprocessing import resource_sharer\n"
        "def cut_short(self):  # the run's fetch of the batch's descriptor, interrupted mid-handshake\n"
        "    hang_up = socket.socket(socket.AF_UNIX)\n"
        "    hang_up.connect(self._id[0])\n"
        "    time.sleep(0.2)  # the worker's challenge arrives, unread: closing now resets the connection\n"
        "    hang_up.close()\n"
        "    raise KeyboardInterrupt\n"
        "resource_sharer.DupFd.detach = cut_short\n"
        + _a_loader_with_workers("[torch.zeros(4)] * 4, batch_size=2, num_workers=1")
        + "batches = iter(loader)\n"
        "try:\n"
        "    next(batches)\n"
        "except KeyboardInterrupt:\n"
        "    print('cut', flush=True)\n"
        "time.sleep(1.0)  # the worker's sharer thread meets the reset connection meanwhile\n",
    )
    assert result.returncode == 0 and result.stdout.strip() == "cut", result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # a Python process of its own with a DataLoader worker (~5 s)
def test_a_worker_stuck_in_a_read_ends_when_the_run_is_killed(tmp_path: Path) -> None:
    """A run killed outright (SIGKILL: the OOM killer, a hung run killed by hand) cannot stop its workers;
    torch's worker notices its parent is gone only between batches, so one stuck in a slow read (a hung
    network file system) outlived the run, holding its memory (an orphaned worker was seen after a hung
    run was killed). Each worker now ends within a second or so of its run."""
    stuck = tmp_path / "stuck"
    script = tmp_path / "stuck.py"
    script.write_text(
        "import os, sys, time, torch\n"
        "class Stuck(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n"
        "        return 4\n"
        "    def __getitem__(self, index):\n"
        f"        open({str(stuck)!r}, 'w').write(str(os.getpid()))\n"
        "        time.sleep(300)  # a read that never returns\n"
        + _a_loader_with_workers("Stuck(), num_workers=1")
        + "next(iter(loader))\n"
    )
    run = subprocess.Popen([sys.executable, str(script)])  # no pipes: a live worker would hold them open
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not (stuck.exists() and stuck.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(stuck.read_text())
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its killed run"
    finally:
        run.kill()
        run.wait(timeout=30)
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (an orphan's zombie is reaped by init at once: it counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def _python_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """`source` run as a Python script of its own, its output captured."""
    script = tmp_path / "script.py"
    script.write_text(source)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)


def _a_loader_with_workers(arguments: str) -> str:
    """A script's lines that make ``loader``: a DataLoader of `arguments` whose workers start as the data
    module's do (`leave_stops_to_the_run`)."""
    return (
        "from mixer_lightning.data.sampling import leave_stops_to_the_run\n"
        f"loader = torch.utils.data.DataLoader({arguments}, worker_init_fn=leave_stops_to_the_run)\n"
    )
