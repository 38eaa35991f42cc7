"""The resumable stop on SIGTERM (`mixer_lightning.callbacks.checkpoints.ResumeCheckpoint`): the run stops at
the next point it resumes exactly from, with last.ckpt of that point and exit status 143; the same signal
twice is one stop; the handlers of the process are as they were after a fit; DataLoader workers leave the
stop to the run. Resuming such a stop bit for bit: tests/test_reliability.py and the slow tests here."""

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
from mixer_lightning.callbacks.checkpoints import POSITION_KEY
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")  # 4 training batches an epoch
MIXER = str(Path(sys.executable).with_name("mixer"))
QUICK = ["--config", TINY, "--trainer.max_epochs", "2", "--trainer.logger.init_args.name", "sig"]
LAST = Path("runs/sig/version_0/checkpoints/last.ckpt")


@pytest.fixture(autouse=True)
def _trust_test_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")


def signal_config(tmp_path: Path, **init_args) -> str:
    path = tmp_path / "signal.yaml"
    callback = {"class_path": "helpers.signaller.SignalAt", "init_args": init_args}
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    return str(path)


def stopped(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The exit status of ``mixer ARGV`` and what it printed to stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    return exit_info.value.code, err


def test_the_same_stop_signal_twice_is_one_stop(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """SIGTERM twice before the next resumable point (SLURM's scancel signals the job step, srun forwards it
    again) is one stop at step 3, saying so once; the process's SIGTERM handler is the one it had before."""
    before = signal.getsignal(signal.SIGTERM)
    config = signal_config(tmp_path, moment="train_batch_end", step=3, signals=["SIGTERM", "SIGTERM"])
    status, err = stopped(["fit", *QUICK, "--config", config], capsys)
    assert status == 128 + signal.SIGTERM
    assert sum("received" in line for line in err.splitlines()) == 1, err[-2000:]
    assert "at step 3 (epoch 1)" in err  # epochs counted from 1, as the progress lines count them
    assert torch.load(LAST, weights_only=True)["global_step"] == 3
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_stop_after_the_epochs_last_batch_waits_for_the_epoch_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """After an epoch's last batch the run is not resumable until the epoch's validation and figures are
    done: the stop saves last.ckpt as the next epoch starts (step 4), marked as an epoch boundary."""
    config = signal_config(tmp_path, moment="train_batch_end", step=4, signals=["SIGTERM"])
    status, err = stopped(["fit", *QUICK, "--config", config], capsys)
    assert status == 128 + signal.SIGTERM and "after epoch 1, at step 4" in err  # epochs counted from 1
    checkpoint = torch.load(LAST, weights_only=True)
    assert checkpoint["global_step"] == 4 and checkpoint[POSITION_KEY] == "epoch_boundary"
    assert checkpoint["loops"]["fit_loop"]["epoch_progress"]["total"]["completed"] == 1


@pytest.mark.slow
def test_scancel_reaches_the_workers_and_the_run_stops_with_last_ckpt() -> None:
    """SLURM's SIGTERM (scancel, a pre-emption) reaches every process of the job, DataLoader workers
    included: they leave the stop to the run, which saves last.ckpt and exits with 143 (not "DataLoader
    worker ... exited unexpectedly", exit 1)."""
    fit = subprocess.Popen(
        [MIXER, "fit", *QUICK, "--trainer.max_epochs", "30", "--step_checkpoint.every_n_train_steps", "3"]
        + ["--trainer.limit_train_batches", "40", "--data.init_args.num_workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not LAST.exists():
        assert fit.poll() is None, fit.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(fit.pid, signal.SIGTERM)
    _, err = fit.communicate(timeout=120)
    assert fit.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert torch.load(LAST, weights_only=True)["global_step"] > 0


class _SignalDispositions(torch.utils.data.Dataset):
    """What a DataLoader worker does with each stop signal: 1 where it ignores it."""

    NAMES = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")

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
    assert next(iter(loader)).tolist() == [[True] * 4]
    plain = torch.utils.data.DataLoader(_SignalDispositions(), num_workers=1)
    assert next(iter(plain)).tolist() != [[True] * 4]  # torch's own worker does not
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
