"""The quiet console of every ``mixer`` command that runs a Lightning Trainer (``fit``, ``validate``,
``test``, ``predict``, ``cka``, a sweep's points, each process of a DDP run): Lightning's and torch's
chatter is dropped from the default output: the "GPU available: False" / "TPU available" lines, the
LitLogger / LitModels advertising, "Seed set to", the checkpoint-restoring lines (the run header says
which checkpoint), DDP's start-up banner ("Initializing distributed", "distributed_backend=gloo ..."),
the warning that an epoch has fewer batches than ``log_every_n_steps`` (the project's line progress
prints its own lines), and third-party deprecation warnings that a user cannot act on (``LeafSpec``).
Warnings that ask for an action ("GPU available but not used") stay.

No Lightning import here: `quiet_libraries` filters loggers by name, before or after Lightning is
imported, and a command calls it without paying for it.
"""

from __future__ import annotations

import logging
import re
import warnings

# Messages of Lightning's info loggers that say nothing a user acts on (the header says what runs).
_CHATTER = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip:",
    "Seed set to",
    "Restoring states from the checkpoint path",
    "Restored all states from the checkpoint",
    "Loaded model weights from the checkpoint",
    "SLURM auto-requeueing enabled",  # the project's own line replaces it (`mixer_lightning.safety.slurm`)
    "Initializing distributed:",  # one line per process of a DDP run
    "distributed_backend=",  # the banner between dashed lines, "All distributed processes registered"
)
_CHATTY_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
    "lightning.pytorch.utilities.seed",
    "lightning.pytorch.trainer.connectors.signal_connector",
    "lightning.fabric.utilities.distributed",
)
# Deprecation warnings raised inside libraries about their own use of another library.
_LIBRARY_WARNINGS = (r".*isinstance\(treespec, LeafSpec\).*", r".*LeafSpec.*is deprecated.*")
# Lightning's warnings about its own settings that the project's console makes moot.
_MOOT_WARNINGS = (r".*is smaller than the logging interval Trainer\(log_every_n_steps=.*",)


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = re.sub(r"^\s*\[rank: \d+\]\s*", "", record.getMessage())  # Lightning's prefix under DDP/SLURM
        return not message.lstrip("-\n ").startswith(_CHATTER)  # the DDP banner opens with a line of dashes


_FILTER = _DropChatter()


def quiet_libraries() -> None:
    """Drop the libraries' chatter (module docstring) from this process's output. Idempotent; the
    warning filters last until the caller's ``warnings.catch_warnings()`` ends."""
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for pattern in (*_LIBRARY_WARNINGS, *_MOOT_WARNINGS):
        warnings.filterwarnings("ignore", message=pattern)
