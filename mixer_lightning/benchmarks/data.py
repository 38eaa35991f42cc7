"""Data-loading throughput (`throughput`): `ImageDataModule` against a plain ``datasets.with_transform``
pipeline (timm's RandAugment ``rand-m9-mstd0.5`` + random erasing 0.25 after the random-resized crop and
flip, normalised tensors out), both reading the same Hugging Face dataset (default: CIFAR-10 under
`data_root`) through DataLoaders of the same batch size and workers; chunks of images drawn from each in
turn (`timing.compare`). The end-to-end ``mixer fit`` against the training step is `fit`.

    python -m mixer_lightning.benchmarks.data [--root PATH/TO/cifar10] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from mixer_lightning.benchmarks.timing import compare
from mixer_lightning.errors import require

REPO = Path(__file__).resolve().parents[2]

POLICY = "rand-m9-mstd0.5"
ERASING = 0.25


def checkout_relative(path: str | Path) -> str:
    """`path` relative to the checkout: a committed benchmark JSON names no machine's directories."""
    return os.path.relpath(Path(path).resolve(), REPO)


def data_root() -> Path:
    """``$MIXER_DATA_ROOT``, else ``<checkout>/../shared/data`` (where the project's real datasets live)."""
    return Path(os.environ.get("MIXER_DATA_ROOT") or REPO.parent / "shared" / "data")


def _baseline_loader(root: str, batch_size: int, workers: int) -> DataLoader:
    """The pipeline of timm's docs / HF tutorials: ``load_dataset(...).with_transform(fn)``."""
    import datasets
    from timm.data import create_transform

    train = datasets.load_dataset(root, split="train")
    imagenet = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "interpolation": "bilinear"}
    transform = create_transform(
        32, is_training=True, auto_augment=POLICY, re_prob=ERASING, re_mode="pixel", **imagenet
    )
    image_column = "img" if "img" in train.column_names else "image"

    def apply(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {"image": [transform(image.convert("RGB")) for image in batch[image_column]], "label": batch["label"]}

    loader = {"batch_size": batch_size, "shuffle": True, "drop_last": True, "num_workers": workers}
    return DataLoader(train.with_transform(apply), persistent_workers=workers > 0, **loader)


def _our_loader(root: str, batch_size: int, workers: int) -> DataLoader:
    from mixer_lightning.data import ImageDataModule

    augment = {"auto_augment": POLICY, "random_erasing": ERASING, "random_erasing_mode": "pixel"}
    loader = {"batch_size": batch_size, "num_workers": workers, "pin_memory": False}
    data = ImageDataModule("hf", root=root, val_split=0, train_crop="random_resized_crop", **augment, **loader)
    data.setup("fit")
    return data.train_dataloader()


def _chunks(loader: DataLoader, batches: int) -> Callable[[], None]:
    """A call draws `batches` batches, restarting the loader's epochs as needed."""
    state: dict[str, Iterator] = {"it": iter(loader)}

    def draw() -> None:
        taken = 0
        while taken < batches:
            taken += sum(1 for _ in itertools.islice(state["it"], batches - taken))
            if taken < batches:
                state["it"] = iter(loader)

    return draw


def throughput(
    root: str | None = None,
    workers: tuple[int, ...] = (0, 2),
    images: int = 4096,
    batch_size: int = 256,
    repeats: int = 5,
) -> dict[str, Any]:
    """Images per second of the baseline and of ours for each worker count, and ours ÷ baseline."""
    root = str(root or data_root() / "cifar10")
    require(Path(root).is_dir(), "root", f"no dataset at {root}", "give --root PATH/TO/cifar10 or set MIXER_DATA_ROOT")
    batches = max(1, images // batch_size)
    results: dict[str, Any] = {"root": root, "policy": POLICY, "random_erasing": ERASING, "batch_size": batch_size}
    results |= {"images_per_measurement": batches * batch_size, "repeats": repeats}
    for count in workers:
        loaders = {"baseline": _baseline_loader, "ours": _our_loader}
        seconds = compare({k: _chunks(f(root, batch_size, count), batches) for k, f in loaders.items()}, repeats, 1)
        rates = {name: batches * batch_size / s for name, s in seconds.items()}
        results[f"workers={count}"] = {
            "baseline_img_per_s": round(rates["baseline"], 1),
            "ours_img_per_s": round(rates["ours"], 1),
            "ours_over_baseline": round(rates["ours"] / rates["baseline"], 3),
        }
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="default: $MIXER_DATA_ROOT/cifar10, else ../shared/data/cifar10")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = throughput(args.root, tuple(args.workers), args.images, args.batch_size, args.repeats)
    print(json.dumps(results, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in results.items()))
