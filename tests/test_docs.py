"""The documentation a user reads first: the README is a short front door, the findings page
(docs/reproductions.md) opens on its claims table and holds what its generator writes, and every relative link in
them and in docs/ leads somewhere."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from helpers import CONFIGS, ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "configs" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "reproductions").glob("*.md")),
]
FINDINGS = ROOT / "docs" / "reproductions.md"


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


def _findings():
    spec = importlib.util.spec_from_file_location("findings", ROOT / "docs" / "reproductions" / "findings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["findings"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_findings_page_is_one_screen_of_claims_then_a_section_each() -> None:
    """Issue 58: at most 25 KB, and the first thing after a short introduction is the claims table."""
    text = FINDINGS.read_text()
    assert len(text.encode()) <= 25_000, "move history and per-run detail to docs/reproductions/appendix.md"
    first_table = text.index("\n| # | claim")
    assert first_table < text.index("\n## ") and first_table < 1_500
    assert text.count("<!-- findings.py claims.md -->") == 1


def test_the_pages_tables_and_the_readmes_findings_are_the_generators(tmp_path) -> None:
    """Every table of docs/reproductions.md and the README's findings lines are what findings.py writes from the
    committed record (docs/reproductions/paper): a number edited by hand, or a record changed without
    `findings.py --doc docs/reproductions.md --doc README.md`, fails here."""
    findings = _findings()
    texts = findings.write_all(ROOT / "docs" / "reproductions" / "paper", tmp_path / "out", plot=False)
    for page in (FINDINGS, ROOT / "README.md"):
        copy = tmp_path / page.name
        copy.write_text(page.read_text())
        assert findings.fill_doc(copy, texts) >= 1
        assert copy.read_text() == page.read_text(), (
            f"{page.name}'s generated blocks differ from findings.py's: run .venv/bin/python "
            "docs/reproductions/findings.py --doc docs/reproductions.md --doc README.md"
        )
    for name, text in texts.items():  # the committed tables beside the page are the same
        committed = ROOT / "docs" / "reproductions" / "findings" / name
        assert committed.read_text() == text, f"docs/reproductions/findings/{name} is stale"


def test_no_tracked_file_holds_a_merge_conflict() -> None:
    # configs/README.md carried one for a week: a merge's markers render as text and hide which side is true.
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for name in files:
        path = ROOT / name
        if path.suffix in {".md", ".py", ".yaml", ".sh", ".toml", ".txt", ".cfg"} and path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            marked += [name for line in lines if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert not marked, sorted(set(marked))
