"""The documentation a user reads first: the README is a short front door, and every relative link
in it and in docs/ leads somewhere."""

from __future__ import annotations

import re

from helpers import CONFIGS, ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "configs" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12_500, "move reference material to docs/"
    for needed in ("make quickstart", "make test", "## Layout", "## Daily commands"):
        assert needed in text
    assert text.index("## Layout") < len(text) // 2  # the map is near the top


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve()
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
            elif anchor and resolved.suffix == ".md":
                titles = re.findall(r"(?m)^#+ (.+)$", resolved.read_text())
                slugs = {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)} → {target} (no such heading)")
    assert not broken, broken


def test_the_configs_readme_documents_every_folder_of_configs() -> None:
    text = (CONFIGS / "README.md").read_text()
    folders = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
    assert folders, "configs/ has overlay folders"
    for folder in folders:
        assert f"`{folder}/`" in text, f"configs/README.md does not document configs/{folder}/"
        for overlay in sorted((CONFIGS / folder).glob("*.yaml")):
            assert f"`{overlay.stem}`" in text, f"configs/README.md does not name configs/{folder}/{overlay.name}"
