"""``python -m mixer_lightning.cli ...``: the ``mixer`` command."""

from mixer_lightning.cli.entry import main

main()
