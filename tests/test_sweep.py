"""`mixer sweep`: grids (width at fixed Ω, γ at fixed m, SW-MLP densities, generic axes), emitted configs
and scripts, what a run still needs (skip, test, resume, fit), the report, the CKA step of Fig. 2(a)
and the loss curves of App. D.7; bad input is one line and writes nothing."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers import CONFIGS, TEST_CONFIGS, error_field, field_of, read_json
from mixer_lightning.cli import main
from mixer_lightning.commands.sweep import runs as sweep_runs
from mixer_lightning.commands.sweep.runs import FITTED, FRESH, PARTIAL, TESTED, run_state

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
TINY_SW_MLP = str(TEST_CONFIGS / "sw_mlp_digits.yaml")
TINY_MIXER = str(TEST_CONFIGS / "digits_mixer.yaml")
FIG2_SW_MLP = str(TEST_CONFIGS / "digits_fig2_sw_mlp.yaml")
FIG2_MIXER = str(TEST_CONFIGS / "digits_fig2_mixer.yaml")
MIXER = str(Path(sys.executable).with_name("mixer"))


def manifest(directory: str) -> dict:
    return json.loads(Path(directory, "sweep.json").read_text())


# ----------------------------------------------------------------------------------------- emit


def test_emit_the_paper_grid_with_scripts(capsys: pytest.CaptureFixture) -> None:
    main(
        [
            "sweep",
            "--config",
            str(CONFIGS / "cifar10_fig5_s_mixer.yaml"),
            "--omega",
            "2**18",
            "--seeds",
            "0,1,2",
            "--emit",
            "sweeps/fig5",
        ]
    )
    runs = manifest("sweeps/fig5")["runs"]
    points = sorted({(r["C"], r["S"]) for r in runs})
    assert points == [(16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]
    assert len(runs) == 18 and {r["seed"] for r in runs} == {0, 1, 2} and len({r["run_dir"] for r in runs}) == 18
    config = yaml.safe_load(Path("sweeps/fig5/configs/C48_S83_seed2.yaml").read_text())
    assert config["seed_everything"] == 2
    assert (
        config["model"]["net"]["init_args"]["channels"] == 48 and config["model"]["net"]["init_args"]["omega"] == 262144
    )
    assert config["model"]["net"]["init_args"]["tokens"] is None
    assert config["trainer"]["logger"]["init_args"] == {
        "save_dir": "sweeps/fig5/runs",
        "name": "C48_S83",
        "version": "seed2",
    }
    assert config["trainer"]["max_epochs"] == 200  # the rest of the base config is kept
    for script in ("run_all.sh", "slurm_array.sh"):
        text = Path("sweeps/fig5", script).read_text()
        assert "C48_S83_seed2" in text and "mixer sweep point sweeps/fig5" in text
        assert os.access(Path("sweeps/fig5", script), os.X_OK)
    assert "#SBATCH --array=0-17" in Path("sweeps/fig5/slurm_array.sh").read_text()
    assert "mixer sweep report sweeps/fig5" in Path("sweeps/fig5/run_all.sh").read_text()
    # The emitted config is a ready config: the real parser accepts it.
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "sweeps/fig5/configs/C48_S83_seed2.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])["model"]["net"]["init_args"]["omega"] == 262144


def test_imagenet_patch_size_sweep() -> None:
    main(
        [
            "sweep",
            "--config",
            str(CONFIGS / "imagenet_fig6_mlp_mixer.yaml"),
            "--omega",
            "290217984",
            "--gamma",
            "4",
            "--patch_sizes",
            "7,8,14,16,28,32",
            "--emit",
            "sweeps/in1k",
        ]
    )
    runs = manifest("sweeps/in1k")["runs"]
    assert [(r["P"], r["C"], r["S"]) for r in runs] == [
        (7, 147, 923),
        (8, 192, 779),
        (14, 588, 283),
        (16, 768, 196),
        (28, 2352, 26),
        (32, 3072, 15),
    ]
    config = yaml.safe_load(Path("sweeps/in1k/configs/P16_C768_S196_seed0.yaml").read_text())
    assert config["model"]["net"]["init_args"]["patch_size"] == 16 and config["model"]["net"]["init_args"]["gamma"] == 4


def test_gamma_grid_at_fixed_width(capsys: pytest.CaptureFixture) -> None:
    """App. D.3 / Fig. S.3: m = S·C fixed, γ = 2Ω/(m(C + m/C)) per C (eq. S.46), peaking at C = √m."""
    main(["sweep", "--config", TINY_MIXER, "--omega", "2**12", "--width", "64", "--emit", "s3"])
    data = manifest("s3")
    assert data["kind"] == "gamma_at_width" and data["width"] == 64
    grid = [(r["C"], r["S"], r["gamma"]) for r in data["runs"]]
    assert [(c, s) for c, s, _ in grid] == [(4, 16), (8, 8), (16, 4)]  # powers of two with C, S >= 4, and √m = 8
    for c, s, gamma in grid:
        assert c * s == 64 and gamma == pytest.approx(2 * 2**12 / (64 * (c + 64 / c)))
    assert max(grid, key=lambda g: g[2])[:2] == (8, 8)  # γ_max = Ω/(m√m) = 8 at C* = S* = √m
    config = yaml.safe_load(Path("s3/configs/C4_S16_g6.4_seed0.yaml").read_text())
    assert {"channels": 4, "tokens": 16, "omega": None}.items() <= config["model"]["net"]["init_args"].items()
    assert config["model"]["net"]["init_args"]["gamma"] == pytest.approx(6.4)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "s3/configs/C8_S8_g8_seed0.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])["model"]["net"]["init_args"]["gamma"] == 8.0
    args = ["sweep", "--config", TINY_MIXER, "--omega", "2**12", "--width", "64", "--channels", "3", "--emit", "x"]
    assert error_field(capsys, args) == "channels"  # 3 does not divide m = 64
    assert not Path("x").exists()


def test_sw_mlp_density_grid_at_fixed_width_with_a_cka_reference() -> None:
    """Fig. 2(a): p = 2^-n, n = 0 … 10 by default, all at one width, plus the Mixer once per seed."""
    main(
        [
            "sweep",
            "--config",
            FIG2_SW_MLP,
            "--width",
            "256",
            "--cka_reference",
            FIG2_MIXER,
            "--seeds",
            "0,1",
            "--emit",
            "fig2",
        ]
    )
    data = manifest("fig2")
    grid = [r for r in data["runs"] if r["role"] == "grid"]
    assert data["kind"] == "densities_at_width" and data["cka_reference"] == [FIG2_MIXER]
    assert sorted({r["p"] for r in grid}, reverse=True) == [2.0**-n for n in range(11)]
    assert {r["m"] for r in grid} == {256} and len(grid) == 22
    reference = [r for r in data["runs"] if r["role"] == "reference"]
    assert [(r["name"], r["seed"]) for r in reference] == [("reference_seed0", 0), ("reference_seed1", 1)]
    config = yaml.safe_load(Path(reference[1]["config"]).read_text())
    assert config["model"]["net"]["class_path"].endswith("MLPMixer") and config["seed_everything"] == 1
    sw = yaml.safe_load(Path("fig2/configs/p0.0009766_m256_seed0.yaml").read_text())["model"]["net"]["init_args"]
    assert {"density": 2.0**-10, "width": 256, "channels": None, "omega": None}.items() <= sw.items()


def test_generic_axes_and_a_report_grouped_by_them(capsys: pytest.CaptureFixture) -> None:
    """Table 1 (upper): the learning rate picked per setting from a search, by the mean over seeds."""
    main(
        [
            "sweep",
            "--config",
            TINY_SW_MLP,
            "--omega",
            "4096",
            "--densities",
            "0.5,0.25",
            "--seeds",
            "0,1",
            "--grid",
            "model.optimizer.init_args.lr=0.01,0.02",
            "--emit",
            "lr",
        ]
    )
    capsys.readouterr()
    data = manifest("lr")
    assert data["axes"] == [{"key": "model.optimizer.init_args.lr", "name": "lr", "values": [0.01, 0.02]}]
    assert len(data["runs"]) == 8 and len({r["run_dir"] for r in data["runs"]}) == 8
    config = yaml.safe_load(Path("lr/configs/p0.5_m64_lr0.02_seed1.yaml").read_text())
    assert config["model"]["optimizer"]["init_args"]["lr"] == 0.02
    assert config["model"]["net"]["init_args"]["density"] == 0.5  # the width grid's values stay
    # Finished runs (their test metrics written as `mixer test` writes them): lr 0.02 wins at p = 0.5,
    # lr 0.01 at p = 0.25.
    accuracy = {("p0.5_m64", 0.01): 0.5, ("p0.5_m64", 0.02): 0.7, ("p0.25_m91", 0.01): 0.6, ("p0.25_m91", 0.02): 0.4}
    for run in data["runs"]:
        Path(run["run_dir"]).mkdir(parents=True)
        acc = accuracy[(run["width_point"], run["axes"]["lr"])] + 0.01 * run["seed"]
        Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": acc}))
    main(["sweep", "report", "lr", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert sorted((b["point"], b["lr"]) for b in report["best"]) == [("p0.25_m91", 0.01), ("p0.5_m64", 0.02)]
    assert {(r["point"], r["seeds"]) for r in report["summary"]} == {
        ("p0.5_m64_lr0.01", 2),
        ("p0.5_m64_lr0.02", 2),
        ("p0.25_m91_lr0.01", 2),
        ("p0.25_m91_lr0.02", 2),
    }
    with open("lr/summary.csv") as f:
        assert {row["lr"] for row in csv.DictReader(f)} == {"0.01", "0.02"}
    assert Path("lr/error_vs_lr.png").stat().st_size > 5000 and Path("lr/error_vs_sparsity.png").is_file()
    main(["sweep", "report", "lr"])  # the series is the directory's name
    assert "best for lr p0.5_m64: lr = 0.02" in capsys.readouterr().out
    # Beside a sweep without the axis: its points had no choice, so they get no "best" row.
    main(["sweep", "--config", TINY_SW_MLP, "--omega", "4096", "--densities", "0.5", "--emit", "plain"])
    (run,) = manifest("plain")["runs"]
    Path(run["run_dir"]).mkdir(parents=True)
    Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": 0.9}))
    capsys.readouterr()
    main(["sweep", "report", "lr", "plain", "--out", "both", "--json"])
    both = json.loads(capsys.readouterr().out)
    assert sorted((b["series"], b["point"]) for b in both["best"]) == [("lr", "p0.25_m91"), ("lr", "p0.5_m64")]
    # The series without the axis (lr None) leaves the axis numeric: a line plot, not bars of "none".
    assert "both/error_vs_lr.png" in both["plots"] and not Path("both/error_by_lr.png").exists()


def test_mirror_points_are_drawn_as_two_branches_against_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """(C, S) and (S, C) share m at a fixed Ω: against m a series is its C ≤ S and C ≥ S branches, both
    through S = C; a series without a generic axis is labelled without it (no "impl = None")."""
    from mixer_lightning.commands.sweep import plots as report

    drawn = {}

    def capture(ax, summary, x, label, **kwargs):
        for row in summary:
            drawn.setdefault(label(row), []).append((x(row), row["C"]))
        return True

    monkeypatch.setattr(report, "_plot_lines", capture)
    row = {"test_error_mean": 0.5, "test_error_std": 0.0, "p": None, "gamma": 1.0}
    summary = [
        {**row, "series": "s", "point": "C16_S173", "C": 16, "S": 173, "m": 2768, "impl": None},
        {**row, "series": "s", "point": "C64_S64", "C": 64, "S": 64, "m": 4096, "impl": None},
        {**row, "series": "s", "point": "C173_S16", "C": 173, "S": 16, "m": 2768, "impl": None},
        {**row, "series": "sw", "point": "p0.5", "C": None, "S": None, "m": 724, "p": 0.5, "impl": "dense"},
    ]
    report.plot_summary(summary, [{"kind": "channels", "omega": 2**18, "gamma": 1.0}], ["impl"], Path("."))
    assert sorted(drawn) == ["s", "s, C ≤ S", "s, C ≥ S", "sw (impl = dense)"]  # "s": the plot against C
    assert sorted(drawn["s, C ≤ S"]) == [(2768, 16), (4096, 64)]
    assert sorted(drawn["s, C ≥ S"]) == [(2768, 173), (4096, 64)]


def test_axes_alone_vary_the_base_config(capsys: pytest.CaptureFixture) -> None:
    """Fig. S.3 (left): γ varied at a fixed Mixer (S = C = 16 here), no width grid; the report plots
    the error against γ and names the best, and lists the points in the axis's order (1, 2, 16; their
    names sorted as text put gamma16 before gamma2)."""
    main(["sweep", "--config", TINY_MIXER, "--grid", "model.net.gamma=1,2,16", "--seeds", "0,1", "--emit", "g"])
    data = manifest("g")
    assert data["kind"] == "base" and [r["name"] for r in data["runs"]][:2] == ["gamma1_seed0", "gamma1_seed1"]
    assert yaml.safe_load(Path("g/configs/gamma16_seed1.yaml").read_text())["model"]["net"]["init_args"]["gamma"] == 16
    for run in data["runs"]:
        Path(run["run_dir"]).mkdir(parents=True)
        acc = {1: 0.5, 2: 0.6, 16: 0.7}[run["axes"]["gamma"]]
        Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": acc}))
    main(["sweep", "report", "g"])
    out = capsys.readouterr().out
    assert "best for g base: gamma = 16" in out and Path("g/error_vs_gamma.png").stat().st_size > 5000
    with open("g/summary.csv") as f:
        assert [row["gamma"] for row in csv.DictReader(f)] == ["1", "2", "16"]
    main(["sweep", "report", "g", "--json"])
    assert [row["gamma"] for row in json.loads(capsys.readouterr().out)["summary"]] == [1, 2, 16]
    # the optimizer is the default (not set in the config): nothing to vary
    assert (
        error_field(capsys, ["sweep", "--config", TINY_S_MIXER, "--grid", "model.optimizer.lr=0.1", "--emit", "x"])
        == "grid"
    )


def test_a_tie_within_the_seeds_spread_is_not_the_lowest_and_a_series_takes_a_label(capsys) -> None:
    """γ = 1 and 2 at two seeds each: mean errors 0.40 ± 0.14 and 0.45 ± 0.07 overlap, so neither is named
    the lowest; γ = 16 (0.20 ± 0.00) is, when it is there. ``--label`` names the series, one per directory."""
    main(["sweep", "--config", TINY_MIXER, "--grid", "model.net.gamma=1,2,16", "--seeds", "0,1", "--emit", "g"])
    accuracy = {(1, 0): 0.5, (1, 1): 0.7, (2, 0): 0.5, (2, 1): 0.6, (16, 0): 0.8, (16, 1): 0.8}
    for run in manifest("g")["runs"]:
        if run["axes"]["gamma"] != 16:
            Path(run["run_dir"]).mkdir(parents=True)
            acc1 = accuracy[run["axes"]["gamma"], run["seed"]]
            Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": acc1}))
    capsys.readouterr()
    main(["sweep", "report", "g", "--label", "Mixer γ"])
    out = capsys.readouterr().out
    assert "lowest error: none: gamma1, gamma2 tie within the seeds' spread" in out
    assert "lowest for Mixer γ base: gamma = 1 " in out and "tied within the seeds' spread with gamma2" in out
    main(["sweep", "report", "g", "--label", "Mixer γ", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert {row["series"] for row in report["summary"]} == {"Mixer γ"} and report["best"][0]["tied"] == ["gamma2"]
    for run in manifest("g")["runs"]:
        if run["axes"]["gamma"] == 16:
            Path(run["run_dir"]).mkdir(parents=True)
            Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": 0.8}))
    main(["sweep", "report", "g"])
    out = capsys.readouterr().out
    assert "lowest error: gamma16;" in out and "best for g base: gamma = 16 " in out
    assert error_field(capsys, ["sweep", "report", "g", "--label", "a", "--label", "b"]) == "label"


def test_an_axis_of_lists_is_one_rp_block_per_position(capsys: pytest.CaptureFixture) -> None:
    """App. D.5: a 2-block S-Mixer with one block random-permuted, for each position (a YAML list of lists)."""
    digits_rp = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
    main(
        [
            "sweep",
            "--config",
            digits_rp,
            "--grid",
            "model.net.init_args.permute=[[true,false],[false,true],false]",
            "--seeds",
            "0",
            "--emit",
            "d5",
        ]
    )
    names = [r["name"] for r in manifest("d5")["runs"]]
    assert names == ["permutetf_seed0", "permuteft_seed0", "permutefalse_seed0"]
    config = yaml.safe_load(Path("d5/configs/permuteft_seed0.yaml").read_text())
    assert config["model"]["net"]["init_args"]["permute"] == [False, True]
    # The report of such an axis (list values are unhashable, not numbers): a bar per value, in the grid's
    # order, and the position of the lowest error named.
    accuracy = {"permutetf_seed0": 0.5, "permuteft_seed0": 0.6, "permutefalse_seed0": 0.7}
    capsys.readouterr()
    for run in manifest("d5")["runs"]:
        Path(run["run_dir"]).mkdir(parents=True)
        Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": accuracy[run["name"]]}))
    main(["sweep", "report", "d5", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(r["point"], round(r["test_error_mean"], 2)) for r in report["summary"]] == [
        ("permutefalse", 0.3),
        ("permuteft", 0.4),
        ("permutetf", 0.5),
    ]
    assert [b["permute"] for b in report["best"]] == [False]
    assert report["plots"] == ["d5/error_by_permute.png"] and Path("d5/error_by_permute.png").stat().st_size > 5000
    for values in ("[[true],[true]]", "[[true,"):  # a value twice; not YAML
        assert (
            error_field(
                capsys, ["sweep", "--config", digits_rp, "--grid", f"model.net.permute={values}", "--emit", "x"]
            )
            == "grid"
        )
    assert not Path("x").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--grid", "model.optimizer.init_args.lrr=0.1"],  # misspelt
        ["--grid", "seed_everything=1,2"],  # the sweep's own
        ["--grid", "model.net.density=0.1,0.2"],  # the width grid's
        ["--grid", "model.optimizer.lr=0.01,1e-2"],  # a value twice
        ["--grid", "lr"],
    ],
)
def test_bad_axes(args: list[str], capsys: pytest.CaptureFixture) -> None:
    assert error_field(capsys, ["sweep", "--config", TINY_SW_MLP, "--omega", "4096", *args, "--emit", "x"]) == "grid"
    assert not Path("x").exists()


# ------------------------------------------------------------------------- one line, nothing written


@pytest.mark.parametrize(
    "config, args, field",
    [
        (TINY_S_MIXER, ["--seeds", "1,1", "--channels", "8"], "seeds"),
        (TINY_S_MIXER, ["--channels", "8,8"], "channels"),
        (TINY_S_MIXER, ["--seeds", "x"], "seeds"),
        (TINY_S_MIXER, ["--seeds", "-1"], "seeds"),
        (TINY_S_MIXER, ["--channels", "4,-8"], "channels"),
        (TINY_S_MIXER, ["--patch_sizes", "2,"], "patch_sizes"),
        (TINY_S_MIXER, ["--densities", "0.5"], "densities"),  # an S-Mixer is swept over channels
        (TINY_SW_MLP, ["--channels", "4"], "channels"),  # an SW-MLP over densities
        (TINY_SW_MLP, ["--densities", "0.5,1.5"], "densities"),
        (TINY_SW_MLP, ["--densities", "0.5,0.5000001"], "densities"),  # the same grid point twice
        (TINY_S_MIXER, ["--omega", "2**100"], "omega"),
        (TINY_S_MIXER, ["--width", "64"], "width"),  # an S-Mixer has γ = 1
        (TINY_S_MIXER, ["--omega", "3", "--channels", "8"], "omega"),  # unreachable
        (TINY_S_MIXER, ["--gamma", "2"], "gamma"),
        (TINY_S_MIXER, ["--parallel", "2"], "parallel"),  # side by side runs here: needs --run
        (TINY_S_MIXER, ["--in_chans", "0", "--patch_sizes", "4"], "in_chans"),
    ],
)
def test_bad_grids(config: str, args: list[str], field: str, capsys: pytest.CaptureFixture) -> None:
    omega = [] if "--omega" in args else ["--omega", "4096"]
    assert error_field(capsys, ["sweep", "--config", config, *omega, *args, "--emit", "x"]) == field
    assert not Path("x").exists()


@pytest.mark.parametrize(
    "args, field",
    [
        (["--omega", "1000", "--emit", "x", "--run", "y"], "emit"),
        (["--channels", "8", "--emit", "x"], "omega"),
        (["--omega", "1000", "--run", "x", "--parallel", "0"], "parallel"),
        (["--omega", "2000", "--emit", "earlier"], "emit"),  # a sweep of another grid is there
        (["--omega", "1000", "--emit", "a_file"], "emit"),
    ],
)
def test_bad_sweeps(args: list[str], field: str, capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "earlier"])
    Path("a_file").write_text("mine\n")
    before = sorted(str(p) for p in Path("earlier").rglob("*"))
    assert error_field(capsys, ["sweep", "--config", TINY_S_MIXER, *args]) == field
    assert not Path("x").exists() and sorted(str(p) for p in Path("earlier").rglob("*")) == before
    assert Path("a_file").read_text() == "mine\n"


def test_a_bad_mixer_args_is_one_line_before_anything_is_written(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIXER_ARGS", "--config 'unclosed")
    sweep = ["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--run", "s"]
    assert error_field(capsys, sweep) == "MIXER_ARGS" and not Path("s").exists()


def test_a_started_run_keeps_its_config(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "s"])
    (run,) = manifest("s")["runs"]
    Path(run["run_dir"], "checkpoints").mkdir(parents=True)
    Path(run["run_dir"], "checkpoints", "last.ckpt").write_bytes(b"started")
    config = Path(run["config"]).read_text()
    Path("other.yaml").write_text(Path(TINY_S_MIXER).read_text().replace("max_epochs: 2", "max_epochs: 3"))
    assert (
        error_field(capsys, ["sweep", "--config", "other.yaml", "--omega", "1000", "--channels", "4", "--emit", "s"])
        == "emit"
    )
    assert Path(run["config"]).read_text() == config
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--emit", "s"])  # extends
    assert [r["name"] for r in manifest("s")["runs"]] == ["C4_S20_seed0", "C8_S12_seed0"]


def test_a_started_run_of_another_layout_is_not_rewritten(capsys: pytest.CaptureFixture) -> None:
    """A started run whose config is of the layout before ``model.net`` (``model.class_path: ...MLPMixerModule``,
    flat arguments) is not this sweep's: emitting the sweep again refuses to change it, in one line."""
    sweep = ["sweep", "--config", TINY_MIXER, "--grid", "model.net.gamma=2,4", "--emit", "s"]
    main(sweep)
    run = manifest("s")["runs"][0]
    config = yaml.safe_load(Path(run["config"]).read_text())
    net, model = config["model"].pop("net"), config["model"]
    config["model"] = {"class_path": "mixer_lightning.tasks.MLPMixerModule", "init_args": {**net["init_args"], **model}}
    Path(run["config"]).write_text(yaml.safe_dump(config))
    Path(run["run_dir"], "checkpoints").mkdir(parents=True)
    Path(run["run_dir"], "checkpoints", "last.ckpt").write_bytes(b"started")
    assert error_field(capsys, sweep) == "emit"


# ---------------------------------------------------------------------- what a run still needs


def test_run_states_and_the_commands_they_give(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "C4_S20" / "seed0"
    entry = {"name": "C4_S20_seed0", "config": "s/configs/C4_S20_seed0.yaml", "run_dir": str(run_dir)}
    assert run_state(run_dir) == FRESH
    assert sweep_runs.fit_arguments(entry, FRESH) == ["fit", "--config", entry["config"]]
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert run_state(run_dir) == PARTIAL
    assert sweep_runs.fit_arguments(entry, PARTIAL, ["--trainer.max_epochs", "3"]) == [
        "fit",
        "--config",
        entry["config"],
        "--ckpt_path",
        "last",
        "--trainer.max_epochs",
        "3",
    ]
    (run_dir / "fit_summary.json").write_text("{}")
    assert run_state(run_dir) == FITTED and sweep_runs.fit_arguments(entry, FITTED) is None
    assert sweep_runs.test_arguments(entry) == [
        "test",
        "--config",
        entry["config"],
        "--ckpt_path",
        str(run_dir / "checkpoints" / "last.ckpt"),
    ]
    (run_dir / "test_metrics.json").write_text('{"test/acc1": 0.5}')
    assert run_state(run_dir) == TESTED


def test_sweep_point_does_what_each_state_needs(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mixer sweep point` (what run_all.sh and the SLURM array call) for a run in each state; the fit
    and test themselves are recorded, not run."""
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--emit", "s"])
    fresh, partial = manifest("s")["runs"]
    calls: list[list[str]] = []
    monkeypatch.setattr(sweep_runs, "run_mixer", calls.append)
    monkeypatch.setenv("MIXER_ARGS", "--trainer.max_epochs 1")
    Path(fresh["run_dir"]).mkdir(parents=True)  # killed before its first checkpoint
    Path(fresh["run_dir"], "config.yaml").write_text("left over\n")
    Path(partial["run_dir"], "checkpoints").mkdir(parents=True)
    Path(partial["run_dir"], "checkpoints", "last.ckpt").write_bytes(b"x")
    extra = ["--trainer.max_epochs", "1"]
    main(["sweep", "point", "s", "C4_S20_seed0"])
    assert calls == [
        ["fit", "--config", fresh["config"], *extra],
        ["test", "--config", fresh["config"], "--ckpt_path", f"{fresh['run_dir']}/checkpoints/last.ckpt", *extra],
    ]
    assert Path(f"{fresh['run_dir']}.aborted-1", "config.yaml").read_text() == "left over\n"  # kept, moved aside
    calls.clear()
    main(["sweep", "point", "s", "C8_S12_seed0"])
    assert calls[0] == ["fit", "--config", partial["config"], "--ckpt_path", "last", *extra]
    Path(partial["run_dir"], "fit_summary.json").write_text("{}")
    calls.clear()
    main(["sweep", "point", "s", "C8_S12_seed0"])
    assert [c[0] for c in calls] == ["test"]
    Path(partial["run_dir"], "test_metrics.json").write_text('{"test/acc1": 0.5}')
    calls.clear()
    main(["sweep", "point", "s", "C8_S12_seed0"])
    assert calls == [] and "sweep: C8_S12_seed0: done" in capsys.readouterr().out
    assert error_field(capsys, ["sweep", "point", "s", "C9_seed0"]) == "name"


# ---------------------------------------------------------------------------- runs and reports


SHORT = "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --trainer.limit_test_batches 2"


def test_run_here_then_report(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIXER_ARGS", SHORT)  # flags for every fit and test of the sweep
    sweep = ["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8", "--run", "sweeps/tiny"]
    main(sweep)
    assert json.loads(Path("sweeps/tiny/runs/C4_S20/seed0/fit_summary.json").read_text())["steps"] == 4  # MIXER_ARGS
    capsys.readouterr()
    main(sweep)  # again: finished runs are not repeated
    out = capsys.readouterr().out
    assert "sweep: C4_S20_seed0: done" in out and "sweep: C8_S12_seed0: done" in out and "fitting" not in out
    with open("sweeps/tiny/summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert [(row["C"], row["S"], row["seeds"]) for row in summary] == [("4", "20", "1"), ("8", "12", "1")]
    for row in summary:  # one seed: 1 − its test/acc1
        tested = read_json(Path(f"sweeps/tiny/runs/C{row['C']}_S{row['S']}/seed0/test_metrics.json"))
        assert float(row["test_error_mean"]) == pytest.approx(1 - tested["test/acc1"])
    assert Path("sweeps/tiny/error_vs_width.png").stat().st_size > 5000
    assert Path("sweeps/tiny/error_vs_channels.png").stat().st_size > 5000
    main(["sweep", "status", "sweeps/tiny"])  # the real runs' own logs: both tested, nothing left
    status = capsys.readouterr().out.splitlines()
    assert status[0] == "sweep sweeps/tiny: 2 runs: 2 tested; nothing left"
    assert all(" tested " in row and " 2/2 " in row for row in status[2:]) and len(status) == 4
    main(["sweep", "report", "sweeps/tiny", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(row["point"], row["seeds"]) for row in report["summary"]] == [("C4_S20", 1), ("C8_S12", 1)]
    # D.7: the loss curves of the runs, from their TensorBoard logs.
    main(["sweep", "curves", "sweeps/tiny", "--metric", "val/loss", "--metric", "train/loss_epoch", "--json"])
    curves = json.loads(capsys.readouterr().out)["curves"]
    assert {(c["point"], c["metric"], c["runs"]) for c in curves} == {
        ("C4_S20", "val/loss", 1),
        ("C4_S20", "train/loss_epoch", 1),
        ("C8_S12", "val/loss", 1),
        ("C8_S12", "train/loss_epoch", 1),
    }
    assert all([r["epoch"] for r in c["rows"]] == [1, 2] for c in curves)  # the config's 2 epochs, from 1
    assert Path("sweeps/tiny/curves_train_loss_epoch.png").stat().st_size > 5000
    main(["sweep", "curves", "sweeps/tiny", "--label", "RP S-Mixer, lr 0.001", "--out", "labelled", "--json"])
    assert {c["series"] for c in json.loads(capsys.readouterr().out)["curves"]} == {"RP S-Mixer, lr 0.001"}


def test_a_point_runs_mixer_as_its_own_process_and_ends_as_it_did(
    capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fit and test of a point is a `mixer` process of its own (the command line sits above the sweep); a
    fit that fails ends `mixer sweep point` with its exit status, its one-line error naming the field."""
    main(["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4", "--emit", "s"])
    monkeypatch.setenv("MIXER_ARGS", "--model.net.num_blocks=0")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "point", "s", "C4_S20_seed0"])
    assert exit_info.value.code == 2
    assert field_of(capfd.readouterr().err) == "model.net.num_blocks"  # printed by the child
    assert not Path("s/runs/C4_S20/seed0/checkpoints").exists()


def test_points_side_by_side_through_the_sweep_and_its_script(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--run DIR --parallel 2 and PARALLEL=2 bash DIR/run_all.sh: two runs at a time, each its own
    `mixer sweep point` process with one thread (the CPUs split between them), then the report."""
    monkeypatch.setenv("MIXER_ARGS", SHORT)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    sweep = ["sweep", "--config", TINY_S_MIXER, "--omega", "1000", "--channels", "4,8"]
    main([*sweep, "--run", "together", "--parallel", "2"])
    assert "sweep: 2 runs, 2 at a time, 1 thread(s) each" in capsys.readouterr().out
    for point in ("C4_S20", "C8_S12"):
        assert run_state(Path("together/runs", point, "seed0")) == TESTED
    with open("together/summary.csv") as f:
        assert [row["point"] for row in csv.DictReader(f)] == ["C4_S20", "C8_S12"]
    main([*sweep, "--emit", "script"])
    env = {**os.environ, "PARALLEL": "2", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "script/run_all.sh"], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    for point in ("C4_S20", "C8_S12"):
        assert run_state(Path("script/runs", point, "seed0")) == TESTED
        # each point's output in its own log, one line per start and end on the console
        assert f"script/runs/{point}/seed0" in Path(f"script/logs/{point}_seed0.log").read_text()  # its header
        assert f"sweep: {point}_seed0: done (log: script/logs/{point}_seed0.log)" in result.stdout
    assert "script/runs/C4_S20/seed0\n" not in result.stdout and Path("script/summary.csv").is_file()


def test_sw_mlp_sweep_runs_here_and_reports_against_width(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIXER_ARGS", SHORT)
    main(
        [
            "sweep",
            "--config",
            TINY_SW_MLP,
            "--omega",
            "4096",
            "--densities",
            "0.5,0.25",
            "--seeds",
            "0",
            "--run",
            "sweeps/sw_tiny",
        ]
    )
    capsys.readouterr()
    main(["sweep", "report", "sweeps/sw_tiny", "--json"])
    report = json.loads(capsys.readouterr().out)
    # γ = 2 (MLP blocks): m = √(Ω/(γp)) = 64 and 91.
    assert [(row["point"], row["m"], row["C"]) for row in report["summary"]] == [
        ("p0.5_m64", 64, None),
        ("p0.25_m91", 91, None),
    ]
    for row in report["summary"]:  # one seed: 1 − its test/acc1
        tested = read_json(Path("sweeps/sw_tiny/runs", row["point"], "seed0", "test_metrics.json"))
        assert row["test_error_mean"] == pytest.approx(1 - tested["test/acc1"])
    assert all(row["train_loss_mean"] > 0 for row in report["summary"])  # Fig. S.1 left: trainability
    assert Path("sweeps/sw_tiny/error_vs_width.png").stat().st_size > 5000
    assert Path("sweeps/sw_tiny/error_vs_sparsity.png").stat().st_size > 5000
    assert not Path("sweeps/sw_tiny/error_vs_channels.png").exists()  # an SW-MLP has no C
    config = yaml.safe_load(Path("sweeps/sw_tiny/configs/p0.25_m91_seed0.yaml").read_text())
    assert config["model"]["net"]["init_args"]["gamma"] == 2.0  # the γ that m = 91 was solved with


def test_sw_mlp_sweep_takes_gamma_for_mlp_blocks_only(capsys: pytest.CaptureFixture) -> None:
    main(["sweep", "--config", TINY_SW_MLP, "--omega", "4096", "--gamma", "4", "--densities", "0.5", "--emit", "g4"])
    (run,) = manifest("g4")["runs"]
    assert (run["m"], run["p"]) == (45, 0.5)  # m = √(Ω/(γp)) = √(4096/2) ≈ 45
    assert yaml.safe_load(Path(run["config"]).read_text())["model"]["net"]["init_args"]["gamma"] == 4.0
    fc = ["sweep", "--config", str(CONFIGS / "cifar10_fig5_sw_mlp.yaml"), "--omega", "2**18", "--gamma", "2"]
    assert error_field(capsys, [*fc, "--emit", "fc"]) == "gamma"  # a single-FC block has γ = 1
    assert not Path("fc").exists()


def test_reports_of_what_is_not_a_sweep(capsys: pytest.CaptureFixture) -> None:
    Path("empty").mkdir()
    assert error_field(capsys, ["sweep", "report", "empty"]) == "directories"  # no sweep.json
    Path("bad").mkdir()
    Path("bad/sweep.json").write_text("{not json")
    assert error_field(capsys, ["sweep", "report", "bad"]) == "directories"
    assert error_field(capsys, ["sweep", "curves", "empty"]) == "directories"  # no runs with logs


# ------------------------------------------------------------------------------- D.7 loss curves


def _log(run_dir: Path, losses: list[float], start_epoch: int = 0) -> None:
    """Scalars as Lightning's TensorBoardLogger writes them: each value at its step, with `epoch`."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    for i, loss in enumerate(losses):
        epoch = start_epoch + i
        writer.add_scalar("val/loss", loss, global_step=10 * (epoch + 1) - 1)
        writer.add_scalar("epoch", epoch, global_step=10 * (epoch + 1) - 1)
    writer.close()


def test_loss_curves_across_seeds_from_the_logs(capsys: pytest.CaptureFixture) -> None:
    """Mean with the min–max band at every epoch all seeds reached; a resumed run's later event file
    wins where the killed process logged past its checkpoint; a CSVLogger run reads the same."""
    for seed, losses in enumerate([[2.0, 1.0, 0.5], [2.2, 1.2, 0.7], [1.8, 0.8, 0.3]]):
        _log(Path("runs/normal") / f"version_{seed}", losses)
    killed = Path("runs/rp/version_0")
    _log(killed, [2.5, 9.9])  # epoch 1 logged by the process that was killed before its checkpoint
    _log(killed, [1.5, 1.0], start_epoch=1)  # the resumed process re-runs epoch 1
    csv_run = Path("runs/rp/version_1")
    csv_run.mkdir(parents=True)
    csv_run.joinpath("metrics.csv").write_text("epoch,step,val/loss\n0,9,2.7\n1,19,1.6\n2,29,1.2\n")
    main(["sweep", "curves", "runs/normal", "runs/rp", "--json", "--out", "curves"])
    result = json.loads(capsys.readouterr().out)
    normal = next(c for c in result["curves"] if c["series"] == "normal")
    assert normal["runs"] == 3 and [round(r["mean"], 6) for r in normal["rows"]] == [2.0, 1.0, 0.5]
    assert [(r["min"], r["max"]) for r in normal["rows"]][2] == pytest.approx((0.3, 0.7))
    rp = next(c for c in result["curves"] if c["series"] == "rp")
    assert [r["mean"] for r in rp["rows"]] == pytest.approx([2.6, 1.55, 1.1])  # (2.5, 2.7), (1.5, 1.6), (1.0, 1.2)
    assert Path("curves/curves_val_loss.png").stat().st_size > 5000
    with open("curves/curves.csv") as f:
        assert len(list(csv.DictReader(f))) == 6
    assert error_field(capsys, ["sweep", "curves", "runs/normal", "--metric", "val/acc9"]) == "metric"


def test_curves_of_a_directory_of_runs_average_seeds_of_one_config_only(capsys: pytest.CaptureFixture) -> None:
    """`mixer sweep curves runs/NAME`: runs that differ in more than the seed are separate curves named by
    what differs; two runs of one config and one seed are one line."""
    short = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1"]
    for seed, channels, epochs in ((0, 8, 1), (1, 8, 1), (0, 4, 2)):
        main(
            [
                "fit",
                "--config",
                TINY_S_MIXER,
                *short,
                "--seed_everything",
                str(seed),
                "--model.net.channels",
                str(channels),
                "--trainer.max_epochs",
                str(epochs),
            ]
        )
    capsys.readouterr()
    main(["sweep", "curves", "runs/digits_rp_s_mixer", "--json", "--out", "curves"])
    curves = json.loads(capsys.readouterr().out)["curves"]
    assert [(c["point"], c["runs"], len(c["rows"])) for c in curves] == [
        ("channels=4,max_epochs=2", 1, 2),
        ("channels=8,max_epochs=1", 2, 1),
    ]
    main(["sweep", "curves", "runs/digits_rp_s_mixer", "--out", "curves"])
    out = capsys.readouterr().out
    assert "channels=8,max_epochs=1 val/loss           2 seeds, 1 epochs" in out and "1 seed, 2 epochs" in out
    main(["fit", "--config", TINY_S_MIXER, *short, "--seed_everything", "1"])  # a repeat of version_1
    capsys.readouterr()
    # version_1 and version_3: the same config and seed
    assert error_field(capsys, ["sweep", "curves", "runs/digits_rp_s_mixer", "--out", "curves"]) == "directories"


# ------------------------------------------------------------------------------ slow, end to end


@pytest.mark.slow
def test_figure_2a_end_to_end(capsys: pytest.CaptureFixture) -> None:
    """One command trains the SW-MLPs of p = 1, 1/4, 1/16 at the Mixer's width (from the config: C = 16
    on S0 = 16 patches) and the Mixer, then draws the average diagonal CKA against p."""
    main(
        [
            "sweep",
            "--config",
            FIG2_SW_MLP,
            "--densities",
            "1,2**-2,2**-4",
            "--cka_reference",
            FIG2_MIXER,
            "--seeds",
            "0",
            "--run",
            "fig2",
        ]
    )
    capsys.readouterr()
    main(["sweep", "report", "fig2", "--json"])
    cka = json.loads(capsys.readouterr().out)["cka"]
    assert [(row["point"], row["seeds"]) for row in cka["summary"]] == [
        ("p1_m256", 1),
        ("p0.25_m256", 1),
        ("p0.0625_m256", 1),
    ]
    for row in cka["rows"]:
        diagonal = [float(v) for v in row["cka_diagonal"].split()]
        assert len(diagonal) == 2 and all(0 < v <= 1 for v in diagonal)
        assert row["cka_diagonal_mean"] == pytest.approx(sum(diagonal) / 2, abs=1e-6)
        assert row["examples"] == 352  # 11 full minibatches of 32 of the 359 digits test images
    assert Path("fig2/cka_vs_density.png").stat().st_size > 10_000
    assert Path("fig2/runs/p1_m256/seed0/cka_reference.json").is_file()  # cached for the next report


def _killing_overlay(tmp: Path) -> str:
    """Kill the fit at step 3 the first time only (a marker file), checkpoints every 2 steps (an epoch
    is 4 steps: the kill comes before the epoch's end and its checkpoint)."""
    path = tmp / "kill_once.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "callbacks": [
                        {
                            "class_path": "helpers.sweep_killer.KillOnceAtStep",
                            "init_args": {"step": 3, "marker": str(tmp / "killed-once")},
                        }
                    ]
                },
                "step_checkpoint": {"every_n_train_steps": 2},
            }
        )
    )
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["run", "run_all.sh"])
def test_a_killed_point_resumes_from_its_own_last_checkpoint(how: str, tmp_path: Path) -> None:
    """A sweep point SIGKILLed mid-fit (after the step-2 checkpoint): running the sweep again resumes it
    from its own last.ckpt and finishes it; a third time does nothing."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(Path(__file__).parent), os.environ.get("PYTHONPATH")))),
        "MIXER_TRUSTED_MODULES": "helpers",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    sweep = [
        MIXER,
        "sweep",
        "--config",
        TINY_S_MIXER,
        "--config",
        _killing_overlay(tmp_path),
        "--omega",
        "1000",
        "--channels",
        "4",
        "--seeds",
        "0",
    ]
    if how == "run":
        command = [*sweep, "--run", "s"]
    else:
        subprocess.run([*sweep, "--emit", "s"], check=True, env=env, capture_output=True)
        command = ["bash", "s/run_all.sh"]
    first = subprocess.run(command, env=env, capture_output=True, text=True)
    run_dir = Path("s/runs/C4_S20/seed0")
    assert first.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), first.stderr[-2000:]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
    assert run_state(run_dir) == PARTIAL
    second = subprocess.run(command, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"sweep: C4_S20_seed0: resuming from {run_dir}/checkpoints/last.ckpt" in second.stdout
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8  # 2 epochs × 4
    assert json.loads((run_dir / "fit_summary.json").read_text())["steps"] == 8
    assert run_state(run_dir) == TESTED and Path("s/summary.csv").is_file()
    third = subprocess.run(command, env=env, capture_output=True, text=True)
    assert third.returncode == 0 and "sweep: C4_S20_seed0: done" in third.stdout
