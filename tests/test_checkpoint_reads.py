"""A run reads its checkpoint once (issue 59): a resumed ``mixer fit`` and a ``mixer test`` each `torch.load`
it once in the package (`callbacks.run.Run`, which keeps what the command needs of it), besides Lightning's
own reads: LightningCLI parsing its hyper-parameters over the model, and the restore."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from helpers import TEST_CONFIGS, read_json, run_dirs
from mixer_lightning.cli import main

TINY = str(TEST_CONFIGS / "digits_mixer.yaml")
LIGHTNING = {"lightning.pytorch.cli": 1, "lightning.fabric.utilities.cloud_io": 1}  # hparams, restore


def counted_reads(monkeypatch: pytest.MonkeyPatch, path: Path) -> Counter:
    """The `torch.load` calls of the file at `path` from now on, by the module that calls it."""
    reads: Counter = Counter()
    load = torch.load

    def counting(f, *args, **kwargs):
        name = f if isinstance(f, (str, Path)) else getattr(f, "path", None) or getattr(f, "name", None)
        if isinstance(name, (str, Path)) and Path(name).resolve() == path.resolve():  # a path, or a file opened
            reads[sys._getframe(1).f_globals.get("__name__", "?")] += 1
        return load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return reads


def package_reads(reads: Counter) -> int:
    return sum(n for module, n in reads.items() if module.startswith("mixer_lightning"))


def test_a_resumed_fit_and_a_test_read_the_checkpoint_once(monkeypatch: pytest.MonkeyPatch) -> None:
    main(["fit", "--config", TINY, "--trainer.max_epochs", "1"])
    (run,) = run_dirs("digits_mixer")
    last = run / "checkpoints" / "last.ckpt"
    reads = counted_reads(monkeypatch, last)
    main(["fit", "--config", TINY, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert read_json(run / "fit_summary.json")["epochs"] == 2  # resumed in its run
    assert package_reads(reads) == 1 and {m: n for m, n in reads.items() if m.startswith("lightning")} == LIGHTNING

    reads = counted_reads(monkeypatch, last)
    main(["test", "--ckpt_path", str(last)])
    assert read_json(run / "test_metrics.json")["checkpoint"]["global_step"] == 8  # its record, from that read
    assert package_reads(reads) == 1 and {m: n for m, n in reads.items() if m.startswith("lightning")} == LIGHTNING
