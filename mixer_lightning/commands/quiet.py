"""The quiet console of every ``mixer`` command that runs a Lightning Trainer: Lightning's and torch's
lines that ask nothing of the user ("GPU available: False", tips, "Seed set to", checkpoint-restoring
lines, DDP's start-up banner, the log-interval warning the line progress makes moot) are dropped;
warnings that ask for an action stay. No Lightning import: loggers are filtered by name."""

from __future__ import annotations

import logging
import re
import warnings

_CHATTER = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip:",
    "Seed set to",
    "Restoring states from the checkpoint path",
    "Restored all states from the checkpoint",
    "Loaded model weights from the checkpoint",
    "SLURM auto-requeueing enabled",  # the project's own line replaces it
    "Initializing distributed:",
    "distributed_backend=",
)
_CHATTY_LOGGERS = [
    f"lightning.{part}.utilities.{name}" for part in ("pytorch", "fabric") for name in ("rank_zero", "seed")
]
_CHATTY_LOGGERS += ["lightning.pytorch.trainer.connectors.signal_connector", "lightning.fabric.utilities.distributed"]
_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\).*",  # a library's deprecation about another library
    r".*LeafSpec.*is deprecated.*",
    r".*is smaller than the logging interval Trainer\(log_every_n_steps=.*",
)


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = re.sub(r"^\s*\[rank: \d+\]\s*", "", record.getMessage())  # Lightning's prefix under DDP
        return not message.lstrip("-\n ").startswith(_CHATTER)  # the DDP banner opens with a line of dashes


_FILTER = _DropChatter()


def quiet_libraries() -> None:
    """Drop the libraries' chatter from this process's output (idempotent; the warning filters last
    until the caller's ``warnings.catch_warnings()`` ends)."""
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for pattern in _WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
