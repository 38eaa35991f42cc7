"""``mixer bench --data``: images per second per CPU core of the ImageNet training pipeline, read from an
image folder and from WebDataset shards, side by side in one process.

A synthetic ImageNet-like set (JPEGs of ImageNet's usual sizes, quality 90, ≈ 100 KB each) is written as an
ImageFolder and packed into shards (`mixer_lightning.data.pack`); both training sets get the data module and
augmentation of ``configs/imagenet_mixer_b16.yaml`` (Table 1's recipe: decode, random-resized crop, flip,
RandAugment, normalisation, random erasing; mixup runs on the device). One thread, no workers; chunks go
through each candidate in turn (`timing.compare`), medians of CPU time (a core taken away by another job
does not lower the figure). An identical twin of the folder pipeline gives the noise. Reported: read +
decode and the whole pipeline per core, shards ÷ folder, and the cores that keep a GPU fed (default: the
Mixer-B/16 bf16 step on an H100, benchmarks/RESULTS.md). The set lies in the page cache: this measures the
CPU cost of the layouts, not a cluster file system's load of a million small files (the case for shards).
"""

from __future__ import annotations

import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from mixer_lightning.benchmarks.data import REPO
from mixer_lightning.benchmarks.timing import compare

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
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def data_pipeline(images=256, repeats=5, chunk=16, gpu_images_per_s=MIXER_B16_H100_IMG_S, log=print) -> dict:
    """The figures of the module docstring, as a dict (``mixer bench --data --json``)."""
    from mixer_lightning.data.pack import pack

    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="mixer-bench-data-") as tmp:
        folder = make_synthetic_imagenet(Path(tmp) / "folder", images)
        log(f"made {images} synthetic ImageNet-like JPEGs in {folder}")
        pack(str(folder), str(Path(tmp) / "shards"), prefix="synthetic", shard_size=64, log=lambda _: None)
        jpeg_bytes = sum(p.stat().st_size for p in (folder / "train").rglob("*.JPEG")) / images
        sets = {}
        for name, dataset, root in (("folder", "folder", folder), ("shards", "wds", Path(tmp) / "shards")):
            module = _datamodule(dataset, str(root), str(Path(tmp) / "cache"))
            module.setup("fit")
            sets[name] = module.train_set
        torch.set_num_threads(1)
        try:
            decoders = {name: _runner(s, chunk, 0, decode_only=True) for name, s in sets.items()}
            decode = compare(decoders, repeats, warmup=1, cpu=True)
            pipelines = {name: _runner(s, chunk, 1, decode_only=False) for name, s in sets.items()}
            pipelines["folder_twin"] = _runner(sets["folder"], chunk, 1, decode_only=False)
            full = compare(pipelines, repeats, warmup=1, cpu=True)
        finally:
            torch.set_num_threads(threads)
    rates = {
        c: {n: {"decode": chunk / decode[n][c], "pipeline": chunk / full[n][c]} for n in sets} for c in ("cpu", "wall")
    }
    per_core, shards = rates["cpu"], rates["cpu"]["shards"]
    report = {"images": images, "mean_jpeg_kb": jpeg_bytes / 1024, "chunk": chunk, "repeats": repeats}
    report |= {"recipe": str(RECIPE.relative_to(REPO)), "cpu": cpu_model(), "torch_threads": 1}
    report |= {"per_core_img_s": per_core, "wall_img_s": rates["wall"]}
    report["noise"] = abs(1 - full["folder"]["cpu"] / full["folder_twin"]["cpu"])
    report["shards_vs_folder"] = {k: shards[k] / per_core["folder"][k] for k in ("decode", "pipeline")}
    return report | {"gpu_images_per_s": gpu_images_per_s, "cores_needed": gpu_images_per_s / shards["pipeline"]}


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
    ratio, gpu = report["shards_vs_folder"], report["gpu_images_per_s"]
    return "\n".join(lines) + (
        f"\nshards ÷ folder: read + decode {ratio['decode']:.3f}, whole pipeline {ratio['pipeline']:.3f} (noise: an "
        f"identical twin of the folder pipeline differs by {report['noise']:.3f})\ncores to feed {gpu:,.0f} img/s "
        f"(Mixer-B/16 training step, bf16, one H100 by default): {report['cores_needed']:.0f}"
    )
