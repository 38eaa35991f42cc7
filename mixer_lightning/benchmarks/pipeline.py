"""``mixer bench --data``: images per second per CPU core of the ImageNet training pipeline, read from an
image folder and from WebDataset shards, side by side in one process.

The command makes a synthetic ImageNet-like set (JPEGs of ImageNet's usual sizes, 500×375, 375×500,
500×333, ..., quality 90: ≈ 100 KB each, with texture so that JPEG has work to do), writes it as an
ImageFolder and packs it into shards (`mixer_lightning.data.pack`), and builds both training sets with
the data module and the augmentation of ``configs/imagenet_mixer_b16.yaml`` (the recipe of Hayase &
Karakida's Table 1: decode, random-resized crop to 224 with random interpolation, flip, RandAugment
``rand-m9-mstd0.5-inc1``, normalisation, random erasing 0.25; mixup runs on the device, not here).
One thread, no workers: a chunk of images goes through each candidate in turn (order rotated every
round, as `mixer_lightning.benchmarks.timing.compare`), each sample seeded as in training; medians.
Per core means per CPU-second: the process's CPU time is measured beside the wall time, so a machine
shared with other jobs (which takes the core away now and then) does not lower the figure; an
identical twin of the folder pipeline measured beside it gives the noise.

Reported per core: read + decode only, and the whole pipeline, for both; the ratio shards ÷ folder;
and how many cores keep a GPU fed at a given training throughput (default: the Mixer-B/16 bf16 step
measured on an H100, benchmarks/RESULTS.md). The set lies on local disk in the page cache: what this
measures is the CPU cost of the two layouts, not a cluster file system's metadata load (a million
files opened per epoch), which is the case for shards that local timing cannot show.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "configs" / "imagenet_mixer_b16.yaml"
# ImageNet's most common sizes (width, height): most photos are 500 px on the long side.
SIZES = ((500, 375), (375, 500), (500, 333), (500, 400), (333, 500), (400, 300), (640, 480), (500, 500))
# The Mixer-B/16 training step (224 px, batch 128, bf16-mixed) on one H100: benchmarks/RESULTS.md.
MIXER_B16_H100_IMG_S = 2030.0


def synthetic_image(width: int, height: int, rng: np.random.Generator) -> Any:
    """An RGB image with smooth regions, edges and texture (a photo's mix, for JPEG and the augmentations)."""
    from PIL import Image, ImageFilter

    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [np.sin(x / rng.uniform(8, 60) + rng.uniform(0, 6)) * np.cos(y / rng.uniform(8, 60)) for _ in range(3)], axis=-1
    )
    image = (base * rng.uniform(40, 110) + rng.uniform(60, 190, 3)).clip(0, 255)
    image += rng.normal(0, 25, image.shape)  # texture: ≈ 100 KB a JPEG at quality 90, as ImageNet's ≈ 110 KB
    blur = Image.fromarray(image.clip(0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.4))
    return blur


def make_synthetic_imagenet(folder: Path, images: int = 256, classes: int = 16, seed: int = 0) -> Path:
    """``folder/{train,val}/n000000NN/*.JPEG``: `images` training JPEGs over `classes` classes (and one
    validation image per class, which the data module needs)."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", images), ("val", classes)):
        for i in range(count):
            label = i % classes
            target = folder / split / f"n{label:08d}" / f"{split}_{i:06d}.JPEG"
            target.parent.mkdir(parents=True, exist_ok=True)
            width, height = SIZES[int(rng.integers(len(SIZES)))]
            synthetic_image(width, height, rng).save(target, quality=90)
    return folder


def _datamodule(dataset: str, root: str, cache_dir: str) -> Any:
    """The recipe's training data (`RECIPE`'s data arguments), read from `root` by `dataset`."""
    from mixer_lightning.data import ImageDataModule

    arguments = dict(yaml.safe_load(RECIPE.read_text())["data"]["init_args"])
    for key in ("dataset", "root", "mixup", "cutmix", "mixup_switch_prob"):  # mixup: on the device, not here
        arguments.pop(key, None)
    return ImageDataModule(dataset, root=root, num_workers=0, cache_dir=cache_dir, **arguments)


def _runner(dataset: Any, chunk: int, seed: int, decode_only: bool) -> Callable[[], None]:
    """A callable that takes the next `chunk` images of `dataset` (a `TransformedDataset`) through the
    pipeline (or only read + decode), cycling through the set."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    cursor = [0]

    def run() -> None:
        start = cursor[0]
        indices = [order[(start + j) % len(order)] for j in range(chunk)]
        cursor[0] = (start + chunk) % len(order)
        if decode_only:
            for i in indices:
                dataset.base[i]
        else:
            dataset.__getitems__([(seed * 1_000_003 + i, i) for i in indices])

    return run


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def interleaved(
    candidates: dict[str, Callable[[], None]], repeats: int, warmup: int = 1
) -> dict[str, dict[str, float]]:
    """Median CPU seconds and wall seconds per call of each candidate, run round-robin with the order
    rotated every round."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    names = list(candidates)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            candidates[name]()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start_wall)
    return {name: {"cpu": statistics.median(cpu[name]), "wall": statistics.median(wall[name])} for name in names}


def data_pipeline(
    images: int = 256,
    repeats: int = 5,
    chunk: int = 16,
    gpu_images_per_s: float = MIXER_B16_H100_IMG_S,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The figures of the module docstring, as a dict (``mixer bench --data --json``)."""
    from mixer_lightning.data.pack import pack

    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="mixer-bench-data-") as tmp:
        folder = make_synthetic_imagenet(Path(tmp) / "folder", images)
        log(f"made {images} synthetic ImageNet-like JPEGs in {folder}")
        pack(str(folder), str(Path(tmp) / "shards"), prefix="synthetic", shard_size=64, log=lambda _: None)
        jpeg_bytes = sum(p.stat().st_size for p in (folder / "train").rglob("*.JPEG")) / images
        modules = {
            "folder": _datamodule("folder", str(folder), str(Path(tmp) / "cache")),
            "shards": _datamodule("wds", str(Path(tmp) / "shards"), str(Path(tmp) / "cache")),
        }
        sets = {}
        for name, module in modules.items():
            module.setup("fit")
            sets[name] = module.train_set
            assert len(module.train_set) == images
        torch.set_num_threads(1)
        try:
            decode = interleaved({name: _runner(s, chunk, 0, decode_only=True) for name, s in sets.items()}, repeats)
            pipelines = {name: _runner(s, chunk, 1, decode_only=False) for name, s in sets.items()}
            pipelines["folder_twin"] = _runner(sets["folder"], chunk, 1, decode_only=False)
            full = interleaved(pipelines, repeats)
        finally:
            torch.set_num_threads(threads)
    per_core = {name: {"decode": chunk / decode[name]["cpu"], "pipeline": chunk / full[name]["cpu"]} for name in sets}
    wall = {name: {"decode": chunk / decode[name]["wall"], "pipeline": chunk / full[name]["wall"]} for name in sets}
    shards = per_core["shards"]["pipeline"]
    return {
        "images": images,
        "mean_jpeg_kb": jpeg_bytes / 1024,
        "chunk": chunk,
        "repeats": repeats,
        "recipe": str(RECIPE.relative_to(REPO)),
        "cpu": cpu_model(),
        "torch_threads": 1,
        "per_core_img_s": per_core,
        "wall_img_s": wall,
        "noise": abs(1 - full["folder"]["cpu"] / full["folder_twin"]["cpu"]),
        "shards_vs_folder": {
            "decode": per_core["shards"]["decode"] / per_core["folder"]["decode"],
            "pipeline": shards / per_core["folder"]["pipeline"],
        },
        "gpu_images_per_s": gpu_images_per_s,
        "cores_needed": gpu_images_per_s / shards,
    }


def format_report(report: dict[str, Any]) -> str:
    rates = report["per_core_img_s"]
    lines = [
        f"ImageNet training pipeline per CPU core ({report['images']} synthetic JPEGs, {report['mean_jpeg_kb']:.0f} KB "
        f"on average; {report['recipe']}'s augmentation; 1 thread, no workers; per CPU-second, medians of "
        f"{report['repeats']} rounds; {report['cpu']})",
        f"{'':<8} {'read + decode':>15} {'whole pipeline':>16}",
    ]
    for name in ("folder", "shards"):
        lines.append(f"{name:<8} {rates[name]['decode']:>11.1f} img/s {rates[name]['pipeline']:>12.1f} img/s")
    ratio = report["shards_vs_folder"]
    lines.append(
        f"shards ÷ folder: read + decode {ratio['decode']:.3f}, whole pipeline {ratio['pipeline']:.3f} "
        f"(noise: an identical twin of the folder pipeline differs by {report['noise']:.3f})"
    )
    lines.append(
        f"cores to feed {report['gpu_images_per_s']:,.0f} img/s (Mixer-B/16 training step, bf16, one H100 by default): "
        f"{report['cores_needed']:.0f}"
    )
    return "\n".join(lines)
