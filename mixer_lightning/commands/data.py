"""Sharded data for cluster file systems (docs/data.md, "ImageNet at cluster scale").

    mixer data pack SOURCE OUT     an image folder (root/train/<class>/*, root/val/<class>/*) or a Hugging
                                   Face dataset → WebDataset tar shards in the hub's layout and
                                   OUT/manifest.json (classes, counts, bytes, SHA-256 per shard); resumable
    mixer data check ROOT          scan and check every shard as `mixer fit --data.dataset wds` reads them
                                   (the shard index cache made again); with a manifest, also verify every
                                   shard's SHA-256

Examples:
    mixer data pack /datasets/imagenet /scratch/imagenet-wds --shard_size 1250
    mixer data pack uoft-cs/cifar10 shards/cifar10 --shard_size 5000
    mixer data check /datasets/imagenet-1k-wds --num_classes 1000
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt, restricted_number_type, restricted_string_type

from mixer_lightning.errors import ConfigError

# A shard prefix is one file name inside OUT (no folder, no "..": pack writes only into OUT).
ONE_NAME = restricted_string_type("ShardPrefix", r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("action", type=str, help="pack or check (mixer data pack --help, mixer data check --help)")


def run(args: Namespace) -> None:
    raise ConfigError("action", f"unknown action {args.action!r}", "choose pack or check: mixer data pack|check --help")


def add_pack_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("source", type=str, help="an image folder, or a Hugging Face hub id / local dataset folder")
    parser.add_argument("out", type=str, help="the folder the shards and manifest.json are written into")
    parser.add_argument(
        "--prefix", type=ONE_NAME, default=None, help="shard names PREFIX-train-0000.tar (default: OUT's)"
    )
    parser.add_argument("--shard_size", type=PositiveInt, default=1000, help="samples per shard (hub ImageNet: 1,250)")
    parser.add_argument(
        "--seed", type=NonNegativeInt, default=0, help="seed of the order of the samples across the shards"
    )
    parser.add_argument("--no_shuffle", action="store_true", help="keep the source's order (sorted by class)")
    parser.add_argument("--image_column", type=str, default=None, help="Hugging Face: the image column")
    parser.add_argument("--label_column", type=str, default=None, help="Hugging Face: the label column")


def run_pack(args: Namespace) -> None:
    """Pack an image folder or a Hugging Face dataset into WebDataset tar shards (mixer data --help)."""
    from mixer_lightning.data.pack import pack
    from mixer_lightning.safety.atomic import check_output_dir

    check_output_dir(args.out, "out", "the shards")
    settings = {k: args[k] for k in ("prefix", "shard_size", "seed", "image_column", "label_column")}
    with renamed({"data.root": "source", "data.image_column": "image_column"}):
        manifest = pack(args.source, args.out, shuffle=not args.no_shuffle, **settings)
    for split, entry in manifest["splits"].items():
        print(
            f"{split:<10} {entry['samples']:>10,} images in {len(entry['shards']):,} shards, "
            f"{entry['bytes'] / 2**20:,.1f} MiB, {manifest['num_classes']} classes"
        )
    print(f"manifest: {Path(args.out) / 'manifest.json'}")


def add_check_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("root", type=str, help="the folder of the shards, or a brace pattern of training shards")
    parser.add_argument(
        "--num_classes",
        type=restricted_number_type(None, int, (">=", 2)) | None,
        default=None,
        help="labels must lie in 0..num_classes-1",
    )
    parser.add_argument("--cache_dir", type=str, default=None, help="where the index is kept (as data.cache_dir)")


def run_check(args: Namespace) -> None:
    """Index and check WebDataset shards as `mixer fit` reads them (mixer data --help)."""
    from mixer_lightning.data.manifest import MANIFEST
    from mixer_lightning.data.pack import verify
    from mixer_lightning.data.sources.webdataset import WebDataset

    with renamed({"data.root": "root", "data.num_classes": "num_classes"}):
        source = WebDataset(
            args.root, download=False, num_classes=args.num_classes, cache_dir=args.cache_dir, rescan=True
        )
    for split, index in source.indices.items():
        classes = len(set(index.label.tolist()))
        print(
            f"{split:<6} {len(source.files[split]):>6,} shards {len(index):>10,} samples  "
            f"{classes:,} of {source.info.num_classes:,} classes present"
        )
    folder = source.files["train"][0].parent
    if (folder / MANIFEST).is_file():
        verify(folder)


@contextmanager
def renamed(fields: dict[str, str]) -> Iterator[None]:
    """The data module's errors named as this command's arguments (``data.root`` → ``root``)."""
    try:
        yield
    except ConfigError as error:
        raise ConfigError(
            fields.get(error.field, error.field.removeprefix("data.")), error.problem, error.fix
        ) from None


SUBCOMMANDS = {"pack": (add_pack_arguments, run_pack), "check": (add_check_arguments, run_check)}
