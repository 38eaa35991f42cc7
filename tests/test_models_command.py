"""`mixer models`: the table's columns stay aligned whatever the length of a name or family."""

from __future__ import annotations

import pytest

from mixer_lightning.cli import main
from mixer_lightning.commands import models


def test_columns_fit_the_longest_name_and_family(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    rows = [
        {"name": "mixer_s32", "family": "mlp_mixer", "params_without_head": 18.5e6, "source": "Tolstikhin, Table 1"},
        {"name": "lowrank_s_mixer_r8", "family": "lowrank_s_mixer", "params_without_head": 1e5, "source": "a lab"},
    ]
    monkeypatch.setattr(models, "all_rows", lambda: rows)  # a registered family of one's own, named long
    main(["models"])
    header, *lines = capsys.readouterr().out.splitlines()
    starts = {line.index(text) for line, text in zip(lines, ("Tolstikhin", "a lab"), strict=True)}
    assert starts == {header.index("source")}  # the source column starts at one place in every line
    assert {line.index("18.50") + 5 for line in lines[:1]} == {header.index(")") + 1}  # the counts right-aligned
