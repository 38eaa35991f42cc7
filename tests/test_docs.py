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


def readme_commands(subcommand: str) -> list[list[str]]:
    """The ``mixer SUBCOMMAND ...`` lines of the README's code blocks, as argument lists (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    lines = [line.split("  #")[0].split() for block in blocks for line in block.splitlines()]
    return [line[1:] for line in lines if line[:2] == ["mixer", subcommand]]


def test_every_training_command_of_the_readme_parses(capsys, monkeypatch) -> None:
    """Each `mixer fit` line of the README, parsed as the CLI parses it (configs, overlays and flags all
    exist and compose): `--print_config` stops after the parse."""
    import pytest

    from mixer_lightning.cli import main

    monkeypatch.chdir(ROOT)
    commands = readme_commands("fit")
    assert len(commands) >= 5
    for argv in commands:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--print_config"])
        assert exit_info.value.code in (0, None), (argv, capsys.readouterr().err[-500:])
    capsys.readouterr()
