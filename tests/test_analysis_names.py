"""The analysis commands agree with each other and with the papers' words: `mixer width` lists the widest
point S ≈ C at any Ω, `width` and `spectrum` take one default γ, `sweep status` and `sweep report` print an
error in one format, and `cka` / `visualize` call an RP S-Mixer by its name in the paper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import TEST_CONFIGS
from mixer_lightning.cli import main

DATA_CONFIG = str(TEST_CONFIGS / "digits_mixer.yaml")


def _json(capsys: pytest.CaptureFixture, *args: str) -> dict:
    capsys.readouterr()
    main([*args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_width_lists_the_widest_point_where_the_paper_gives_no_grid(capsys: pytest.CaptureFixture) -> None:
    """Ω = 2^14: C* = (Ω/γ)^{1/3} ≈ 25.4, between the powers of two 16 and 32: (25, 26) and its mirror."""
    result = _json(capsys, "width", "--omega", "2**14")
    pairs = [(p["C"], p["S"]) for p in result["pairs"]]
    assert pairs == [(16, 38), (25, 26), (26, 25), (38, 16)]
    assert max(p["m"] for p in result["pairs"]) == 650  # the widest, near m_max = (Ω/γ)^{2/3} ≈ 645


def test_width_and_spectrum_take_one_default_gamma(capsys: pytest.CaptureFixture) -> None:
    width = _json(capsys, "width", "--omega", "2**12")
    spectrum = _json(capsys, "spectrum", "--omega", "2**12", "--widths", "128", "--seeds", "0")
    assert width["gamma"] == spectrum["gamma"] == 1.0  # the S-Mixer's of Figs. 3, 5-7


def test_status_and_report_print_the_test_error_alike(capsys: pytest.CaptureFixture) -> None:
    config = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
    main(["sweep", "--config", config, "--omega", "1000", "--channels", "4", "--emit", "s"])
    (entry,) = json.loads(Path("s/sweep.json").read_text())["runs"]
    Path(entry["run_dir"]).mkdir(parents=True)
    Path(entry["run_dir"], "test_metrics.json").write_text('{"test/acc1": 0.8875}')
    capsys.readouterr()
    main(["sweep", "status", "s"])
    status = capsys.readouterr().out.splitlines()[-1].split()
    main(["sweep", "report", "s"])
    report = capsys.readouterr().out.splitlines()[1].split()
    assert status[-3] == report[-2] == "0.1125"  # the error 1 - 0.8875, as the CSVs hold it


@pytest.mark.parametrize("kind, name", [("rp_s_mixer", "RP S-Mixer"), ("sw_mlp", "SW-MLP")])
def test_visualize_names_the_network_as_the_paper(trained, capsys, kind: str, name: str) -> None:
    assert _json(capsys, "visualize", "--ckpt", trained(kind), "--out", "pictures")["network"] == name


def test_cka_names_the_network_as_the_paper(trained, capsys) -> None:
    rp, sw_mlp = trained("rp_s_mixer"), trained("sw_mlp")
    cka = ["cka", "--ckpt", rp, "--ckpt", sw_mlp, "--config", DATA_CONFIG, "--accelerator", "cpu", "--batches", "1"]
    result = _json(capsys, *cka)
    assert (result["model_a"], result["model_b"]) == ("RP S-Mixer", "SW-MLP")  # not "SMixer", "SWMLP"
