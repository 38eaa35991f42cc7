"""List the registered model families and presets, with their parameter counts.

Examples:
    mixer models                 every family and preset
    mixer models 'mixer_*' --json

The table depends on the package's model code alone: it is computed once (every model built on the
meta device) and kept in ``$MIXER_CACHE_DIR`` (default ``~/.cache/mixer_lightning``) under a hash of
that code, so later calls answer without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from fnmatch import fnmatch
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace

PACKAGE = Path(__file__).resolve().parents[1]


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="shell-style pattern of names (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def describe(name: str) -> dict:
    """Name, family, source and parameter counts of a registered model at its default size."""
    import torch

    from mixer_lightning.models import get_entry, num_params

    entry = get_entry(name)
    with torch.device("meta"):  # shapes only: even Mixer-H/14 is counted at once
        model = entry.build()
    counts = {"params": num_params(model), "params_without_head": num_params(model, exclude_head=True)}
    return {"name": name, "family": entry.family, **counts, "source": entry.source}


def cache_file() -> Path:
    digest = hashlib.sha256()
    for path in sorted([*(PACKAGE / "models").glob("*.py"), PACKAGE / "width.py"]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mixer_lightning")
    return Path(os.environ.get("MIXER_CACHE_DIR") or cache) / f"models-{digest.hexdigest()[:16]}.json"


def all_rows() -> list[dict]:
    """Every registered model's row (`describe`), from the cache when it holds this code's table."""
    path = cache_file()
    if path.is_file():
        return json.loads(path.read_text())
    from mixer_lightning.models import list_models
    from mixer_lightning.safety.atomic import write_text

    rows = [describe(name) for name in list_models("*")]
    try:
        write_text(path, json.dumps(rows), field="cache")
    except Exception:  # a read-only home: the table is computed each time
        pass
    return rows


def run(args: Namespace) -> None:
    rows = [row for row in all_rows() if fnmatch(row["name"], args.pattern)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    # columns as wide as their longest entry: a preset or family named past 14 characters shifts nothing
    name, family = (max([len(key), *(len(row[key]) for row in rows)]) for key in ("name", "family"))
    print(f"{'name':<{name}} {'family':<{family}} {'params (M, w/o head)':>21}  source")
    for row in rows:
        params = row["params_without_head"] / 1e6
        print(f"{row['name']:<{name}} {row['family']:<{family}} {params:>21.2f}  {row['source']}")
