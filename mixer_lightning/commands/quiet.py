"""The quiet console of every ``mixer`` command that runs a Lightning Trainer: Lightning's information lines
("GPU available: False", tips, "Seed set to", checkpoint-restoring lines, DDP's start-up banner) are dropped by
logger: the levels of Lightning's own loggers, and on the logger it shares with the project's lines
(``rank_zero_info``) the records below WARNING that Lightning's own modules log. Warnings that ask for an action
stay; those that ask nothing (`seam.LIBRARY_WARNINGS`) are ignored. No Lightning import: loggers go by name."""

from __future__ import annotations

import functools
import logging
import os
import sys

from mixer_lightning.seam import ignore_warning

_LIGHTNING_LOGGERS = ("lightning.fabric.utilities.seed", "lightning.fabric.utilities.distributed")
_LIGHTNING_LOGGERS += ("lightning.pytorch.trainer.connectors.signal_connector",)  # its SLURM line: ours replaces it
_SHARED_LOGGERS = [f"lightning.{part}.utilities.rank_zero" for part in ("pytorch", "fabric")]


@functools.cache
def _lightning_folder() -> str:
    # Called on a record of Lightning's loggers, so Lightning is imported by then.
    lightning = sys.modules.get("lightning")
    return os.path.join(list(lightning.__path__)[0], "") if lightning else "<no lightning>"


class _LightningInfo(logging.Filter):
    """Drops a record below WARNING logged from inside Lightning's package (`rank_zero_info` logs its caller's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.pathname.startswith(_lightning_folder())


_FILTER = _LightningInfo()


def quiet_libraries() -> None:
    """Drop the libraries' information lines from this process's output (idempotent; the warning filters last
    until the caller's ``warnings.catch_warnings()`` ends)."""
    for name in _LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in _SHARED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for name in ("leaf_spec", "log_interval"):
        ignore_warning(name)
