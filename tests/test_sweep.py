"""`mixer sweep`: emitted grid configs and scripts, an in-process run, and the report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from conftest import CONFIGS, TEST_CONFIGS
from mixer_lightning.cli import main

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")


def test_emit_the_paper_grid_with_scripts(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", str(CONFIGS / "cifar10_fig5_s_mixer.yaml"), "--omega", "2**18",
          "--seeds", "0,1,2", "--emit", "sweeps/fig5"])  # fmt: skip
    manifest = json.loads(Path("sweeps/fig5/sweep.json").read_text())
    points = sorted({(r["C"], r["S"]) for r in manifest["runs"]})
    assert points == [(16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]
    assert len(manifest["runs"]) == 18 and {r["seed"] for r in manifest["runs"]} == {0, 1, 2}
    config = yaml.safe_load(Path("sweeps/fig5/configs/C48_S83_seed2.yaml").read_text())
    assert config["seed_everything"] == 2
    assert config["model"]["init_args"]["channels"] == 48 and config["model"]["init_args"]["omega"] == 262144
    assert config["model"]["init_args"]["tokens"] is None
    assert config["trainer"]["logger"]["init_args"]["save_dir"] == "sweeps/fig5/runs"
    assert config["trainer"]["max_epochs"] == 200  # the rest of the base config is kept
    for script in ("run_all.sh", "slurm_array.sh"):
        text = Path("sweeps/fig5", script).read_text()
        assert text.count("sweeps/fig5/configs/") == 18 and "mixer fit" in text and "mixer test" in text
    assert "#SBATCH --array=0-17" in Path("sweeps/fig5/slurm_array.sh").read_text()
    # The emitted config is a ready config: the real parser accepts it.
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "sweeps/fig5/configs/C48_S83_seed2.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])["model"]["init_args"]["omega"] == 262144


def test_imagenet_patch_size_sweep() -> None:
    main(["sweep", "--config", str(CONFIGS / "imagenet_fig6_mlp_mixer.yaml"), "--omega", "290217984", "--gamma", "4",
          "--patch_sizes", "7,8,14,16,28,32", "--emit", "sweeps/in1k"])  # fmt: skip
    runs = json.loads(Path("sweeps/in1k/sweep.json").read_text())["runs"]
    assert [(r["P"], r["C"], r["S"]) for r in runs] == [
        (7, 147, 923), (8, 192, 779), (14, 588, 283), (16, 768, 196), (28, 2352, 26), (32, 3072, 15)
    ]  # fmt: skip
    config = yaml.safe_load(Path("sweeps/in1k/configs/P16_C768_S196_seed0.yaml").read_text())
    assert config["model"]["init_args"]["patch_size"] == 16 and config["model"]["init_args"]["gamma"] == 4


def test_run_here_then_report(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--seeds", "0",
          "--run", "sweeps/tiny"])  # fmt: skip
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--seeds", "0,1",
          "--run", "sweeps/tiny"])  # a second seed for C = 4 joins the sweep; finished runs are not repeated
    with open("sweeps/tiny/summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert [(row["C"], row["S"], row["seeds"]) for row in summary] == [("4", "20", "2"), ("8", "12", "1")]
    assert all(0.0 <= float(row["test_error_mean"]) <= 1.0 for row in summary)
    assert Path("sweeps/tiny/error_vs_width.png").stat().st_size > 5000
    assert Path("sweeps/tiny/error_vs_channels.png").stat().st_size > 5000
    capsys.readouterr()
    main(["sweep", "report", "sweeps/tiny", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(row["point"], row["seeds"]) for row in report["summary"]] == [("C4_S20", 2), ("C8_S12", 1)]
    with open("sweeps/tiny/report.csv") as f:
        assert len(list(csv.DictReader(f))) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--omega", "1000", "--emit", "x", "--run", "y"], "emit: give exactly one of --emit DIR or --run DIR"),
        (["--omega", "1000", "--channels", "4,-8", "--emit", "x"], "channels: needs positive integers"),
        (["--omega", "3", "--channels", "8", "--emit", "x"], "omega: 3 is unreachable with channels=8"),
        (["--omega", "1000", "--gamma", "2", "--emit", "x"], "gamma: the s_mixer family has γ = 1"),
        (["--omega", "2000", "--emit", "earlier"], "emit: 'earlier' holds a sweep at Ω = 1,000"),
    ],
)
def test_bad_sweeps(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "earlier"])
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--config", TINY_S_MIXER, *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_report_of_a_directory_that_is_not_a_sweep(capsys: pytest.CaptureFixture) -> None:
    Path("empty").mkdir()
    with pytest.raises(SystemExit):
        main(["sweep", "report", "empty"])
    assert "directories: 'empty' is not a sweep directory" in capsys.readouterr().err
