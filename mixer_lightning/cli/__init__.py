"""The ``mixer`` command line: `entry.main` (help, the project's commands, one-line errors), `lightning`
(``fit|validate|test|predict`` through `MixerCLI`, a LightningCLI on its public hooks) and `runs` (run
directories: ``--ckpt_path last``, one writer per run, evaluation results that name their checkpoint)."""

from mixer_lightning.cli.entry import main

__all__ = ["main"]
