"""ImageNet at cluster scale (issue 27): WebDataset shards (``data.dataset: wds``) as the hub distributes
ImageNet, ``mixer data pack|check``, streamed Hugging Face datasets (``data.streaming``), every guarantee
of the other sources (the same samples whatever the workers and ranks, disjoint ranks covering the epoch,
exact resume) and bad shards as one line naming the shard and the sample."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_reliability import MIXER, assert_same, assert_same_runs, kill_config, killer_env

from helpers import TEST_CONFIGS, error_field, field_of, read_json, run_dirs
from helpers.fakedata import write_hf_files, write_imagenet_folder, write_wds
from helpers.killer import kill_and_resume
from helpers.recorder import record_one_and_two_processes
from mixer_lightning.cli import main
from mixer_lightning.data import ImageDataModule
from mixer_lightning.data.sampling import fork_may_deadlock
from mixer_lightning.data.shard_order import ShardOrder
from mixer_lightning.data.shards import expand_braces
from mixer_lightning.errors import ConfigError

WDS = str(TEST_CONFIGS / "wds_mixer.yaml")
TESTS = Path(__file__).resolve().parent


def last_error(capsys: pytest.CaptureFixture) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


# ------------------------------------------------------------------------------------------- shards


def test_fit_from_shards_packed_from_an_image_folder(capsys: pytest.CaptureFixture) -> None:
    """A synthetic ImageNet (JPEGs of varied sizes, one grey) as a folder → `mixer data pack` → shards with a
    manifest (counts per class, bytes, SHA-256) → `mixer data check` → `mixer fit` from the shards: the run
    knows the class names, and reports its throughput."""
    write_imagenet_folder(Path("imagenet"), classes=4, train=8, val=3)
    main(["data", "pack", "imagenet", "shards", "--shard_size", "10"])
    manifest = read_json(Path("shards/manifest.json"))
    assert manifest["complete"] and manifest["classes"] == [f"n{c:08d}" for c in range(4)]
    train = manifest["splits"]["train"]
    assert train["samples"] == 32 and train["counts_per_class"] == [8, 8, 8, 8]
    assert [s["name"] for s in train["shards"]] == [f"shards-train-{i:04d}.tar" for i in range(4)]
    assert [s["samples"] for s in train["shards"]] == [10, 10, 10, 2]
    assert manifest["splits"]["validation"]["samples"] == 12
    with tarfile.open("shards/shards-train-0000.tar") as tar:
        names = tar.getnames()
    assert len(names) == 30 and {n.rsplit(".", 1)[1] for n in names} == {"jpg", "cls", "json"}
    capsys.readouterr()
    main(["data", "check", "shards"])
    out = capsys.readouterr().out
    assert "train       4 shards         32 samples  4 of 4 classes present" in out
    assert "check  6 shards match the sizes and SHA-256 checksums" in out
    main(["fit", "--config", WDS, "--data.root", "shards", "--data.num_classes", "null", "--trainer.max_epochs", "1"])
    out = capsys.readouterr().out
    assert "data   wds (4 classes, 32×32×3): 32 train, 12 val images, batch 4" in out
    assert "data   wds: 32 training images in 4 shards, shuffled in windows of 2 shards" in out
    (run,) = run_dirs("wds")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["data"]["class_names"] == manifest["classes"]
    summary = read_json(run / "fit_summary.json")
    assert summary["steps"] == 8 and summary["throughput"]["images_per_s"] > 0
    assert summary["throughput"]["mfu"] is None  # a CPU: no known peak


def test_hub_shards_by_folder_or_brace_pattern_indexed_once(tmp_path: Path) -> None:
    """The hub's layout (imagenet1k-train-0000.tar, imagenet1k-validation-00.tar): by folder, splits by
    name; by a brace pattern, a subset of the training shards (validation still found beside them). The
    index is cached beside the shards and made again when a shard changes."""
    assert list(expand_braces("a-{00..02}-{x,y}.tar")) == [f"a-{i:02d}-{c}.tar" for i in range(3) for c in "xy"]
    root = write_wds(tmp_path / "in1k", train=32, val=8, per_shard=8)
    whole = ImageDataModule("wds", root=str(root), num_workers=0, image_size=32, batch_size=4)
    assert whole.num_classes == 4 and whole.source.has_val
    assert [len(whole.source.indices[s]) for s in ("train", "val")] == [32, 8]
    cached = sorted((root / ".mixer_cache").glob("*.npz"))
    assert len(cached) == 2
    part = ImageDataModule("wds", root=str(root / "imagenet1k-train-{0001..0002}.tar"), num_workers=0, image_size=32)
    part.setup("fit")
    assert len(part.train_set) == 16 and len(part.val_set) == 8
    index = part.source.indices["train"]
    assert sorted(index.key_of(i) for i in range(len(index))) == [f"train_{i:05d}" for i in range(8, 24)]
    x, y = next(iter(part.val_dataloader()))
    assert x.shape == (8, 3, 32, 32) and y.tolist() == [(7 * i + 3) % 4 for i in range(8)]
    write_wds(tmp_path / "test", train=0, val=8, per_shard=8, labels={f"validation_{i:05d}": None for i in range(8)})
    for shard in (tmp_path / "test").glob("*.tar"):  # a test split without labels, as ImageNet's
        shard.rename(root / shard.name.replace("validation", "test"))
    tested = ImageDataModule("wds", root=str(root), num_workers=0, image_size=32)
    assert set(tested.source.indices) == {"train", "val"} and len(tested.source.load("test")) == 8
    mtimes = [p.stat().st_mtime_ns for p in cached]
    ImageDataModule("wds", root=str(root), num_workers=0, image_size=32)  # read from the cache
    assert [p.stat().st_mtime_ns for p in cached] == mtimes
    indexed = len(list((root / ".mixer_cache").glob("wds-train-*.npz")))  # the whole set and the pattern's subset
    shard = root / "imagenet1k-train-0003.tar"
    shard.write_bytes(shard.read_bytes())  # rewritten: another modification time
    ImageDataModule("wds", root=str(root), num_workers=0, image_size=32)
    assert len(list((root / ".mixer_cache").glob("wds-train-*.npz"))) == indexed + 1


def test_the_order_is_the_same_for_any_workers_and_ranks_and_keeps_to_shard_windows(tmp_path: Path) -> None:
    """`ShardOrder`: rank r of W takes the r-th part of each global batch of the one order of the epoch (a
    function of the seed and epoch): ranks disjoint, together the epoch less a remainder below one global
    batch, the same global batches for 1 × 8 and 2 × 4; each global batch drawn from one window of shards.
    Through the data module, 0 and 2 DataLoader workers give the same batches bit for bit."""
    shard_of = np.repeat(np.arange(6), 10)  # 6 shards of 10 samples
    dataset = list(range(60))
    one = ShardOrder(dataset, shard_of, batch_size=8, seed=3, window=2)
    ranks = [ShardOrder(dataset, shard_of, batch_size=4, seed=3, window=2, num_replicas=2, rank=r) for r in (0, 1)]
    for epoch in (0, 1):
        for sampler in (one, *ranks):
            sampler.set_epoch(epoch)
        single = [index for _, index in one]
        parts = [[index for _, index in r] for r in ranks]
        assert len(single) == 56 and len(set(single)) == 56  # 7 global batches of 8; 4 samples left over
        assert not set(parts[0]) & set(parts[1])
        for step in range(7):
            batch = single[8 * step : 8 * step + 8]
            assert set(batch) == set(parts[0][4 * step : 4 * step + 4]) | set(parts[1][4 * step : 4 * step + 4])
            assert len({shard_of[i] for i in batch}) <= 4  # within one window of 2 shards, or two when it straddles
    other = ShardOrder(dataset, shard_of, 8, seed=4, window=2)
    other.set_epoch(1)
    assert single != [index for _, index in other]  # another seed, another order
    resumed = ShardOrder(dataset, shard_of, batch_size=8, seed=3, window=2, resume=(1, 3))
    assert [k for k in resumed] == [k for k in one][24:]  # epoch 1 without its first 3 batches, same keys
    root = write_wds(tmp_path / "in1k", train=32, val=8, per_shard=8)
    batches = {}
    for workers in (0, 2):
        module = ImageDataModule(
            "wds", root=str(root), num_workers=workers, image_size=32, batch_size=4, auto_augment="rand-m9-mstd0.5-inc1"
        )
        module.setup("fit")
        batches[workers] = list(module.train_dataloader())
    assert len(batches[0]) == 8
    for (x0, y0), (x2, y2) in zip(batches[0], batches[2], strict=True):
        assert torch.equal(x0, x2) and torch.equal(y0, y2)


def _truncate_inside_last_image(shard: Path) -> None:
    with tarfile.open(shard) as tar:
        member = [m for m in tar.getmembers() if m.name.endswith(".jpg")][-1]
    shard.write_bytes(shard.read_bytes()[: member.offset_data + member.size // 2])


def _truncate_after_a_member(shard: Path) -> None:
    with tarfile.open(shard) as tar:
        member = tar.getmembers()[-4]
    shard.write_bytes(shard.read_bytes()[: member.offset_data + -(-member.size // 512) * 512])


BAD_SHARDS = {
    # name: (labels of write_wds, damage to a shard, shard, sample)
    "no_label": ({"train_00005": None}, None, "train-0000", "train_00005"),
    "label_too_large": (
        {"train_00009": b"9"},
        None,
        "train-0001",
        "train_00009",
    ),
    "label_negative": ({"train_00017": b"-1"}, None, "train-0002", "train_00017"),
    "label_not_a_number": (
        {"train_00003": b"cat"},
        None,
        "train-0000",
        "train_00003",
    ),
    "val_label_too_large": ({"validation_00002": b"4"}, None, "validation-00", "validation_00002"),
    "truncated_inside_an_image": ({}, _truncate_inside_last_image, "train-0003", "train_00031"),
    "truncated_after_a_member": (
        {},
        _truncate_after_a_member,
        "train-0002",
        "train_00022",
    ),
    "not_a_tar": ({}, lambda shard: shard.write_bytes(b"\x00garbage" * 100), "train-0001", None),
}


@pytest.mark.parametrize("case", list(BAD_SHARDS))
def test_a_bad_shard_is_one_line_naming_the_shard_and_the_sample(case: str, capsys: pytest.CaptureFixture) -> None:
    labels, damage, shard, sample = BAD_SHARDS[case]
    root = write_wds(Path("shards"), labels=labels)
    if damage is not None:
        damage(root / f"imagenet1k-{shard}.tar")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", WDS, "--data.root", "shards"])
    assert exit_info.value.code == 2
    line = last_error(capsys)
    assert field_of(line) == "data.root" and f"imagenet1k-{shard}.tar" in line, line  # the shard named ...
    assert sample is None or repr(sample) in line  # ... and the sample
    assert not Path("runs").exists()


def test_an_image_that_does_not_decode_names_its_shard_and_sample(capsys: pytest.CaptureFixture) -> None:
    root = write_wds(Path("shards"))
    shard = root / "imagenet1k-train-0002.tar"
    data = bytearray(shard.read_bytes())
    with tarfile.open(shard) as tar:
        member = next(m for m in tar.getmembers() if m.name == "train_00019.jpg")
    data[member.offset_data : member.offset_data + member.size] = b"\x00" * member.size  # same size, no JPEG
    shard.write_bytes(bytes(data))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", WDS, "--data.root", "shards", "--trainer.max_epochs", "1"])
    assert exit_info.value.code == 2
    line = last_error(capsys)
    assert field_of(line) == "data.root" and "imagenet1k-train-0002.tar, sample train_00019" in line, line


def test_pack_resumes_after_a_stop_and_refuses_another_packing(capsys: pytest.CaptureFixture) -> None:
    """The same command after a stop (a shard missing, one damaged) rewrites just those, byte for byte as
    before; another source or other settings into that folder, or a folder holding other files, is refused
    in one line (nothing written); `mixer data check` finds a shard whose bytes changed."""
    write_imagenet_folder(Path("imagenet"), classes=3, train=6, val=2)
    command = ["data", "pack", "imagenet", "out", "--shard_size", "5", "--prefix", "tiny"]
    main(command)
    shards = sorted(Path("out").glob("*.tar"))
    before = {p.name: p.read_bytes() for p in shards}
    manifest = Path("out/manifest.json").read_text()
    shards[0].unlink()
    shards[1].write_bytes(b"damaged")
    capsys.readouterr()
    main(command)
    out = capsys.readouterr().out
    assert "pack   resuming into out" in out and "already packed" in out
    assert {p.name: p.read_bytes() for p in sorted(Path("out").glob("*.tar"))} == before
    assert Path("out/manifest.json").read_text() == manifest
    for args in (["--shard_size", "4"], ["--no_shuffle"]):  # other settings into that folder: refused
        assert error_field(capsys, [*command, *args]) == "out"
    Path("other").mkdir()
    Path("other/notes.txt").write_text("mine")
    assert error_field(capsys, ["data", "pack", "imagenet", "other"]) == "out"  # a folder holding other files
    assert sorted(p.name for p in Path("other").iterdir()) == ["notes.txt"]
    damaged = bytearray(shards[2].read_bytes())
    damaged[700] ^= 0xFF
    shards[2].write_bytes(bytes(damaged))
    with pytest.raises(SystemExit):
        main(["data", "check", "out"])
    line = last_error(capsys)
    assert field_of(line) == "root" and shards[2].name in line


def test_pack_a_hugging_face_dataset_and_train_from_it(tmp_path: Path) -> None:
    write_hf_files(tmp_path / "hf", train=24, test=8, files=2, size=16)
    main(["data", "pack", str(tmp_path / "hf"), "shards", "--shard_size", "10"])
    manifest = read_json(Path("shards/manifest.json"))
    assert (
        manifest["classes"] == ["c0", "c1", "c2", "c3"] and manifest["splits"]["train"]["counts_per_class"] == [6] * 4
    )
    assert set(manifest["splits"]) == {"train", "test"}
    module = ImageDataModule("wds", root="shards", num_workers=0, batch_size=4, image_size=16)
    assert module.source.classes == manifest["classes"] and len(module.source.indices["train"]) == 24


# ------------------------------------------------------------------------------------- resuming


def test_a_crashed_run_from_shards_resumes_exactly_with_other_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Killed mid-epoch (in this process: an exception after step 5; last.ckpt of step 4), resumed with
    --ckpt_path last and 2 DataLoader workers: the weights, optimiser, schedule and figures of the
    uninterrupted run without workers (RandAugment, erasing, mixup/cutmix, stochastic depth on)."""
    from helpers.killer import Crash

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    write_wds(Path("shards"))
    run = ["--config", WDS, "--step_checkpoint.every_n_train_steps", "2"]
    main(["fit", *run, "--trainer.logger.init_args.name", "straight"])
    kill = kill_config(tmp_path, moment="train_batch_end", step=5, signal="CRASH")
    with pytest.raises(Crash):
        main(["fit", *run, "--config", kill, "--trainer.logger.init_args.name", "crashed"])
    crashed = Path("runs/crashed/version_0")
    assert torch.load(crashed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    main(["fit", *run, "--data.num_workers", "2", "--trainer.logger.init_args.name", "crashed", "--ckpt_path", "last"])
    assert_same_runs(Path("runs/straight/version_0"), crashed)


@pytest.mark.parametrize("dataset", ["wds", "folder"])
def test_making_an_evaluation_iterator_leaves_the_global_rng_alone(dataset: str, tmp_path: Path) -> None:
    """A DataLoader draws its workers' base seed when an iterator is made: from the global RNG unless it has a
    generator of its own. The evaluation loaders had none, so a run with persistent workers (the default)
    drew once, at its sanity check, and a resumed one again at its first validation: dropout and stochastic
    depth went another way after it (the slow SIGKILL tests with 2 workers failed on it)."""
    from helpers.fakedata import write_image_folder

    root = write_wds(tmp_path / "wds") if dataset == "wds" else write_image_folder(tmp_path / "folder")
    module = ImageDataModule(dataset, root=str(root), num_workers=0, batch_size=2, image_size=32)
    module.setup("fit")
    for loader in (module.train_dataloader(), module.val_dataloader()):
        state = torch.get_rng_state()
        iter(loader)
        assert torch.equal(state, torch.get_rng_state())


@pytest.mark.slow  # ~1 min: three `mixer fit` processes
def test_a_killed_run_from_shards_resumes_bit_for_bit(tmp_path: Path) -> None:
    """SIGKILL (no clean-up at all) mid-epoch in a real `mixer fit` reading shards with 2 workers; the
    resumed run equals the uninterrupted one."""
    write_wds(tmp_path / "shards")
    env = killer_env()
    run = ["--config", WDS, "--data.root", str(tmp_path / "shards"), "--data.num_workers", "2"]
    run += ["--step_checkpoint.every_n_train_steps", "3", "--trainer.max_epochs", "3"]
    subprocess.run(
        [MIXER, "fit", *run, "--trainer.logger.init_args.name", "straight"], check=True, env=env, cwd=tmp_path
    )
    killer = kill_config(tmp_path, moment="train_batch_end", step=13, signal="SIGKILL")
    interrupted = tmp_path / "runs" / "killed" / "version_0"
    kill_and_resume(MIXER, run, killer, env, (interrupted / "checkpoints" / "last.ckpt", 12), cwd=tmp_path)
    assert (interrupted / "config.resume1.yaml").is_file()  # resumed in its own run directory
    assert_same_runs(tmp_path / "runs" / "straight" / "version_0", interrupted)


# ------------------------------------------------------------------------------------ streaming


@pytest.fixture(autouse=True)
def _no_arrow_shutdown_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """`datasets` sleeps 5 s whenever a stream of parquet files ends (time for pyarrow's threads to close,
    apache/arrow#45214): nothing in an ImageNet epoch, most of a tiny test's. Not here (tests only).
    Older releases (the lowest we claim, datasets 3.0.1) have no such setting and no sleep."""
    monkeypatch.setattr("datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN", 0, raising=False)


def streaming_args(root: Path) -> list[str]:
    return [
        "--config",
        WDS,
        "--data.dataset",
        "hf",
        "--data.root",
        str(root),
        "--data.streaming",
        "true",
        "--data.num_classes",
        "null",
        "--data.val_split",
        "0",
        "--data.image_size",
        "16",
        "--model.net.patch_size",
        "4",
        "--data.num_workers",
        "2",
        "--trainer.logger.init_args.name",
        "stream",
    ]


def test_a_streamed_hugging_face_dataset_trains_and_says_how_it_resumes(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    write_hf_files(tmp_path / "hf", train=48, test=16, files=4, size=16)
    main(["fit", *streaming_args(tmp_path / "hf"), "--trainer.max_epochs", "1"])
    out = capsys.readouterr().out
    assert "data   hf (4 classes, 16×16×3): 48 train, 16 val images, batch 4" in out
    assert (
        "data   hf streaming: 48 training examples, 12 batches of 4 per process per epoch (2 workers × 1 processes); "
        "resumes exactly by replaying the interrupted epoch's stream, reading (not decoding) the batches it had "
        "trained on; the order depends on data.num_workers and the number of processes: resume with the same"
    ) in out
    (run,) = run_dirs("stream")
    assert read_json(run / "fit_summary.json")["steps"] == 12
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["data"]["class_names"] == [
        "c0",
        "c1",
        "c2",
        "c3",
    ]


def test_streamed_ranks_are_disjoint_and_a_bad_label_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two ranks (as DDP sets them) of a streamed dataset read disjoint examples, as many batches each;
    a label outside 0..num_classes-1 met in the stream is one line naming the split and the example."""
    from types import SimpleNamespace

    from mixer_lightning.data.streaming import stream_loader

    root = write_hf_files(tmp_path / "hf", train=48, test=16, files=4, size=8)
    module = ImageDataModule("hf", root=str(root), streaming=True, val_split=0, num_workers=0)
    seen = []
    for rank in (0, 1):
        trainer = SimpleNamespace(world_size=2, global_rank=rank, fit_loop=None, strategy=None)
        dataset = module.source.load("train")
        loader = stream_loader(dataset, module.transform(False), False, 4, 0, 16, trainer, 0, {"num_workers": 0})
        seen.append({tuple(x.flatten()[:32].tolist()) for images, _ in loader for x in images})
    assert len(seen[0]) == len(seen[1]) == 24 and not seen[0] & seen[1]
    bad = write_hf_files(tmp_path / "bad", train=8, test=4, files=1, size=8, classes=4)
    module = ImageDataModule("hf", root=str(bad), streaming=True, val_split=0, num_workers=0, num_classes=3)
    module.setup("fit")
    with pytest.raises(ConfigError) as error:
        list(module.val_dataloader())
    assert error.value.field == "data.label_column" and "example 3" in str(error.value)


def test_a_streamed_imagenet_layout_validates_on_its_validation_split(tmp_path: Path) -> None:
    """The hub's ImageNet streams with train, validation and a test split without labels (-1): validation
    validates (and tests), whatever data.val_split says, as no training image can be held out of a stream."""
    import datasets

    root = write_hf_files(tmp_path / "in1k", train=16, test=8, files=2, size=8)
    for path in (root / "data").glob("test-*.parquet"):
        path.rename(path.with_name(path.name.replace("test", "validation")))
    unlabelled = datasets.Dataset.from_parquet(str(root / "data" / "validation-00000-of-00002.parquet"))
    unlabelled.map(lambda row: {"label": -1}).to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    module = ImageDataModule("hf", root=str(root), streaming=True, num_workers=0)  # val_split: 0.1 (default)
    module.setup("fit")
    assert module.val_set.split == "validation" and len(module.val_set) == 8
    module.setup("test")
    assert module.test_set.split == "validation"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_streamed_epoch_replayed_from_any_batch_gives_the_rest_of_its_batches(workers: int, tmp_path: Path) -> None:
    """The granularity of a streamed source's resume: the loader of a run resumed after `skip` batches of
    an epoch yields exactly the batches the uninterrupted epoch yields after them (augmentation included)."""
    from types import SimpleNamespace

    from mixer_lightning.data.streaming import stream_loader

    root = write_hf_files(tmp_path / "hf", train=24, test=8, files=4, size=16)
    module = ImageDataModule("hf", root=str(root), streaming=True, val_split=0, auto_augment="rand-m9-mstd0.5-inc1")
    progress = SimpleNamespace(epoch_progress=SimpleNamespace(current=SimpleNamespace(processed=1)))
    trainer = SimpleNamespace(world_size=1, global_rank=0, fit_loop=progress, strategy=None)

    def epoch(skip: int) -> list[torch.Tensor]:
        stream = module.source.load("train")
        loader = stream_loader(stream, module.transform(True), True, 4, 7, 16, trainer, skip, {"num_workers": workers})
        return [x for x, _ in loader]

    whole = epoch(0)
    assert len(whole) == 6
    for skip in (1, 3, 4):
        assert_same(epoch(skip), whole[skip:])


@pytest.mark.slow  # ~20 s: three fits with 2 workers restarted every epoch (the fast guard: the test above)
def test_a_crashed_streamed_run_resumes_exactly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stream of the interrupted epoch is replayed (its first batches read, not decoded) with the same
    2 workers: the resumed run equals the uninterrupted one."""
    from helpers.killer import Crash

    monkeypatch.setenv("MIXER_TRUSTED_MODULES", "helpers")
    write_hf_files(tmp_path / "hf", train=24, test=8, files=4, size=16)
    run = [*streaming_args(tmp_path / "hf"), "--step_checkpoint.every_n_train_steps", "3", "--data.mixup", "0"]
    main(["fit", *run, "--trainer.logger.init_args.name", "straight"])
    kill = kill_config(tmp_path, moment="train_batch_end", step=4, signal="CRASH")
    with pytest.raises(Crash):
        main(["fit", *run, "--config", kill])
    stopped = Path("runs/stream/version_0")
    checkpoint = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 3 and checkpoint["ImageDataModule"] == {
        "stream_layout": {"workers": 2, "processes": 1}
    }
    main(["fit", *run, "--ckpt_path", "last"])
    assert_same_runs(Path("runs/straight/version_0"), stopped)


# ------------------------------------------------------------------------------------------ DDP


@pytest.mark.slow  # ~2 min: 2-process DDP runs (gloo) and 1-process runs
@pytest.mark.parametrize("source", ["wds", "hf_streaming"])
def test_ddp_ranks_train_on_disjoint_samples_that_cover_the_epoch(source: str, tmp_path: Path) -> None:
    """2 CPU processes (gloo): each rank's images are its own, and together they are, every epoch, what one
    process with twice the batch trains on (wds: the same global batches; streaming: the examples of its
    data files, as Hugging Face splits them by rank)."""
    if source == "wds":
        write_wds(tmp_path / "data", train=48, per_shard=8)
        data = ["--data.root", str(tmp_path / "data")]
    else:
        write_hf_files(tmp_path / "data", train=48, test=16, files=4, size=16)
        data = streaming_args(tmp_path / "data")[2:] + ["--data.num_workers", "1"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "MIXER_TRUSTED_MODULES": "helpers",
    }
    common = [MIXER, "fit", "--config", WDS, *data, "--data.mixup", "0", "--data.cutmix", "0"]
    common += ["--trainer.deterministic", "false", "--trainer.callbacks+=helpers.recorder.ImageRecorder"]
    batches = (["--data.batch_size", "8"], ["--data.batch_size", "4"])  # the same global batch
    one, ranks = record_one_and_two_processes(common, tmp_path, env, batches)
    assert len(one) == 2 * 48 and all(len(r) == 48 for r in ranks)  # 48 images, 2 epochs, 6 steps of 8
    for epoch in ("0", "1"):
        seen = [{line for line in r if line.startswith(epoch + ":")} for r in ranks]
        assert len(seen[0]) == len(seen[1]) == 24 and not seen[0] & seen[1]
        if source == "wds":  # the same augmented images: keyed by (seed, epoch, sample), not by rank or batch
            assert seen[0] | seen[1] == {line for line in one if line.startswith(epoch + ":")}
        labels = sorted(line.rsplit(":", 1)[1] for line in seen[0] | seen[1])
        assert labels == sorted(line.rsplit(":", 1)[1] for line in one if line.startswith(epoch + ":"))
    assert read_json(tmp_path / "runs" / "two" / "version_0" / "fit_summary.json")["steps"] == 2 * 6
    if source == "hf_streaming":  # its workers start every epoch: by spawn under DDP where a fork can deadlock
        ddp = "spawn" if fork_may_deadlock() else "default"
        assert (tmp_path / "one" / "workers0.txt").read_text().split() == ["default"] * 2
        assert [(tmp_path / "two" / f"workers{r}.txt").read_text().split() for r in (0, 1)] == [[ddp] * 2] * 2


def test_workers_start_by_spawn_in_a_run_of_several_processes_where_a_fork_can_deadlock() -> None:
    """CPython before 3.11.10 (3.10.15, 3.9.20; gh-112275): a child forked while another thread holds the
    interpreter's thread-list lock deadlocks; under DDP the process group's threads take it, and a two-process
    streaming run hung for good at an epoch's start (its loader forks workers every epoch). There, and only
    there, the loaders start their workers by spawn."""
    from mixer_lightning.data.sampling import leave_stops_to_the_run, worker_options

    assert all(fork_may_deadlock(v) for v in [(3, 11, 7), (3, 11, 9), (3, 10, 13), (3, 10, 14), (3, 9, 19)])
    assert not any(fork_may_deadlock(v) for v in [(3, 11, 10), (3, 10, 15), (3, 9, 20), (3, 12, 0), (3, 13, 1)])

    class Ranks:
        world_size = 2

    spawn = "spawn" if fork_may_deadlock() else None
    assert worker_options(2, Ranks()) == {"worker_init_fn": leave_stops_to_the_run, "multiprocessing_context": spawn}
    for trainer in (None, type("One", (), {"world_size": 1})()):
        assert worker_options(2, trainer)["multiprocessing_context"] is None
    assert worker_options(0, Ranks()) == {"worker_init_fn": None, "multiprocessing_context": None}


@pytest.mark.slow  # ~1 min: six spawned workers, each importing torch
@pytest.mark.parametrize("source", ["folder", "hf", "wds"])
def test_every_sources_loaders_give_the_same_batches_from_spawned_workers(source: str, tmp_path: Path) -> None:
    """Spawned workers (a run of several processes where a fork can deadlock) get their dataset, sampler and
    collate function pickled: each source's training and validation loaders give the same first batch
    from a spawned worker as from a forked one (the augmentation is keyed by seed, epoch and image)."""
    from helpers.fakedata import write_hf, write_image_folder

    common = dict(num_workers=1, image_size=16, batch_size=4)
    if source == "folder":
        data = ImageDataModule("folder", root=str(write_image_folder(tmp_path / "d")), val_split=0.25, **common)
    elif source == "hf":
        data = ImageDataModule("hf", root=str(write_hf(tmp_path / "d")), val_split=0.25, pipeline="pil", **common)
    else:
        data = ImageDataModule("wds", root=str(write_wds(tmp_path / "d", train=16, per_shard=8)), **common)
    data.setup("fit")
    for made in (data.train_dataloader(), data.val_dataloader()):
        assert made.multiprocessing_context is None  # one process: the platform's start (fork on Linux)
        spawned = torch.utils.data.DataLoader(
            made.dataset,
            batch_sampler=made.batch_sampler,
            collate_fn=made.collate_fn,
            num_workers=1,
            worker_init_fn=made.worker_init_fn,
            multiprocessing_context="spawn",
        )
        (x, y), (xs, ys) = next(iter(made)), next(iter(spawned))
        assert torch.equal(x, xs) and torch.equal(y, ys)


# ----------------------------------------------------------------------------------------- bench


def test_bench_data_measures_folder_and_shards_side_by_side(capsys: pytest.CaptureFixture) -> None:
    main(["bench", "--data", "--data_images", "16", "--repeats", "1", "--gpu_images_per_s", "1000", "--json"])
    report = json.loads(capsys.readouterr().out)
    rates = report["per_core_img_s"]
    assert set(rates) == {"folder", "shards"} and all(v > 0 for r in rates.values() for v in r.values())
    assert report["shards_vs_folder"]["pipeline"] == pytest.approx(
        rates["shards"]["pipeline"] / rates["folder"]["pipeline"]
    )
    assert report["cores_needed"] == pytest.approx(1000 / rates["shards"]["pipeline"])
    assert report["recipe"] == "configs/imagenet_mixer_b16.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--data", "--model", "mixer_s16"])
    assert exit_info.value.code == 2


def test_the_imagenet_shards_overlay_reads_the_hub_layout() -> None:
    """configs/data/imagenet_wds.yaml over the ImageNet recipe: the hub's shards, 1000 classes."""
    from mixer_lightning.safety.config_files import load_configs

    overlay = load_configs([str(TEST_CONFIGS.parent.parent / "configs" / "data" / "imagenet_wds.yaml")])
    data = overlay["data"]["init_args"]
    assert data["dataset"] == "wds" and data["num_classes"] == 1000
    assert yaml.safe_dump(overlay)  # plain YAML
