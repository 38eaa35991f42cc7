"""A test callback that sends its own process signals at a moment outside (or inside) the training
window: as the fit starts (the model and data are set up, before the sanity check), as the sanity
check starts, after optimiser step `step` — where a user presses Ctrl+C, or a terminal hangs up — or
while a run stopped by an earlier signal is torn down (``stopping``: the impatient Ctrl+C that comes
after last.ckpt is saved), or while a run that failed is torn down (``failing``). `HoldSanityCheck` keeps a real process in its sanity check until a test
signals it from outside.

`SignalAt(moment, signals)` sends every signal in `signals` (names: ``SIGINT``, ``SIGHUP``,
``SIGTERM``) one after the other, once: ``[SIGINT, SIGINT]`` is the impatient second Ctrl+C. Python
runs a handler between two bytecodes, so the first signal is handled before the second is sent.

Test configs name this class; the tests trust the package (``MIXER_TRUSTED_MODULES=helpers``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from lightning.pytorch import Callback

from mixer_lightning.errors import Interrupted, Stopped


class SignalAt(Callback):
    def __init__(self, moment: str = "fit_start", signals: list[str] | None = None, step: int = -1):
        self.moment, self.step = moment, step
        self.signals = [getattr(signal, name) for name in (signals or ["SIGINT"])]
        self.sent = False

    def _send(self) -> None:
        if not self.sent:
            self.sent = True
            for signum in self.signals:
                os.kill(os.getpid(), signum)

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.moment == "fit_start":
            self._send()

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        if self.moment == "sanity_check_start":
            self._send()

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.moment == "validation_start" and not trainer.sanity_checking:
            self._send()

    def on_test_start(self, trainer, pl_module) -> None:
        if self.moment == "test_start":
            self._send()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.moment == "train_batch_end" and trainer.global_step == self.step:
            self._send()

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.moment == "stopping" and isinstance(exception, Stopped):
            self._send()
        if self.moment == "failing" and not isinstance(exception, (Stopped, Interrupted)):
            # Lightning calls every callback's on_exception, then tears the failed run down (the strategy,
            # the loops and their DataLoader workers, the loggers) and re-raises: signal as that starts.
            teardown = trainer.strategy.teardown

            def signalled_teardown() -> None:
                self._send()
                teardown()

            trainer.strategy.teardown = signalled_teardown


class HoldSanityCheck(Callback):
    """Write `marker` at the sanity check's first batch (its DataLoader workers started) and hold the run
    there for up to `seconds`: a test signals the process from outside while it checks its validation
    loop, however fast the machine (a run that got through its sanity check before the signal came
    flaked the test on a fast one)."""

    def __init__(self, marker: str, seconds: float = 120.0):
        self.marker, self.seconds, self.held = Path(marker), seconds, False

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.sanity_checking and not self.held:
            self.held = True
            self.marker.touch()
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:  # a signal's handler raises here
                time.sleep(0.05)
