"""A family is first-class in every tool: the toy family of test_family.py and a low-rank S-Mixer defined
here (token mixing W = A·B, a family built on the PK base) run through fit, test, a sweep over their width,
its report, `visualize` and `cka` through the real `mixer`; a tool that cannot serve a family says so in one
line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from test_family import CONFIG as TOY
from torch import nn

from helpers import error_field, read_json, run_dirs
from mixer_lightning.cli import main
from mixer_lightning.models import SMixer

TESTS = str(Path(__file__).parent)
SHORT = "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1 --trainer.limit_test_batches 2"


class LowRankLinear(nn.Module):
    """x ↦ A B x + b: an FC layer whose W = A·B has rank r (A: out×r, B: r×in); no nn.Linear inside."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.a = nn.Parameter(torch.randn(out_features, rank) / rank**0.5)
        self.b = nn.Parameter(torch.randn(rank, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def effective_weight(self) -> torch.Tensor:
        return self.a @ self.b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.b), self.a, self.bias)


class LowRankFc(nn.Module):
    """f(x) = σ(A B x + b): the S-Mixer's token mixing at rank r."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.fc = LowRankLinear(in_features, out_features, rank)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))

    def forward_columns(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x.transpose(1, 2)).transpose(1, 2)


class LowRankSMixer(SMixer):
    """An S-Mixer whose token-mixing W = A·B has rank `rank` (its channel mixing is the S-Mixer's)."""

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 8,
        in_chans: int = 1,
        patch_size: int = 2,
        tokens: int | None = None,
        channels: int = 8,
        omega: int | None = None,
        num_blocks: int = 2,
        rank: int = 2,
    ):
        self.rank = rank
        super().__init__(num_classes, image_size, in_chans, patch_size, tokens, channels, omega, num_blocks)

    def make_mlp(self, axis, features_in: int, features_out: int) -> nn.Module:
        if axis == "channel":
            return super().make_mlp(axis, features_in, features_out)
        return LowRankFc(features_in, features_out, self.rank)


LOW_RANK = {
    **TOY,
    "trainer": {**TOY["trainer"], "logger": {**TOY["trainer"]["logger"], "init_args": {"name": "low_rank"}}},
    "model": {
        "net": {
            "class_path": f"{__name__}.LowRankSMixer",
            "init_args": {"patch_size": 2, "tokens": 12, "channels": 8, "num_blocks": 2, "rank": 2},
        }
    },
}


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The families of the test files, trusted and importable by every `mixer` a sweep starts."""
    monkeypatch.setenv("MIXER_TRUSTED_MODULES", f"test_family,{__name__}")
    monkeypatch.setenv("PYTHONPATH", TESTS)
    monkeypatch.setenv("MIXER_ARGS", SHORT)


def test_connections_count_every_weight_of_a_low_rank_layer() -> None:
    """A rank-r token mixing holds r(S_in + S) weights per block, not S·S_in (and no nn.Linear)."""
    net = LowRankSMixer(tokens=12, channels=8, rank=2)  # S0 = 16 → S = 12
    assert net.connections() == [2 * (16 + 12) * 8, 8 * 8 * 12, 2 * (12 + 12) * 8, 8 * 8 * 12]


def test_a_low_rank_s_mixer_through_every_tool(trusted, capsys: pytest.CaptureFixture[str]) -> None:
    Path("low_rank.yaml").write_text(yaml.safe_dump(LOW_RANK))
    main(["fit", "--config", "low_rank.yaml"])
    header = capsys.readouterr().out
    # Ω of the mixing layers at S (block 2): ((12 + 12)·2·8 + 8·8·12)/2 = 576, not the full-rank 960
    assert "S=12, C=8, m=96, Ω=576," in header
    (run,) = run_dirs("low_rank")
    last = str(run / "checkpoints" / "last.ckpt")
    main(["test", "--ckpt_path", last])
    assert set(read_json(run / "test_metrics.json")) >= {"test/acc1", "test/loss"}
    capsys.readouterr()

    main(["visualize", "--ckpt", last, "--out", "pictures", "--json"])
    drawn = json.loads(capsys.readouterr().out)
    assert drawn["network"] == "LowRankSMixer" and len(drawn["written"]) == 3  # token units of A·B, stem, patterns
    main(["cka", "--ckpt", last, "--ckpt", last, "--config", "low_rank.yaml", "--batches", "1", "--json"])
    cka = json.loads(capsys.readouterr().out)
    assert cka["layers_a"] == ["1.token", "1.channel", "2.token", "2.channel"]
    assert cka["cka"][0][0] == pytest.approx(1.0)

    # a sweep over its width at fixed Ω: a PK-base family without γ has γ = 1, S solved per C
    main(["sweep", "--config", "low_rank.yaml", "--omega", "1000", "--channels", "4,8", "--run", "s"])
    capsys.readouterr()
    main(["sweep", "report", "s", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(row["point"], row["C"], row["S"], row["seeds"]) for row in report["summary"]] == [
        ("C4_S20", 4, 20, 1),
        ("C8_S12", 8, 12, 1),
    ]
    assert yaml.safe_load(Path("s/configs/C4_S20_seed0.yaml").read_text())["model"]["net"]["init_args"]["rank"] == 2
    assert (
        error_field(capsys, ["sweep", "--config", "low_rank.yaml", "--omega", "1000", "--gamma", "2", "--emit", "x"])
        == "gamma"
    )


def test_the_toy_family_sweeps_its_width_and_the_tools_it_lacks_say_so(
    trusted, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("toy.yaml").write_text(yaml.safe_dump(TOY))
    main(["sweep", "--config", "toy.yaml", "--grid", "model.net.init_args.hidden=8,16", "--run", "s"])
    capsys.readouterr()
    main(["sweep", "report", "s", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(row["point"], row["hidden"], row["seeds"]) for row in report["summary"]] == [
        ("hidden8", 8, 1),
        ("hidden16", 16, 1),
    ]
    last = str(Path("s/runs/hidden8/seed0/checkpoints/last.ckpt"))
    assert error_field(capsys, ["visualize", "--ckpt", last, "--out", "pictures"]) == "ckpt"
    assert error_field(capsys, ["visualize", "--ckpt", last, "--out", "pictures", "--what", "token_units"]) == "what"
    assert error_field(capsys, ["cka", "--ckpt", last, "--ckpt", last, "--config", "toy.yaml"]) == "ckpt"
    # no width grid of its own: the Ω flags say so
    assert error_field(capsys, ["sweep", "--config", "toy.yaml", "--omega", "1000", "--emit", "x"]) == "config"
