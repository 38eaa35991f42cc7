"""A test callback that sends its own process signals at a moment outside (or inside) the training
window: as the fit starts (the model and data are set up, before the sanity check), as the sanity
check starts, or after optimiser step `step` — where a user presses Ctrl+C, or a terminal hangs up.

`SignalAt(moment, signals)` sends every signal in `signals` (names: ``SIGINT``, ``SIGHUP``,
``SIGTERM``) one after the other, once: ``[SIGINT, SIGINT]`` is the impatient second Ctrl+C. Python
runs a handler between two bytecodes, so the first signal is handled before the second is sent.

Test configs name this class; the tests trust the package (``MIXER_TRUSTED_MODULES=helpers``).
"""

from __future__ import annotations

import os
import signal

from lightning.pytorch import Callback


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
