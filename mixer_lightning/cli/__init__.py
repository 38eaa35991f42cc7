"""The ``mixer`` command line: `main` is the console script and the entry point the tests drive.

- `entry`: ``mixer --help`` (without importing Lightning), the project commands
  (`mixer_lightning.commands`), and every error as one line (`main`);
- `signals`: Ctrl+C, SIGTERM and SIGHUP outside the training loop as one line and exit 128 + signal;
- `parser_cache`: ``mixer COMMAND --help`` and a misspelt flag answered without importing Lightning.
- `lightning`: ``fit|validate|test|predict`` through `MixerCLI`, which puts the modules below together:
  - `arguments`: the arguments completed from a checkpoint's run, config files checked before parsing;
  - `suggestions`: an unknown flag or key as one line with a did-you-mean;
  - `resume`: ``--ckpt_path`` (``last``), and what a resumed run may change;
  - `checks`: settings Lightning would only fail on later (seed, trainer, optimiser, output files);
  - `pretrained`: hub weights' preprocessing as the data's defaults;
  - `rundirs`: the run directory claimed, locked, named, and removed if a run fails before its first checkpoint;
  - `results`: fit_summary.json, val/test metrics, the predictions file;
  - `console`: what a run prints (its header, plain progress lines in logs);
  - `adapter`: every place that reaches into LightningCLI beyond its public hooks (tested on each release).
"""

from mixer_lightning.cli.entry import main

__all__ = ["main"]
