"""A test callback that sends its own process signals at a moment of a run: as the fit starts (model and
data set up, before the sanity check), as the sanity check or a test starts, after optimiser step
`step`, as the callbacks are set up (``setup``: the data module is, the loops have not begun) or as the fit
ends (``fit_end``: training done). `SignalAt(moment, signals, step)` sends every signal in `signals` (names: ``SIGTERM``,
``SIGUSR1``, ...) one after the other, once (never where the variable `unless_env` is set); Python runs a handler between two bytecodes, so the first
signal is handled before the second is sent.

Test configs name this class; the tests trust the package (``MIXER_TRUSTED_MODULES=helpers``).
"""

from __future__ import annotations

import os
import signal

from lightning.pytorch import Callback


class SignalAt(Callback):
    def __init__(
        self, moment: str = "fit_start", signals: list[str] | None = None, step: int = -1, unless_env: str | None = None
    ):
        self.moment, self.step = moment, step
        self.signals = [getattr(signal, name) for name in (signals or ["SIGTERM"])]
        self.sent = bool(unless_env and os.environ.get(unless_env))  # e.g. SLURM_RESTART_COUNT: a requeued start

    def _send(self, moment: str) -> None:
        if moment == self.moment and not self.sent:
            self.sent = True
            for signum in self.signals:
                os.kill(os.getpid(), signum)

    def setup(self, trainer, pl_module, stage) -> None:
        self._send("setup")

    def on_fit_end(self, trainer, pl_module) -> None:
        self._send("fit_end")

    def on_fit_start(self, trainer, pl_module) -> None:
        self._send("fit_start")

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self._send("sanity_check_start")

    def on_test_start(self, trainer, pl_module) -> None:
        self._send("test_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self._send("train_batch_end")
