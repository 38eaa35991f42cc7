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
