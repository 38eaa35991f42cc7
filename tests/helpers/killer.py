"""Test callbacks that send their own process a signal at a reproducible moment of training.

`KillAtStep` SIGKILLs (the realistic end of a pre-empted or OOM-killed run: no cleanup, no exception
handlers) after optimiser step `step`; `KillAt` sends any signal at a named moment: after a training
step, in the middle of an epoch's validation, or as an epoch starts. ``signal: CRASH`` raises an
exception there instead, for in-process tests (the process goes on; the checkpoints on disk are
what a SIGKILL would leave).

Test configs name these classes; the tests trust the package (``MIXER_TRUSTED_MODULES=helpers``).
"""

from __future__ import annotations

import os
import signal

from lightning.pytorch import Callback


class KillAt(Callback):
    """Send `signal` (a name: ``SIGKILL``, ``SIGTERM``, ``SIGUSR1``) to this process

    - ``moment: train_batch_end``: once optimiser step `step` is taken (before the checkpoint of that
      step: Lightning runs checkpoint callbacks last, so the checkpoint of this step is never written);
    - ``moment: validation``: during the validation of epoch `epoch` (after its first batch), while
      fitting;
    - ``moment: train_epoch_start``: as epoch `epoch` starts.
    """

    def __init__(self, moment: str = "train_batch_end", step: int = -1, epoch: int = -1, signal: str = "SIGKILL"):
        self.moment, self.step, self.epoch = moment, step, epoch
        self.signum = None if signal == "CRASH" else getattr(signal_module, signal)
        self.sent = False

    def _send(self) -> None:
        if not self.sent:
            self.sent = True  # SIGTERM lets the process go on to a stop: send once
            if self.signum is None:
                raise Crash(f"simulated crash ({self.moment}, step {self.step}, epoch {self.epoch})")
            os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.moment == "train_batch_end" and trainer.global_step == self.step:
            self._send()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.moment == "validation" and trainer.training is False and not trainer.sanity_checking:
            if trainer.state.fn == "fit" and trainer.current_epoch == self.epoch:
                self._send()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if self.moment == "train_epoch_start" and trainer.current_epoch == self.epoch:
            self._send()


signal_module = signal


class Crash(RuntimeError):
    """What ``KillAt(signal="CRASH")`` raises."""


class KillAtStep(KillAt):
    def __init__(self, step: int):
        super().__init__("train_batch_end", step=step)


def kill_and_resume(
    mixer: str, run: list[str], killer: str, env: dict, saved: tuple, cwd: str | None = None, name: str = "killed"
):
    """``mixer fit RUN --config KILLER`` as the run `name`, which must die of SIGKILL leaving `saved` =
    (its last.ckpt, the global step in it), then the same run resumed with ``--ckpt_path last``; returns the
    resumed process (it must have succeeded)."""
    import subprocess

    import torch

    common = dict(env=env, cwd=cwd, capture_output=True, text=True)
    killed = subprocess.run([mixer, "fit", *run, "--config", killer, "--trainer.logger.init_args.name", name], **common)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert torch.load(saved[0], weights_only=True)["global_step"] == saved[1]
    resumed = subprocess.run(
        [mixer, "fit", *run, "--trainer.logger.init_args.name", name, "--ckpt_path", "last"], **common
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return resumed
