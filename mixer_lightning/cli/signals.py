"""Stops by signal outside the training window: Ctrl+C (SIGINT), SIGTERM or a hang-up (SIGHUP, a closed
terminal or ssh session) while ``mixer`` starts, parses, sets up, checks its validation loop or writes
its results.

Inside training, `mixer_lightning.safety.checkpoints.ResumeCheckpoint` turns these signals into a stop
at the next resumable step. Outside it there is nothing to save, so `stop_on_signals` makes them raise
`mixer_lightning.errors.Interrupted` at once: Lightning tears the run down, the run directory made for
it is removed, and `mixer` prints one line and exits with 128 + the signal. Python's own
KeyboardInterrupt would reach Lightning's handler instead, which prints its own line and exits with 1.

A signal inherited as ignored is left ignored: ``nohup mixer fit ...`` goes on when the terminal
closes, as a job started in the background of a script goes on through a Ctrl+C meant for the
foreground. A forked DataLoader worker, which a terminal signals with the run, leaves the stop to the
run. No Lightning or torch here: the handlers are in place before those long imports.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from mixer_lightning.errors import Interrupted

# SIGHUP does not exist on Windows.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

_state = {"when": ""}  # what the one line says of the moment: "before training started (...)"


def stop_context(when: str) -> None:
    """What the line of a stop says of the moment, e.g. ``before training started (nothing new to resume)``."""
    _state["when"] = when


def _handler(owner: int):
    def stop(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            # A forked child (a DataLoader worker) inherits this handler, and a terminal's Ctrl+C or
            # hang-up reaches it with its parent: the parent stops it (or it notices its parent gone).
            # Ending here would fail the parent's next batch ("DataLoader worker exited unexpectedly").
            return
        if Interrupted.unwinding:  # a stop at once is under way: this signal asks for nothing new
            return
        when = _state["when"]
        raise Interrupted(signum, f"stopped by {signal.Signals(signum).name}" + (f" {when}" if when else ""))

    return stop


def stop_on_signals() -> tuple[dict[int, Any], str, bool]:
    """Make SIGINT, SIGTERM and SIGHUP raise `Interrupted` in this process, except those inherited as
    ignored (or handled outside Python); returns what `restore_signals` puts back."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():  # Python handles signals there only
        stop = _handler(os.getpid())
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN or current is None:
                continue
            previous[signum] = current
            signal.signal(signum, stop)
    saved = previous, _state["when"], Interrupted.unwinding
    Interrupted.unwinding = False
    return saved


def restore_signals(saved: tuple[dict[int, Any], str, bool]) -> None:
    """Put back the handlers (and the moment) `stop_on_signals` replaced: ``mixer`` run in a process
    that goes on (a test, a sweep running its points) leaves its signals as it found them."""
    previous, when, unwinding = saved
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    _state["when"] = when
    Interrupted.unwinding = unwinding


def ignore_stop_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from here on: the ``mixer`` process printed its stop's line and
    exits; a Ctrl+C still held down would raise KeyboardInterrupt in the interpreter's exit handlers
    (a traceback under the line) or leave a DataLoader worker unreaped."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not None:
                signal.signal(signum, signal.SIG_IGN)
