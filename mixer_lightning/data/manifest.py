"""How `mixer data pack` names its shards (``PREFIX-SPLIT-NNNN.tar``) and what its ``manifest.json`` says:
the one parser of a shard's split (`split_of`) and the one reader of a manifest (`read_manifest`, with its
schema), which the shard reader (`mixer_lightning.data.shards`), the packer and `mixer data check` share."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mixer_lightning.errors import ConfigError, require

# Our split → the word `mixer data pack` writes in a shard's name (the hub's imagenet1k-validation-00.tar).
SHARD_SPLITS = {"train": "train", "val": "validation", "test": "test"}
SPLIT_WORDS = {"train": "train", "validation": "val", "valid": "val", "val": "val", "test": "test"}
# PREFIX-SPLIT-NNNN.tar: the split is the word just before the number, whatever words the prefix holds.
SHARD_NAME = re.compile(
    r"(?:(?P<prefix>.*)[-_.])?(?P<split>train|validation|valid|val|test)(?:[-_](?P<index>\d+))?\.tar"
)
MANIFEST = "manifest.json"  # what `mixer data pack` writes beside its shards: classes and counts


def split_of(name: str) -> str | None:
    """The split a shard's file name says (``imagenet_train-validation-07.tar`` → ``val``), or None."""
    found = SHARD_NAME.fullmatch(name.lower())
    return SPLIT_WORDS[found["split"]] if found else None


def natural_order(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# The manifest `mixer data pack` writes (what `read_manifest` accepts): {key: type}, [type] a list of it,
# {str: schema} a mapping of any names.
SHARD_RECORD = {"name": str, "samples": int, "bytes": int, "sha256": str}
SPLIT_RECORD = {"samples": int, "bytes": int, "counts_per_class": [int], "shards": [SHARD_RECORD]}
MANIFEST_SCHEMA = {"complete": bool, "classes": [str], "num_classes": int, "splits": {str: SPLIT_RECORD}}


def schema_problem(value: Any, schema: Any, where: str) -> str | None:
    """Where `value` departs from `schema` (above), or None."""
    if isinstance(schema, list):
        if not isinstance(value, list):
            return f"{where} is not a list"
        return next((p for i, v in enumerate(value) if (p := schema_problem(v, schema[0], f"{where}[{i}]"))), None)
    if isinstance(schema, dict) and list(schema) == [str]:
        if not isinstance(value, dict):
            return f"{where} is not an object"
        return next((p for k, v in value.items() if (p := schema_problem(v, schema[str], f"{where}.{k}"))), None)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{where} is not an object"
        missing = [key for key in schema if key not in value]
        if missing:
            return f"{where} has no {missing[0]!r}"
        return next((p for k, s in schema.items() if (p := schema_problem(value[k], s, f"{where}.{k}"))), None)
    if not isinstance(value, schema) or (schema is int and isinstance(value, bool)):
        return f"{where} is not {'a whole number' if schema is int else schema.__name__}"
    return None


def read_manifest(folder: Path, field: str = "data.root") -> dict | None:
    """`mixer data pack`'s manifest beside the shards (classes, counts, checksums), if there is one; one line
    naming `field` where it is not one (the schema above; the class count; each shard a file name of its
    split, listed once)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    fix = f"re-run mixer data pack, or move {MANIFEST} out of the folder"
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(field, f"{str(path)!r} is not JSON ({error})", fix) from None
    problem = schema_problem(manifest, MANIFEST_SCHEMA, "manifest")
    if problem is None and manifest["num_classes"] != len(manifest["classes"]):
        problem = f"num_classes {manifest['num_classes']} differs from its {len(manifest['classes'])} classes"
    names = [
        (split, s["name"]) for split, e in (manifest["splits"] if problem is None else {}).items() for s in e["shards"]
    ]
    for split, name in names:
        if split not in SHARD_SPLITS.values():
            problem = f"its split {split!r} is none of {', '.join(SHARD_SPLITS.values())}"
        elif split_of(name) != SPLIT_WORDS[split] or Path(name).name != name:
            problem = f"{name!r} is not the name of a {split} shard in its folder"
        if problem is not None:
            break
    twice = [name for name, count in Counter(name for _, name in names).items() if count > 1]
    problem = problem or (f"it lists the shard {twice[0]!r} twice" if twice else None)
    require(problem is None, field, f"{str(path)!r}: {problem}", fix)
    return manifest


def manifest_shards(folder: Path, manifest: dict, listed: Sequence[str]) -> dict[str, list[str]]:
    """The shards of each split a manifest lists, once each is checked to be in `folder` at its recorded size;
    a pack stopped before its end, or a ``.tar`` in the folder that the manifest does not list, is refused."""
    path = folder / MANIFEST
    fix = "run the same mixer data pack again: it finishes the pack"
    require(manifest["complete"], "data.root", f"{str(path)!r} is of an unfinished pack (complete: false)", fix)
    records = {s["name"]: s for entry in manifest["splits"].values() for s in entry["shards"]}
    for name, record in records.items():
        shard = folder / name
        whole = shard.is_file() and shard.stat().st_size == record["bytes"]
        fix = "re-run mixer data pack (it rewrites the shard), or restore the file"
        require(whole, "data.root", f"shard {str(shard)!r} is missing or differs from its size in {MANIFEST}", fix)
    foreign = [name for name in listed if name not in records]
    problem = f"{str(folder / foreign[0])!r} is not a shard of {str(path)!r}" if foreign else ""
    require(not foreign, "data.root", problem, "move it out of the folder, or pack it with the others")
    return {
        split: sorted((s["name"] for s in manifest["splits"].get(word, {"shards": []})["shards"]), key=natural_order)
        for split, word in SHARD_SPLITS.items()
    }
