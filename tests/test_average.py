"""`mixer average`: the mean of several checkpoints' weights, as timm's avg_checkpoints.py, written as a
checkpoint that `mixer test` and `mixer predict` take; checkpoints of different models, or of RP networks
that drew other permutations, are refused in one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import TEST_CONFIGS, accuracy, error_field
from mixer_lightning.cli import main


@pytest.fixture(scope="module")
def top_k(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A two-epoch `mixer fit` of the tiny digits Mixer keeping both epochs' checkpoints (top-k 2):
    its run directory and the two checkpoint files."""
    root = tmp_path_factory.mktemp("average_run")
    main(
        [
            "fit",
            "--config",
            str(TEST_CONFIGS / "digits_mixer.yaml"),
            "--trainer.max_epochs",
            "2",
            "--trainer.limit_train_batches",
            "3",
            "--trainer.limit_val_batches",
            "1",
            "--checkpoint.save_top_k",
            "2",
            "--trainer.logger.init_args.save_dir",
            str(root),
        ]
    )
    run = root / "digits_mixer" / "version_0"
    files = sorted(str(path) for path in (run / "checkpoints").glob("epoch=*.ckpt"))
    assert len(files) == 2, files
    return run, files


def test_average_is_the_mean_and_a_checkpoint_test_and_predict_take(
    top_k, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, (a, b) = top_k
    out = run / "checkpoints" / "avg.ckpt"  # beside them: `mixer test` finds the run's config.yaml
    main(["average", "--ckpt_path", a, b, "--out", str(out)])
    printed = capsys.readouterr().out
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert "the mean of 2 MLPMixer checkpoints" in printed and digest in printed

    inputs = [torch.load(path, weights_only=True) for path in (a, b)]
    averaged = torch.load(out, weights_only=True)
    state = averaged["state_dict"]
    network = [k for k in inputs[0]["state_dict"] if k.startswith("net.")]
    assert sorted(state) == sorted(network)  # the training metrics' states are left out
    assert any(not torch.equal(inputs[0]["state_dict"][k], inputs[1]["state_dict"][k]) for k in network)
    for key in network:
        mean = (inputs[0]["state_dict"][key].double() + inputs[1]["state_dict"][key].double()) / 2
        assert state[key].dtype == torch.float32
        torch.testing.assert_close(state[key].double(), mean, rtol=0, atol=1e-7)
    # Which checkpoints were averaged, by their bytes; the data facts they share; the hyper-parameters.
    records = averaged["mixer_average"]["checkpoints"]
    assert [r["path"] for r in records] == [a, b]
    assert [r["sha256"] for r in records] == [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (a, b)]
    assert [r["epoch"] for r in records] == [0, 1] and averaged["epoch"] == 1
    assert averaged["data"] == inputs[0]["data"] and averaged["data"]["class_names"][:2] == ["0", "1"]
    assert averaged["hyper_parameters"] == inputs[0]["hyper_parameters"]
    assert "optimizer_states" not in averaged and "callbacks" not in averaged

    main(["test", "--ckpt_path", str(out)])
    results = sorted(run.parent.glob("version_*/test_metrics*.json"))
    assert results, "mixer test wrote no results"
    record = json.loads(results[-1].read_text())
    assert record["test/acc1"] == pytest.approx(accuracy(out, run / "config.yaml"))  # the mean's own figure
    assert record["checkpoint"]["sha256"] == digest

    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 8), 40 * i, np.uint8), "L").save(photos / f"{i}.png")
    main(["predict", "--ckpt_path", str(out), "--data.predict_root", "photos", "--prediction_writer.output", "p.csv"])
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 4  # header + 3 images, no data config given

    # An existing output is kept unless --overwrite, which replaces it (atomically).
    assert error_field(capsys, ["average", "--ckpt_path", a, b, "--out", str(out)]) == "out"
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest
    main(["average", "--ckpt_path", b, a, "--out", str(out), "--overwrite", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "MLPMixer" and [r["path"] for r in report["checkpoints"]] == [b, a]


def test_checkpoints_of_other_models_are_refused_in_one_line(
    top_k, trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (a, b) = top_k
    rp = trained("rp_s_mixer")
    assert error_field(capsys, ["average", "--ckpt_path", a, rp, "--out", "avg.ckpt"]) == "ckpt_path"
    assert not Path("avg.ckpt").exists()

    # Same tensors, another architecture hyper-parameter (LayerNorm ε): other functions, refused.
    checkpoint = torch.load(b, weights_only=True)
    checkpoint["hyper_parameters"]["net"]["init_args"]["norm_eps"] = 1e-3
    torch.save(checkpoint, "eps.ckpt")
    assert error_field(capsys, ["average", "--ckpt_path", a, "eps.ckpt", "--out", "avg.ckpt"]) == "ckpt_path"
    # Another dropout is a training setting: averaged.
    checkpoint["hyper_parameters"]["net"]["init_args"].update(norm_eps=1e-6, drop_rate=0.5)
    torch.save(checkpoint, "dropout.ckpt")
    main(["average", "--ckpt_path", a, "dropout.ckpt", "--out", "dropout_avg.ckpt"])

    # An RP network of another seed drew other permutations: its weights do not correspond.
    checkpoint = torch.load(rp, weights_only=True)
    index = next(k for k, v in checkpoint["state_dict"].items() if k.endswith("permute_in.index"))
    checkpoint["state_dict"][index] = checkpoint["state_dict"][index].flip(0)
    for key, value in checkpoint["state_dict"].items():
        if value.is_floating_point():
            checkpoint["state_dict"][key] = value + 0.01
    torch.save(checkpoint, "other_seed.ckpt")
    assert error_field(capsys, ["average", "--ckpt_path", rp, "other_seed.ckpt", "--out", "avg.ckpt"]) == "ckpt_path"

    # One checkpoint, or one twice, is no average.
    assert error_field(capsys, ["average", "--ckpt_path", a, "--out", "avg.ckpt"]) == "ckpt_path"
    assert error_field(capsys, ["average", "--ckpt_path", a, a, "--out", "avg.ckpt"]) == "ckpt_path"
    assert not Path("avg.ckpt").exists()


def test_the_last_epoch_given_twice_as_its_top_k_file_and_last_ckpt_is_refused(
    top_k, capsys: pytest.CaptureFixture[str]
) -> None:
    """last.ckpt and the top-k file of the last epoch differ in their bytes (loop and callback state), not in
    their weights: averaging both would weigh that epoch twice."""
    run, files = top_k
    last = str(run / "checkpoints" / "last.ckpt")
    assert Path(last).read_bytes() != Path(files[-1]).read_bytes()
    assert error_field(capsys, ["average", "--ckpt_path", *files, last, "--out", "avg.ckpt"]) == "ckpt_path"
    assert not Path("avg.ckpt").exists()
