"""Test helpers, imported as ``from helpers import ...`` (pytest puts tests/ on the path): where the
configs are, the run directories a test's `mixer fit` made, JSON files. Also here: `fakedata` (tiny
datasets in their real on-disk formats), `trained` (tiny trained checkpoints, see the ``trained``
fixture), and the callbacks the kill/resume tests name by class path (`killer`, `sweep_killer`,
`recorder`; trusted with ``MIXER_TRUSTED_MODULES=helpers``)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
TEST_CONFIGS = ROOT / "tests" / "configs"


def run_dirs(name: str) -> list[Path]:
    """Run directories runs/<name>/version_* in the current directory, oldest first."""
    return sorted(Path("runs", name).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
