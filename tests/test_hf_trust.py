"""Hugging Face datasets read as the files say (issue 47 item 7; issue 46 item 8): a streamed split's size
from its parquet footers, not a stale dataset card; `datasets`' own progress lines kept out of the logs and
its Arrow cache where docs/data.md says."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import TEST_CONFIGS, read_json, run_dirs
from helpers.fakedata import write_hf_files
from mixer_lightning.cli import main

WDS = str(TEST_CONFIGS / "wds_mixer.yaml")


@pytest.fixture(autouse=True)
def _no_arrow_shutdown_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """As tests/test_cluster_data.py's: `datasets` sleeps 5 s whenever a parquet stream ends (tests only)."""
    monkeypatch.setattr("datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN", 0, raising=False)


def stale_card(root: Path, sizes: dict[str, int]) -> None:
    """A dataset card (README.md) whose ``dataset_info`` gives `sizes` as the splits' numbers of examples."""
    splits = "".join(
        f"  - name: {name}\n    num_examples: {n}\n    num_bytes: {100 * n}\n" for name, n in sizes.items()
    )
    features = "  - name: image\n    dtype: image\n  - name: label\n    dtype:\n      class_label:\n        names:\n"
    names = "".join(f"          '{i}': c{i}\n" for i in range(4))
    (root / "README.md").write_text(f"---\ndataset_info:\n  features:\n{features}{names}  splits:\n{splits}---\n")


def test_a_streamed_split_is_sized_by_its_parquet_footers_not_a_stale_card(tmp_path, capsys) -> None:
    root = write_hf_files(tmp_path / "hf", train=16, test=40, files=2, size=8)
    stale_card(root, {"train": 16, "test": 8})
    stream = ["--config", WDS, "--data.dataset", "hf", "--data.root", str(root), "--data.streaming", "true"]
    stream += ["--data.num_classes", "null", "--data.val_split", "0", "--data.image_size", "8"]
    stream += ["--model.net.patch_size", "4", "--trainer.logger.init_args.name", "stream"]
    main(["fit", *stream, "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "0"])
    (run,) = run_dirs("stream")
    capsys.readouterr()
    main(["test", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    out = capsys.readouterr().out
    record = read_json(run / "test_metrics.json")
    assert record["images"] == 40 and record["partial"] is False
    said = [line for line in out.splitlines() if "'test'" in line and " 8 " in line and " 40" in line]
    assert len(said) == 1  # the card's disagreement


def test_fit_on_a_hugging_face_dataset_keeps_datasets_bars_out_and_says_where_its_cache_is(
    tmp_path, capsys, monkeypatch
) -> None:
    import datasets.config

    from helpers.fakedata import write_hf

    cache = tmp_path / "hf_datasets_cache"  # HF_DATASETS_CACHE, as `datasets` reads it when imported
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    root = write_hf(tmp_path / "hf", train=16, test=8, size=8, classes=4)
    capsys.readouterr()
    data = ["--data.dataset", "hf", "--data.root", str(root), "--data.val_split", "0", "--data.batch_size", "8"]
    main(["fit", "--config", str(TEST_CONFIGS / "digits_mixer.yaml"), *data, "--trainer.max_epochs", "1"])
    out, err = capsys.readouterr()
    assert "Generating" not in err and "examples/s" not in err  # datasets' progress bars
    (line,) = [line for line in out.splitlines() if str(cache) in line]
    assert line.startswith("data   ") and "HF_DATASETS_CACHE" in line
    assert any(cache.rglob("*.arrow"))
