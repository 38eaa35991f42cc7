"""`mixer bench` comparisons carry their noise row: an identical copy of our network is
measured beside the candidates, so a single run's ratio can be judged against |1 − twin ÷ ours|."""

from __future__ import annotations

import json

import pytest

from helpers import TEST_CONFIGS
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


def test_a_comparison_prints_its_noise_row(capsys: pytest.CaptureFixture[str]) -> None:
    main(["bench", "--config", TINY, "--vs", "timm", "--batch_size", "4", "--repeats", "2", "--json"])
    results = json.loads(capsys.readouterr().out)
    assert set(results) == {"ours", "timm", "twin", "noise"}
    assert results["twin"]["flops_per_image"] == results["ours"]["flops_per_image"]  # the same network
    for key in ("train", "infer"):
        expected = abs(1 - results["twin"][f"{key}_img_s"] / results["ours"][f"{key}_img_s"])
        assert results["noise"][key] == pytest.approx(expected)

    main(["bench", "--config", TINY, "--vs", "timm", "--batch_size", "4", "--repeats", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["ours", "timm", "ours"]  # "ours (twin)"
    assert lines[4].startswith("ours / timm: train ") and "inference " in lines[4]
    assert lines[5].startswith("noise |1 − twin / ours| (an identical copy of ours, measured beside it): train ")
    assert lines[5].endswith("a ratio closer to 1 than this is not resolved")


def test_a_single_model_has_no_twin(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing compared, nothing to judge: one row, no twin (its time would be wasted)."""
    main(["bench", "--config", TINY, "--batch_size", "4", "--repeats", "1", "--json"])
    assert set(json.loads(capsys.readouterr().out)) == {"ours"}


def test_the_kernel_tables_print_their_noise(capsys: pytest.CaptureFixture[str]) -> None:
    """`mixer bench --kernels`: both tables of ratios (÷ copy, compiled ÷ eager) carry a twin's noise."""
    main(["bench", "--kernels", "--repeats", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    permutation, elementwise = report["permutation"], report["elementwise"]
    assert permutation["noise"] == pytest.approx(abs(1 - permutation["ms"]["copy_twin"] / permutation["ms"]["copy"]))
    assert elementwise["noise"] == pytest.approx(
        abs(1 - elementwise["ms"]["gelu_eager_twin"] / elementwise["ms"]["gelu_eager"])
    )
    assert set(elementwise["compiled_over_eager"]) == {"gelu", "gelu_backward", "layer_norm"}  # the twin is no op
    from mixer_lightning.benchmarks.kernels import format_report

    text = format_report(report)
    assert "noise |1 − copy_twin ÷ copy| (the same kernel measured twice): " in text
    assert "noise |1 − twin ÷ gelu eager| (the same op measured twice): " in text
