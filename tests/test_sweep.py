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
TINY_SW_MLP = str(TEST_CONFIGS / "sw_mlp_digits.yaml")


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


def test_emit_the_paper_sw_mlp_density_grid(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", str(CONFIGS / "cifar10_fig5_sw_mlp.yaml"), "--omega", "2**18", "--emit", "sweeps/sw"])
    manifest = json.loads(Path("sweeps/sw/sweep.json").read_text())
    # Fig. 5's SW-MLP arm: 1-p = 0.1 ... 0.9 at Ω = 2^18 gives m = √(Ω/p) = 540, 612, 724, 935, 1619 (eq. S.43).
    assert [(r["p"], r["m"]) for r in manifest["runs"]] == [(0.9, 540), (0.7, 612), (0.5, 724), (0.3, 935), (0.1, 1619)]
    assert manifest["gamma"] == 1.0 and all(r["C"] is None for r in manifest["runs"])
    config = yaml.safe_load(Path("sweeps/sw/configs/p0.3_m935_seed0.yaml").read_text())
    expected = {"density": 0.3, "omega": 262144, "width": None, "impl": "sparse"}
    assert expected.items() <= config["model"]["init_args"].items()
    assert "p = 0.3, m = 935" in Path("sweeps/sw/configs/p0.3_m935_seed0.yaml").read_text().splitlines()[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "sweeps/sw/configs/p0.3_m935_seed0.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])["model"]["init_args"]["density"] == 0.3


def test_sw_mlp_sweep_runs_here_and_reports_against_width(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_SW_MLP, "--omega", "4096", "--densities", "0.5,0.25", "--seeds", "0",
          "--run", "sweeps/sw_tiny"])  # fmt: skip
    capsys.readouterr()
    main(["sweep", "report", "sweeps/sw_tiny", "--json"])
    report = json.loads(capsys.readouterr().out)
    # γ = 2 (MLP blocks): m = √(Ω/(γp)) = 64 and 91.
    assert [(row["point"], row["m"], row["C"]) for row in report["summary"]] == [("p0.5_m64", 64, None),
                                                                               ("p0.25_m91", 91, None)]  # fmt: skip
    assert all(0.0 <= row["test_error_mean"] <= 1.0 for row in report["summary"])
    assert Path("sweeps/sw_tiny/error_vs_width.png").stat().st_size > 5000
    assert not Path("sweeps/sw_tiny/error_vs_channels.png").exists()  # an SW-MLP has no C
    config = yaml.safe_load(Path("sweeps/sw_tiny/configs/p0.25_m91_seed0.yaml").read_text())
    assert config["model"]["init_args"]["gamma"] == 2.0  # the γ that m = 91 was solved with
    main(["sweep", "report", "sweeps/sw_tiny"])
    assert "p0.5_m64" in capsys.readouterr().out


def test_sw_mlp_sweep_takes_gamma_for_mlp_blocks_only(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_SW_MLP, "--omega", "4096", "--gamma", "4", "--densities", "0.5", "--emit", "g4"])
    (run,) = json.loads(Path("g4/sweep.json").read_text())["runs"]
    assert (run["m"], run["p"]) == (45, 0.5)  # m = √(Ω/(γp)) = √(4096/2) ≈ 45
    assert yaml.safe_load(Path(run["config"]).read_text())["model"]["init_args"]["gamma"] == 4.0
    with pytest.raises(SystemExit) as exit_info:  # Fig. 5's single-FC blocks have no hidden layer
        main(["sweep", "--config", str(CONFIGS / "cifar10_fig5_sw_mlp.yaml"), "--omega", "2**18", "--gamma", "2",
              "--emit", "fc"])  # fmt: skip
    assert exit_info.value.code == 2
    assert "gamma: a single-FC SW-MLP block has γ = 1; drop --gamma (or use block: mlp)" in capsys.readouterr().err
    assert not Path("fc").exists()


@pytest.mark.parametrize(
    "config, args, message",
    [
        (TINY_S_MIXER, ["--densities", "0.5"], "densities: the s_mixer family is swept over channels, not densities"),
        (TINY_SW_MLP, ["--channels", "4"], "channels: an SW-MLP sweep is over densities, not channels or patch sizes"),
        (TINY_SW_MLP, ["--densities", "0.5,1.5"], "densities: needs values in (0, 1], got '0.5,1.5'"),
    ],
)
def test_bad_density_sweeps(config: str, args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--config", config, "--omega", "4096", *args, "--emit", "x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not Path("x").exists()


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
