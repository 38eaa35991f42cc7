"""An evaluation's results say which checkpoint they are of, and never replace another checkpoint's
(docs/reliability.md, "Settings mean what they say"): ``mixer test`` of best.ckpt then of last.ckpt
used to replace test_metrics.json, which named no checkpoint."""

from __future__ import annotations

import hashlib

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
FIGURES = {"test/loss", "test/acc1", "test/acc5"}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_checkpoints_results_name_it_and_are_kept(capsys) -> None:
    main(["fit", "--config", TINY])
    (run,) = run_dirs("digits_mixer")
    best, last = run / "checkpoints" / "best.ckpt", run / "checkpoints" / "last.ckpt"
    main(["test", "--ckpt_path", str(best)])
    first = (run / "test_metrics.json").read_bytes()
    main(["test", "--ckpt_path", str(last)])
    assert (run / "test_metrics.json").read_bytes() == first  # best.ckpt's results are not replaced
    of_best, of_last = read_json(run / "test_metrics.json"), read_json(run / "test_metrics.last.json")
    assert FIGURES <= set(of_best) and FIGURES <= set(of_last)
    assert of_best["checkpoint"]["path"] == "checkpoints/best.ckpt" and of_best["config"] == "config.test1.yaml"
    assert of_best["checkpoint"]["sha256"] == sha256(best) and of_last["checkpoint"]["sha256"] == sha256(last)
    assert (of_last["checkpoint"]["epoch"], of_last["checkpoint"]["global_step"]) == (2, 8)  # 2 epochs of 4 steps
    assert of_last["config"] == "config.test2.yaml" and "Test metrics: " in capsys.readouterr().out
    # The same checkpoint again rewrites its own file only; validate records the same way.
    kept = (run / "test_metrics.last.json").read_bytes()
    main(["test", "--ckpt_path", str(best)])
    assert read_json(run / "test_metrics.json")["config"] == "config.test3.yaml"
    assert (run / "test_metrics.last.json").read_bytes() == kept
    assert sorted(p.name for p in run.glob("test_metrics*")) == ["test_metrics.json", "test_metrics.last.json"]
    main(["validate", "--ckpt_path", str(last)])
    assert read_json(run / "val_metrics.json")["checkpoint"]["sha256"] == sha256(last)


def test_an_evaluation_cut_by_a_batch_limit_says_so_and_records_how_many(capsys) -> None:
    """Issue 26, T8: ``--trainer.limit_test_batches 2`` tests 64 of the 359 test images: test_metrics.json
    records the count (`mixer sweep report` flags the row); a whole split records ``partial: false``."""
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    last = run / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    main(["test", "--ckpt_path", str(last), "--trainer.limit_test_batches", "2"])
    partial = read_json(run / "test_metrics.json")
    assert (partial["images"], partial["of"], partial["partial"]) == (64, 359, True)
    main(["validate", "--ckpt_path", str(last), "--trainer.limit_val_batches", "0.5"])
    val = read_json(run / "val_metrics.json")
    assert (val["images"], val["of"], val["partial"]) == (64, 144, True)
    main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt"), "--trainer.limit_test_batches", "1.0"])
    whole = read_json(run / "test_metrics.best.json")  # test_metrics.json is last.ckpt's
    assert (whole["images"], whole["of"], whole["partial"]) == (359, 359, False)


def test_a_partial_evaluation_never_replaces_the_whole_splits_results_of_the_same_checkpoint(capsys) -> None:
    """``mixer test --trainer.limit_test_batches 2`` of a checkpoint already tested on the whole split used
    to overwrite its test_metrics.json (same checkpoint, so "its own file") with the figures of 64 images:
    the partial results now go beside it, and a later whole-split test still rewrites its own file."""
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    last = run / "checkpoints" / "last.ckpt"
    main(["test", "--ckpt_path", str(last)])
    whole = (run / "test_metrics.json").read_bytes()
    assert read_json(run / "test_metrics.json")["partial"] is False
    capsys.readouterr()
    main(["test", "--ckpt_path", str(last), "--trainer.limit_test_batches", "2"])
    assert (run / "test_metrics.json").read_bytes() == whole
    partial = read_json(run / "test_metrics.last.json")
    assert (partial["images"], partial["partial"]) == (64, True)
    main(["test", "--ckpt_path", str(last), "--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "1"])
    assert read_json(run / "test_metrics.last.json")["images"] == 32  # a partial replaces a partial
    main(["validate", "--ckpt_path", str(last), "--trainer.limit_val_batches", "1.0"])  # TINY sets 2
    main(["validate", "--ckpt_path", str(last), "--trainer.limit_val_batches", "0.5"])
    assert read_json(run / "val_metrics.json")["partial"] is False
    assert read_json(run / "val_metrics.last.json")["partial"] is True
    main(["test", "--ckpt_path", str(last)])  # the whole split again: its own file, nothing new
    assert read_json(run / "test_metrics.json")["config"] == "config.test4.yaml"
    assert sorted(p.name for p in run.glob("test_metrics*")) == ["test_metrics.json", "test_metrics.last.json"]
