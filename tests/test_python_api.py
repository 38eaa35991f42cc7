"""docs/python-api.md runs as written: each of its ```python blocks is executed, on its own, in a folder
where ``mixer fit --config configs/quickstart.yaml`` (shortened) trained the checkpoint the page loads, beside
a ``photo.png`` and a ``photos/`` folder of images of other sizes and modes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import CONFIGS, ROOT
from mixer_lightning.cli import main

PAGE = ROOT / "docs" / "python-api.md"


def python_blocks() -> list[tuple[str, str]]:
    """(the heading above it, the code) of every ```python block of the page."""
    text = PAGE.read_text() if PAGE.is_file() else ""
    blocks, heading = [], "top"
    for part in re.split(r"(```python\n.*?```)", text, flags=re.S):
        if part.startswith("```python\n"):
            blocks.append((heading, part[len("```python\n") : -3]))
        else:
            heading = (re.findall(r"(?m)^#+ (.+)$", part) or [heading])[-1]
    return blocks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the page's examples run in: a quickstart run's checkpoints, photo.png and photos/."""
    import os

    folder = tmp_path_factory.mktemp("python_api")
    rng = np.random.default_rng(0)
    (folder / "photos" / "more").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / "photo.png")
    Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(folder / "photos" / "grey.png")
    Image.fromarray(rng.integers(0, 256, (30, 24, 3), dtype=np.uint8)).save(folder / "photos" / "more" / "b.jpg")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        short = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
        main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), *short])
    finally:
        os.chdir(cwd)
    assert (folder / "runs" / "quickstart" / "version_0" / "checkpoints" / "best.ckpt").is_file()
    return folder


def test_the_page_has_examples_and_is_linked() -> None:
    headings = {heading for heading, _ in python_blocks()}
    assert {"A checkpoint as an `nn.Module`, with its preprocessing", "Features"} <= headings, headings
    assert any("Trainer" in heading for heading in headings)
    assert "docs/python-api.md" in (ROOT / "README.md").read_text()
    assert "python-api.md" in (ROOT / "docs" / "usage.md").read_text()


@pytest.mark.parametrize(
    ("heading", "code"), [pytest.param(*block, id=f"{i}-{block[0][:40]}") for i, block in enumerate(python_blocks())]
)
def test_every_python_example_of_the_page_runs(heading: str, code: str, workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    exec(compile(code, f"docs/python-api.md ({heading})", "exec"), {"__name__": "__main__"})


def test_lightnings_load_from_checkpoint_rebuilds_a_scripts_module_and_trains_on(tmp_path) -> None:
    """A checkpoint of a Trainer script records its network, optimiser and schedule as {class_path, init_args}:
    `ClassifierModule.load_from_checkpoint` builds them again (trusted packages only) and training goes on."""
    import functools

    import torch
    from lightning.pytorch import Trainer

    from mixer_lightning.data import ImageDataModule
    from mixer_lightning.errors import ConfigError
    from mixer_lightning.models import MLPMixer
    from mixer_lightning.optim import WarmupDecayLR
    from mixer_lightning.tasks import ClassifierModule

    def trainer() -> Trainer:
        options = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=1)
        return Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=2, default_root_dir=tmp_path, **options)

    data = ImageDataModule("digits", batch_size=32)
    model = ClassifierModule(
        functools.partial(MLPMixer, patch_size=2, channels=8, num_blocks=1),
        optimizer=functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        lr_scheduler=functools.partial(WarmupDecayLR, warmup_steps=1),
    )
    first = trainer()
    first.fit(model, data)
    path = first.checkpoint_callback.best_model_path
    again = ClassifierModule.load_from_checkpoint(path)
    torch.testing.assert_close(again.net.state_dict(), model.net.state_dict())
    second = trainer()
    second.fit(again, data)
    (optimizer,) = second.optimizers
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert [group["name"] for group in optimizer.param_groups] == ["decay", "no_decay"]
    assert isinstance(second.lr_scheduler_configs[0].scheduler, WarmupDecayLR)

    checkpoint = torch.load(path, weights_only=True)
    checkpoint["hyper_parameters"]["net"]["class_path"] = "os.system"
    torch.save(checkpoint, tmp_path / "untrusted.ckpt")
    with pytest.raises(ConfigError) as error:
        ClassifierModule.load_from_checkpoint(tmp_path / "untrusted.ckpt")
    assert error.value.field == "model.net"
