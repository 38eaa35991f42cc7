"""The ``mixer`` command line: `entry.main` (help, the project's commands, one-line errors), `lightning`
(``fit|validate|test|predict`` through `MixerCLI`, a LightningCLI on its public hooks handing on to the command's
`mixer_lightning.callbacks.run.Run`) and `defaults` (what a command line is completed with before the parse)."""

from mixer_lightning.cli.entry import main

__all__ = ["main"]
