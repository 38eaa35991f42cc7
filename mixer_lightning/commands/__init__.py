"""The project's own subcommands (``mixer models``, ``mixer width``, ...), beside Lightning's ``fit``,
``validate``, ``test`` and ``predict``.

A command is a module with a docstring (its ``--help``), ``add_arguments(parser)`` and ``run(args)``; one
with sub-commands (``mixer sweep report DIR``) also has ``SUBCOMMANDS = {"report": (add_arguments, run)}``.
Adding one is a line in `COMMANDS`; modules are imported only when their command runs.
"""

from __future__ import annotations

import importlib
import inspect
from argparse import RawDescriptionHelpFormatter

from jsonargparse import ArgumentParser, DefaultHelpFormatter


class HelpFormatter(RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help that keeps the line breaks of descriptions (a command's examples)."""


COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("mixer_lightning.commands.models", "list the registered models and presets"),
    "convert": (
        "mixer_lightning.commands.convert",
        "timm / official JAX MLP-Mixer weights to a checkpoint (or to .npz)",
    ),
    "width": ("mixer_lightning.commands.width", "width, sparsity and the optimum S* = C* at a fixed Ω"),
    "sweep": (
        "mixer_lightning.commands.sweep.command",
        "sweep a config: width/γ/density grids, generic axes, seeds; `sweep report|curves|point|status`",
    ),
    "bench": ("mixer_lightning.commands.bench", "throughput, FLOPs and MFU side by side (ours vs timm, RP, compiled)"),
    "spectrum": (
        "mixer_lightning.commands.spectrum",
        "σ_max of random SW-MLP vs Mixer weights at fixed Ω (Fig. 4 right; App. D.1, Fig. S.1)",
    ),
    "cka": ("mixer_lightning.commands.cka", "minibatch CKA between the skip-connection inputs of two checkpoints"),
    "visualize": ("mixer_lightning.commands.visualize", "token-mixing units, stem units, effective weight patterns"),
    "fewshot": ("mixer_lightning.commands.fewshot", "linear few-shot accuracy of frozen features (ridge regression)"),
    "export": ("mixer_lightning.commands.export", "a checkpoint's network to ONNX, torch.export (.pt2) or TorchScript"),
    "push": ("mixer_lightning.commands.push", "a checkpoint as a Hub repo folder (timm layout); --repo_id uploads it"),
    "average": ("mixer_lightning.commands.average", "the mean of checkpoints' weights (timm's avg_checkpoints)"),
    "data": (
        "mixer_lightning.commands.data",
        "`data pack`: an image folder or HF dataset → WebDataset tar shards; `data check`: verify shards",
    ),
}


def summary() -> str:
    """The project commands, one per line, for ``mixer --help``."""
    width = max(map(len, COMMANDS))
    return "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())


def run_command(name: str, argv: list[str]) -> int | None:
    """Parse `argv` for the command `name` (or one of its sub-commands) and run it; a bad argument is
    raised (exit_on_error=False) for the entry point to print in one line."""
    module = importlib.import_module(COMMANDS[name][0])
    add_arguments, run, prog, doc = module.add_arguments, module.run, f"mixer {name}", module.__doc__
    if argv and argv[0] in getattr(module, "SUBCOMMANDS", {}):
        (add_arguments, run), prog, argv = module.SUBCOMMANDS[argv[0]], f"{prog} {argv[0]}", argv[1:]
        doc = inspect.cleandoc(run.__doc__ or "")
    parser = ArgumentParser(prog=prog, description=doc, formatter_class=HelpFormatter, exit_on_error=False)
    add_arguments(parser)
    return run(parser.parse_args(argv))
