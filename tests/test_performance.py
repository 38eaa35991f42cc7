"""The performance paths give the same outputs as the plain ones (channels-last stem, torch.compile,
bf16), and `mixer bench` measures ours against timm through the real command line. No wall-clock
time is asserted anywhere: speed figures are ratios in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from helpers import ROOT, TEST_CONFIGS, accuracy, error_field, read_json, run_dirs
from helpers.fakedata import write_hf
from mixer_lightning.cli import main
from mixer_lightning.models import create_model
from mixer_lightning.models.layers import PatchEmbed

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.mark.parametrize("regions", [1, 2])
def test_channels_last_stem_gives_the_nchw_values_as_a_contiguous_token_tensor(regions: int) -> None:
    torch.manual_seed(0)
    stem = PatchEmbed(image_size=16, patch_size=2, in_chans=3, channels=5, regions=regions).double()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    tokens = stem(x)
    # The reference: an NCHW convolution, tokens gathered region by region, raster inside a region.
    reference = F.conv2d(x, stem.proj.weight, stem.proj.bias, stride=2)  # (B, C, 8, 8)
    g = 8 // regions
    reference = reference.view(4, 5, regions, g, regions, g).permute(0, 2, 4, 3, 5, 1).reshape(4, 64, 5)
    # The NHWC kernel sums the same products in another order: equal to float64 rounding.
    torch.testing.assert_close(tokens, reference, rtol=1e-12, atol=1e-12)
    if regions == 1:
        assert tokens.is_contiguous()  # a view of the NHWC convolution output: no transposing copy
    tokens.sum().backward()  # and the gradient flows through the memory-format change
    assert stem.proj.weight.grad is not None and torch.isfinite(stem.proj.weight.grad).all()


@pytest.mark.parametrize("block", ["mlp", "fc", "skip"])
def test_token_mixing_on_columns_equals_the_transposed_mlp_with_gradients(block: str) -> None:
    """`linear_columns` (W X + b, a batched GEMM, no transposes) is the transpose-MLP-transpose of
    timm's token mixing: the same values and gradients, in float64."""
    from mixer_lightning.models.layers import FcBlock, MlpBlock, linear_columns

    torch.manual_seed(0)
    f = {"mlp": MlpBlock(6, 12, 5), "fc": FcBlock(6, 5), "skip": torch.nn.Linear(6, 5, bias=False)}[block].double()
    columns = (lambda t: linear_columns(f, t)) if block == "skip" else f.forward_columns
    x = torch.randn(3, 6, 7, dtype=torch.float64, requires_grad=True)
    ours = columns(x)
    reference = f(x.transpose(1, 2)).transpose(1, 2)
    assert ours.shape == (3, 5, 7) and ours.is_contiguous()
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(ours)
    got = torch.autograd.grad(ours, [x, *f.parameters()], grad)
    want = torch.autograd.grad(reference, [x, *f.parameters()], grad)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_compile_option_gives_the_eager_outputs_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "fit",
            "--config",
            TINY,
            "--model.compile",
            "true",
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "2",
            "--trainer.limit_val_batches",
            "1",
        ]
    )
    run = run_dirs("digits_mixer")[-1]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert checkpoint["hyper_parameters"]["compile"] is True
    # Parameter names are those of the eager network (nn.Module.compile compiles in place).
    assert not any("_orig_mod" in key for key in checkpoint["state_dict"])
    from mixer_lightning.tasks.loading import load_classifier

    eager, compiled = (load_classifier(run / "checkpoints" / "last.ckpt") for _ in range(2))
    compiled.configure_model()
    x = torch.randn(8, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)
    assert compiled.net._compiled_call_impl is not None and eager.net._compiled_call_impl is None


@pytest.mark.parametrize("name", ["mlp_mixer", "s_mixer", "rp_mlp_mixer"])
def test_bf16_autocast_follows_float32(name: str) -> None:
    torch.manual_seed(0)
    kwargs = dict(num_classes=10, image_size=16, patch_size=2, channels=64, num_blocks=2)
    if name == "rp_mlp_mixer":
        name, kwargs = "mlp_mixer", {**kwargs, "permute": True}
    model = create_model(name, **kwargs)
    for module in model.modules():  # the zero head would make every output 0 = 0
        if isinstance(module, torch.nn.Linear) and module.out_features == 10:
            torch.nn.init.normal_(module.weight, std=0.1)
    x = torch.randn(16, 3, 16, 16)
    with torch.no_grad():
        reference = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
        model_bf16 = create_model(name, **kwargs)
        model_bf16.load_state_dict(model.state_dict())
        true_bf16 = model_bf16.bfloat16()(x.bfloat16())
    assert low.dtype == torch.bfloat16
    for output in (low.float(), true_bf16.float()):
        error = (output - reference).norm() / reference.norm()
        assert error < 0.05, error  # bf16 keeps 8 bits of mantissa: ~1% relative error per layer


def test_bf16_mixed_training_through_the_cli() -> None:
    main(["fit", "--config", TINY, "--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1"])
    run = run_dirs("digits_mixer")[-1]
    summary = read_json(run / "fit_summary.json")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    # Mixed precision keeps float32 master weights: the checkpoint holds float32, trained (finite) values.
    assert all(v.dtype == torch.float32 for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values() if v.is_floating_point())
    assert torch.count_nonzero(checkpoint["state_dict"]["net.head.weight"]) > 0  # trained (the head starts at zero)
    assert summary["epochs"] == 1 and summary["steps"] == checkpoint["global_step"] > 0
    # validated, in bf16: the float32 figure up to a prediction that bf16 rounding flips (64 images)
    assert math.isfinite(summary["val/loss"])
    assert summary["val/acc1"] == pytest.approx(
        accuracy(run / "checkpoints" / "last.ckpt", run / "config.yaml", "val"), abs=0.04
    )


def test_bench_ours_against_timm_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    main(["bench", "--config", TINY, "--vs", "timm", "--batch_size", "8", "--repeats", "2", "--json"])
    results = json.loads(capsys.readouterr().out)
    assert set(results) == {"ours", "timm", "twin", "noise"}  # twin: an identical copy of ours, the noise row
    for name in ("ours", "timm", "twin"):
        assert results[name]["train_img_s"] > 0 and results[name]["infer_img_s"] > 0
    assert set(results["noise"]) == {"train", "infer"} and all(v >= 0 for v in results["noise"].values())
    # The same network in both libraries: the same FLOPs, counted by torch's FLOP counter.
    ours, timm = results["ours"]["flops_per_image"], results["timm"]["flops_per_image"]
    assert ours == timm and 0 < ours["forward"] < ours["train"]

    main(["bench", "--config", TINY, "--batch_size", "4", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "train img/s" in out and out.splitlines()[1].startswith("ours")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--model", "mixer_x99"], "model"),
        (["--model", "mixer_s16", "--vs", "flax"], "vs"),
        (["--model", "mixer_s16", "--precision", "fp8"], "precision"),
        (["--model", "mixer_s16", "--batch_size", "0"], "batch_size"),
        (["--model", "s_mixer", "--vs", "timm"], "vs"),  # timm has no S-Mixer
        (["--kernels", "--model", "mixer_s16"], "model"),  # one measurement at a time
        (["--fit", "--kernels"], "model"),
        (["--fit", "--fit_batches", "0"], "fit_batches"),
    ],
)
def test_bad_bench_arguments(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert error_field(capsys, ["bench", *args]) == field


def test_bench_kernels_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    # Every permutation kernel is checked against x[:, index] and every compiled op against eager
    # inside the suite; here: the tables are complete and relative to their baselines.
    main(["bench", "--kernels", "--repeats", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    permutation, elementwise = report["permutation"], report["elementwise"]
    assert permutation["shape"] == [128, 64 * 128]
    kernels = {"copy", "transpose_token_mixing", "ours", "gather_broadcast_index", "row_gather_batch_last"}
    assert kernels <= set(permutation["ms"])
    assert permutation["over_copy"]["copy"] == 1.0 and all(t > 0 for t in permutation["ms"].values())
    assert set(elementwise["compiled_over_eager"]) == {"gelu", "gelu_backward", "layer_norm"}
    assert all(r > 0 for r in elementwise["compiled_over_eager"].values())


def test_compare_rotates_the_order_of_candidates_every_round() -> None:
    from mixer_lightning.benchmarks.timing import compare

    calls: list[str] = []
    medians = compare({name: (lambda n=name: calls.append(n)) for name in "abc"}, repeats=3, warmup=0)
    assert calls == list("abcbcacab")  # each candidate runs first, second and third once
    assert set(medians) == set("abc") and all(t >= 0 for t in medians.values())


@pytest.mark.slow  # ~30 s: five short fits (each starts a trainer, the PIL path its worker)
def test_bench_fit_against_the_step_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``mixer bench --fit``: end-to-end fits through both data paths and the bare step of the same
    model, interleaved; the figures are the ratios of the medians (a tiny CIFAR-size Mixer, tiny data)."""
    root = write_hf(tmp_path / "hf", train=96, test=16)
    config = tmp_path / "tiny_cifar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "net": {
                        "class_path": "mixer_lightning.models.MLPMixer",
                        "init_args": {"patch_size": 8, "channels": 16, "num_blocks": 1},
                    }
                },
                "data": {
                    "class_path": "mixer_lightning.data.ImageDataModule",
                    "init_args": {"dataset": "hf", "batch_size": 16, "val_split": 0, "num_workers": 1},
                },
            }
        )
    )
    bench = ["bench", "--fit", "--config", str(config), "--data_root", str(root), "--fit_warmup", "2"]
    bench += ["--fit_batches", "2", "--repeats", "2"]
    main([*bench, "--json"])
    report = json.loads(capsys.readouterr().out)
    rates = report["img_per_s"]
    assert all(len(v) == 2 and all(r > 0 for r in v) for v in report["rounds_img_per_s"].values())
    assert all(r > 0 for r in rates.values()) and report["setting"]["step_timing"] == "paired with the tensor fit"
    rounds, ratios = report["rounds_img_per_s"], report["rounds_ratios"]
    for i in range(2):  # each round's ratios come from that round's fits and paired steps; the figures are medians
        assert ratios["cifar_fit_vs_step"][i] == pytest.approx(rounds["tensor"][i] / rounds["step"][i])
        assert ratios["cifar_fit_speedup"][i] == pytest.approx(rounds["tensor"][i] / rounds["pil"][i])
    assert report["cifar_fit_vs_step"] == pytest.approx(sum(ratios["cifar_fit_vs_step"]) / 2)
    assert report["cifar_fit_speedup"] == pytest.approx(sum(ratios["cifar_fit_speedup"]) / 2)
    spread = [min(ratios["cifar_fit_vs_step"]), max(ratios["cifar_fit_vs_step"])]
    assert report["rounds_spread"]["cifar_fit_vs_step"] == spread
    main(bench)  # as printed: each ratio beside the range of its rounds (the noise row)
    printed = capsys.readouterr().out
    assert "cifar_fit_vs_step" in printed and "(median of 2 rounds: " in printed
    assert "noise: the rounds' range; a ratio whose range includes 1 is not resolved" in printed
    assert report["setting"]["workers"] == {"tensor": 1, "pil": 1} and report["setting"]["data"] == os.path.relpath(
        root.resolve(), ROOT
    )
    assert not os.path.isabs(report["setting"]["config"])  # a committed JSON names no machine directory
    assert all(0 <= share < 1 for share in report["waiting_share"].values())
