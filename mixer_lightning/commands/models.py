"""List the registered model families and presets, with their parameter counts.

Examples:
    mixer models                 every family and preset
    mixer models 'mixer_*' --json
"""

from __future__ import annotations

import json

import torch
from jsonargparse import ArgumentParser, Namespace


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="shell-style pattern of names (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def describe(name: str) -> dict:
    """Name, family, source and parameter counts of a registered model at its default size."""
    from mixer_lightning.models import get_entry, num_params

    entry = get_entry(name)
    with torch.device("meta"):  # shapes only: counts parameters of even Mixer-H/14 instantly
        model = entry.build()
    return {
        "name": name,
        "family": entry.family,
        "params": num_params(model),
        "params_without_head": num_params(model, exclude_head=True),
        "source": entry.source,
    }


def run(args: Namespace) -> None:
    from mixer_lightning.models import list_models

    rows = [describe(name) for name in list_models(args.pattern)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'name':<14} {'family':<12} {'params (M, w/o head)':>21}  source")
    for row in rows:
        print(f"{row['name']:<14} {row['family']:<12} {row['params_without_head'] / 1e6:>21.2f}  {row['source']}")
