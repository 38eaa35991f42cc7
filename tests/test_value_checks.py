"""Settings mean what they say: a batch count is a count (Lightning's meaning), from a flag or a config file."""

from __future__ import annotations

import pytest
import yaml

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")


def test_an_integer_batch_limit_counts_batches(tmp_path, capsys) -> None:
    main(["fit", "--config", TINY, "--trainer.limit_train_batches", "1", "--trainer.max_epochs", "2"])
    (run,) = run_dirs("digits_mixer")
    assert read_json(run / "fit_summary.json")["steps"] == 2  # one batch per epoch
    capsys.readouterr()
    overlay = tmp_path / "limits.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {name: 1 for name in LIMITS[1:]}}))
    with pytest.raises(SystemExit):
        main(["fit", "--config", TINY, "--config", str(overlay), "--trainer.limit_train_batches=1", "--print_config"])
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert [(trainer[name], type(trainer[name])) for name in LIMITS] == [(1, int)] * 4
