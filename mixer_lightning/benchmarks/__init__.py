"""Side-by-side benchmarks (baseline and ours in one process, interleaved repetitions, medians).

Run one as ``python -m mixer_lightning.benchmarks.<name> [--json]``; each module also exposes a
function returning its figures as a dict, for the ``mixer bench`` command.
"""
