"""`mixer cka`: minibatch CKA with the unbiased HSIC (Nguyen et al. 2021) between the skip-connection
inputs of two trained networks (Hayase & Karakida Sec. 3.4, Fig. 2)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from helpers import TEST_CONFIGS, error_field
from helpers.trained import DATA_CONFIG
from mixer_lightning.analysis.cka import MinibatchCKA, MinibatchSampler, gram_linear, hsic_unbiased
from mixer_lightning.cli import main


def cka(capsys: pytest.CaptureFixture, *args: str) -> dict:
    capsys.readouterr()  # drop what training the checkpoints printed
    main(["cka", *args, "--config", DATA_CONFIG, "--accelerator", "cpu", "--json"])
    return json.loads(capsys.readouterr().out)


def test_a_network_against_itself_has_ones_on_the_diagonal(trained, capsys) -> None:
    mixer = trained("mixer")
    result = cka(capsys, "--ckpt", mixer, "--ckpt", mixer)
    matrix = torch.tensor(result["cka"], dtype=torch.float64)
    assert result["layers_a"] == result["layers_b"] == ["1.token", "1.channel"]
    torch.testing.assert_close(torch.diagonal(matrix), torch.ones(2, dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(matrix, matrix.T)
    assert result["diagonal_mean"] == pytest.approx(1.0, abs=1e-9)
    # digits: 359 test images -> 11 full minibatches of 32 (the partial one is dropped)
    assert (result["batches"], result["examples"], result["batch_size"]) == (11, 352, 32)


def test_a_mixer_against_an_sw_mlp_with_a_heat_map(trained, capsys) -> None:
    mixer, sw_mlp = trained("mixer"), trained("sw_mlp")
    result = cka(capsys, "--ckpt", mixer, "--ckpt", sw_mlp, "--batches", "4", "--batch_size", "40", "--plot", "cka.png")
    assert (result["model_a"], result["model_b"]) == ("MLP-Mixer", "SW-MLP")
    assert result["layers_b"] == ["1", "2"] and (result["batches"], result["examples"]) == (4, 160)
    assert result["mixing_a"] == {"S": 16, "C": 16} and "mixing_b" not in result  # the Mixer's p = (1/S + 1/C)/2
    matrix = torch.tensor(result["cka"], dtype=torch.float64)
    assert matrix.shape == (2, 2) and bool(((matrix > 0) & (matrix < 1)).all())
    assert Path("cka.png").stat().st_size > 10_000
    main(["cka", "--ckpt", mixer, "--ckpt", sw_mlp, "--config", DATA_CONFIG, "--accelerator", "cpu", "--batches", "4"])
    out = capsys.readouterr().out
    assert "CKA of MLP-Mixer" in out and "1.channel" in out and "mean of the diagonal" in out


@pytest.mark.slow
def test_two_processes_give_the_one_process_matrix(trained, capsys) -> None:
    """DDP (2 CPU processes, gloo, ddp_spawn): each takes whole minibatches (11 = 6 + 5), the HSIC sums
    are torchmetrics states summed across processes, so the matrix is the one-process matrix."""
    mixer, sw_mlp = trained("mixer"), trained("sw_mlp")
    one = cka(capsys, "--ckpt", mixer, "--ckpt", sw_mlp)
    two = cka(capsys, "--ckpt", mixer, "--ckpt", sw_mlp, "--devices", "2", "--strategy", "ddp_spawn")
    assert (two["batches"], two["examples"]) == (one["batches"], one["examples"]) == (11, 352)
    torch.testing.assert_close(torch.tensor(two["cka"]), torch.tensor(one["cka"]), rtol=1e-9, atol=1e-12)


def test_bad_cka_inputs(trained, capsys) -> None:
    mixer, kron = trained("mixer"), trained("kron")
    cases = [
        (["--ckpt", mixer], "ckpt"),  # one checkpoint
        (["--ckpt", mixer, "--ckpt", kron], "ckpt"),  # a shallow MLP has no features before skip connections
        (["--ckpt", mixer, "--ckpt", mixer, "--batch_size", "3"], "batch_size"),  # the unbiased HSIC needs n >= 4
        (["--ckpt", mixer, "--ckpt", mixer, "--batch_size", "1000"], "batch_size"),  # more than the split has
        (["--ckpt", mixer, "--ckpt", "missing.ckpt"], "ckpt"),
    ]
    for args, field in cases:
        assert field in error_field(capsys, ["cka", *args, "--config", DATA_CONFIG, "--accelerator", "cpu"])
    Path("big.yaml").write_text("data:\n  init_args:\n    dataset: digits\n    image_size: 16\n")
    assert error_field(capsys, ["cka", "--ckpt", mixer, "--ckpt", mixer, "--config", "big.yaml"]) == "config"


def test_unbiased_hsic_is_the_u_statistic() -> None:
    """Song et al. 2012's estimator equals the U-statistic of E[k_ij l_ij] + E[k_ij] E[l_qr] − 2 E[k_ij l_iq]
    over distinct indices, computed here by brute force."""
    torch.manual_seed(0)
    n = 7
    x = torch.randn(n, 5, dtype=torch.float64)
    y = x[:, :3] + 0.5 * torch.randn(n, 3, dtype=torch.float64)
    k, l = gram_linear(x), gram_linear(y)
    terms = [
        k[i, j] * l[i, j] + k[i, j] * l[q, r] - 2 * k[i, j] * l[i, q]
        for i, j, q, r in itertools.permutations(range(n), 4)
    ]
    expected = torch.stack(terms).mean()
    torch.testing.assert_close(hsic_unbiased(k[None], l[None])[0, 0], expected)
    torch.testing.assert_close(hsic_unbiased(k[None], l[None], pairwise=False)[0], expected)


def test_cka_invariances_and_minibatch_accumulation() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 6, 5)
    q, _ = torch.linalg.qr(torch.randn(30, 30))
    rotated = (x.reshape(64, 30) @ q).reshape(64, 6, 5)  # orthogonal map and scale: CKA 1
    noise = torch.randn(64, 12)
    metric = MinibatchCKA(2, 3)
    for batch in range(4):
        s = slice(16 * batch, 16 * batch + 16)
        metric.update([x[s], 3.0 * x[s]], [rotated[s], noise[s], x[s].reshape(16, -1)[:, :10]])
    result = metric.compute()
    matrix = result["cka"]
    torch.testing.assert_close(matrix[:, 0], torch.ones(2, dtype=torch.float64))
    assert abs(float(matrix[0, 1])) < 0.2  # independent features: near 0 (unbiased: may be negative)
    assert int(result["batches"]) == 4 and int(result["examples"]) == 64


def test_minibatches_do_not_depend_on_the_number_of_processes() -> None:
    one = list(MinibatchSampler(103, 10, seed=3))
    assert len(one) == 10 and all(len(b) == 10 for b in one)  # the last 3 images are dropped
    shards = [list(MinibatchSampler(103, 10, seed=3, rank=r, world_size=3)) for r in range(3)]
    assert sorted(map(tuple, itertools.chain(*shards))) == sorted(map(tuple, one))
    assert [len(s) for s in shards] == [4, 3, 3]
    assert len(list(MinibatchSampler(103, 10, num_batches=4, seed=3))) == 4


def test_a_ddp_evaluation_leaves_no_process_group_behind(trained, capsys) -> None:
    """`--strategy ddp` starts a (gloo) process group that Lightning destroys at exit for NCCL only; one
    left alive is torn down with the interpreter, which aborts now and then ("terminate called without an
    active exception", pytorch#65513), and in one process it is still there for whatever runs next."""
    import torch.distributed as dist

    mixer = trained("mixer")
    result = cka(capsys, "--ckpt", mixer, "--ckpt", mixer, "--devices", "1", "--strategy", "ddp", "--batches", "2")
    assert result["batches"] == 2
    assert not dist.is_initialized()


def test_the_run_config_by_default_and_the_data_where_it_lies_now(capsys: pytest.CaptureFixture) -> None:
    """Without --config the first checkpoint's run config gives the images; ``--data.root`` where they lie now
    (the run's data moved): the same data, the same matrix."""
    from helpers.fakedata import write_image_folder

    write_image_folder(Path("images"), classes=3, per_class=8, size=(8, 8))
    tiny = str(TEST_CONFIGS / "digits_mixer.yaml")
    main(["fit", "--config", tiny, "--data.dataset", "folder", "--data.root", "images", "--trainer.max_epochs", "1"])
    last = "runs/digits_mixer/version_0/checkpoints/last.ckpt"
    args = ["cka", "--ckpt", last, "--ckpt", last, "--batch_size", "8", "--accelerator", "cpu"]
    capsys.readouterr()
    main([*args, "--json"])
    first = json.loads(capsys.readouterr().out)
    Path("images").rename("moved")
    assert error_field(capsys, args) == "data.root"
    main([*args, "--data.root", "moved", "--json"])
    moved = json.loads(capsys.readouterr().out)
    assert moved["cka"] == first["cka"] and moved["examples"] == 24  # three minibatches of the 24 val/ images
    assert error_field(capsys, ["cka", "--ckpt", "elsewhere.ckpt", "--ckpt", last]) == "config"
