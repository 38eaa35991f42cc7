"""What a run's TensorBoard shows, read back from its event files: the run named on the command line, no
constant ``hp_metric``, the learning rate of each parameter group by its name, and the test metrics of
`mixer test` of the run's checkpoint in the run itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import TEST_CONFIGS, read_json
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
SHORT = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.log_every_n_steps", "1"]


def scalars(run: Path) -> dict[str, list[float]]:
    """Every scalar of the run's event files (all of them: one per process that wrote to the run), by tag."""
    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: [event.value for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_named_run_has_named_learning_rates_no_hp_metric_and_its_test_metrics(capsys) -> None:
    name = ["--trainer.logger.init_args.name", "baseline", "--trainer.logger.init_args.version", "lr3e-3"]
    main(["fit", "--config", TINY, *SHORT, *name])
    run = Path("runs", "baseline", "lr3e-3")
    tags = scalars(run)
    assert "hp_metric" not in tags
    assert {"lr-AdamW/decay", "lr-AdamW/no_decay"} <= set(tags), sorted(tags)
    assert not [tag for tag in tags if "/pg" in tag]

    main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    assert [p.name for p in Path("runs", "baseline").iterdir()] == ["lr3e-3"]  # no new version_N
    tested, tags = read_json(run / "test_metrics.json"), scalars(run)
    for metric in ("test/acc1", "test/acc5", "test/loss"):
        assert tags[metric] == [pytest.approx(tested[metric])]
    assert "hp_metric" not in tags
    capsys.readouterr()


def test_layer_decay_groups_are_named_by_layer_and_decay() -> None:
    main(["fit", "--config", TINY, *SHORT, "--model.layer_decay", "0.75"])
    tags = {tag for tag in scalars(Path("runs", "digits_mixer", "version_0")) if tag.startswith("lr-")}
    # the MLPMixer's layers (group_matcher): 0 the stem, 1 its one block, 2 the head
    assert {"lr-AdamW/layer_0_decay", "lr-AdamW/layer_1_no_decay", "lr-AdamW/layer_2_decay"} <= tags, sorted(tags)
    assert not [tag for tag in tags if "/pg" in tag]
