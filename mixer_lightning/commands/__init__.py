"""The project's own subcommands (``mixer models``, ``mixer width``, ...), beside Lightning's ``fit``,
``validate``, ``test`` and ``predict``.

A command is a module with a docstring (its ``--help``), ``add_arguments(parser)`` and ``run(args)``; one
with sub-commands (``mixer sweep report DIR``) also has ``SUBCOMMANDS = {"report": (add_arguments, run)}``.
Adding one is a line in `COMMANDS` and a case in `command_module`; modules are imported only when their command runs.
"""

from __future__ import annotations

import inspect
from argparse import RawDescriptionHelpFormatter

from jsonargparse import ArgumentParser, DefaultHelpFormatter


class HelpFormatter(RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help that keeps the line breaks of descriptions (a command's examples)."""


COMMANDS: dict[str, str] = {
    "models": "list the registered models and presets",
    "convert": "timm / official JAX MLP-Mixer weights to a checkpoint (or to .npz)",
    "width": "width, sparsity and the optimum S* = C* at a fixed Ω",
    "sweep": "sweep a config: width/γ/density grids, generic axes, seeds; `sweep report|curves|point|status`",
    "bench": "throughput, FLOPs and MFU side by side (ours vs timm, RP, compiled)",
    "spectrum": "σ_max of random SW-MLP vs Mixer weights at fixed Ω (Fig. 4 right; App. D.1, Fig. S.1)",
    "cka": "minibatch CKA between the skip-connection inputs of two checkpoints",
    "visualize": "token-mixing units, stem units, effective weight patterns",
    "fewshot": "linear few-shot accuracy of frozen features (ridge regression)",
    "export": "a checkpoint's network to ONNX, torch.export (.pt2) or TorchScript",
    "push": "a checkpoint as a Hub repo folder (timm layout); --repo_id uploads it",
    "average": "the mean of checkpoints' weights (timm's avg_checkpoints)",
    "data": "`data pack`: an image folder or HF dataset → WebDataset tar shards; `data check`: verify shards",
}


def summary() -> str:
    """The project commands, one per line, for ``mixer --help``."""
    width = max(map(len, COMMANDS))
    return "\n".join(f"  {name:<{width}}  {help_}" for name, help_ in COMMANDS.items())


def command_module(name: str):
    """The module of the command `name`, imported when it runs (``mixer width`` imports no torch), by an import
    statement that tests/test_layers.py reads: none is imported by a string."""
    match name:
        case "models":
            from mixer_lightning.commands import models as module
        case "convert":
            from mixer_lightning.commands import convert as module
        case "width":
            from mixer_lightning.commands import width as module
        case "sweep":
            from mixer_lightning.commands.sweep import command as module
        case "bench":
            from mixer_lightning.commands import bench as module
        case "spectrum":
            from mixer_lightning.commands import spectrum as module
        case "cka":
            from mixer_lightning.commands import cka as module
        case "visualize":
            from mixer_lightning.commands import visualize as module
        case "fewshot":
            from mixer_lightning.commands import fewshot as module
        case "export":
            from mixer_lightning.commands import export as module
        case "push":
            from mixer_lightning.commands import push as module
        case "average":
            from mixer_lightning.commands import average as module
        case "data":
            from mixer_lightning.commands import data as module
    return module


def run_command(name: str, argv: list[str]) -> int | None:
    """Parse `argv` for the command `name` (or one of its sub-commands) and run it; a bad argument is
    raised (exit_on_error=False) for the entry point to print in one line."""
    module = command_module(name)
    add_arguments, run, prog, doc = module.add_arguments, module.run, f"mixer {name}", module.__doc__
    if argv and argv[0] in getattr(module, "SUBCOMMANDS", {}):
        (add_arguments, run), prog, argv = module.SUBCOMMANDS[argv[0]], f"{prog} {argv[0]}", argv[1:]
        doc = inspect.cleandoc(run.__doc__ or "")
    parser = ArgumentParser(prog=prog, description=doc, formatter_class=HelpFormatter, exit_on_error=False)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if getattr(args, "plot", None):  # a file the user names is not replaced unless told, and before any work
        from mixer_lightning.safety.atomic import check_output_file

        check_output_file(args.plot, "--plot", args.overwrite)
    return run(args)
