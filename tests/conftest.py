"""Shared test helpers. Tests drive the real `mixer` entry point (`mixer_lightning.cli.main`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning.pytorch  # noqa: F401  (first import here: its log handlers bind to pytest's session stream,
import pytest  #             not to the stream of the first test that imports it, closed after that test)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TEST_CONFIGS = Path(__file__).resolve().parent / "configs"

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*isinstance\\(treespec, LeafSpec\\).*")


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in its own empty directory, so `runs/` and `data/` land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_dirs(name: str) -> list[Path]:
    """Run directories runs/<name>/version_* in the current directory, oldest first."""
    return sorted(Path("runs", name).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
