"""Library internals live in one module, `mixer_lightning/seam.py`: every private name it uses still exists
in the installed releases (so an upgrade that renames one fails here, not in a user's run), and no other
module of the package uses a private name of these libraries."""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

import pytest

import mixer_lightning
from mixer_lightning import seam

PACKAGE = Path(mixer_lightning.__file__).parent
LIBRARIES = ("lightning", "jsonargparse", "timm", "datasets", "huggingface_hub", "torchmetrics")
# Keys Lightning writes into checkpoint files (LightningCLI's hyper-parameters): a file format that checkpoints
# carry for good, read wherever checkpoints are read, not an API that a release may rename.
FILE_KEYS = {"_class_path", "_instantiator"}


def missing_names(table: dict[str, tuple[str, ...]]) -> list[str]:
    """The entries of a `seam.PRIVATE_NAMES`-like table whose object lacks the name: an attribute of the object
    (or of its class), or a name its source assigns (an attribute set in ``__init__``, a key of a state dict)."""
    missing = []
    for path, names in table.items():
        module, _, attribute = path.partition(":")
        owner = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            owner = getattr(owner, part)
        source = inspect.getsource(owner)
        missing += [f"{path}.{name}" for name in names if not hasattr(owner, name) and name not in source]
    return missing


def test_every_private_name_the_seam_uses_exists_in_the_installed_releases() -> None:
    assert missing_names(seam.PRIVATE_NAMES) == []


def test_the_existence_check_fails_on_a_renamed_private_name() -> None:
    path, names = next(iter(seam.PRIVATE_NAMES.items()))
    renamed = {path: (f"{names[0]}_renamed_by_a_release",)}
    assert missing_names(renamed) == [f"{path}.{names[0]}_renamed_by_a_release"]


def test_every_library_warning_the_seam_ignores_is_still_worded_so() -> None:
    """`seam.LIBRARY_WARNINGS`: the words of each warning are in the source of the module said to word it (a
    release that rewords one fails here, not as chatter in a user's console)."""
    import re

    for name, (module, words) in seam.LIBRARY_WARNINGS.items():
        assert re.search(words, inspect.getsource(importlib.import_module(module))), name


def private_names_used(tree: ast.AST) -> set[str]:
    """The ``_names`` a module uses: attributes, string constants (keys of a library's state dicts) and
    imports (a ``_module`` segment or an imported ``_name``); dunders are not private."""
    names: set[str] = set()
    pieces = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in pieces
            and node.value.isidentifier()
        ):
            names.add(node.value)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            names |= {*node.module.split("."), *(alias.name for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {
                part for alias in node.names if alias.name.split(".")[0] in LIBRARIES for part in alias.name.split(".")
            }
    return {n for n in names if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))}


@cache
def library_private_names() -> frozenset[str]:
    """Every ``_name`` the libraries define: modules, functions, classes, attributes they assign."""
    names: set[str] = set()
    for library in LIBRARIES:
        root = Path(importlib.import_module(library).__file__).parent
        for path in root.rglob("*.py"):
            names |= {part for part in path.relative_to(root).with_suffix("").parts if part.startswith("_")}
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    names.add(node.value)  # state-dict keys, e.g. a loop's "_batches_that_stepped"
    return frozenset(n for n in names if n.startswith("_") and not (n.startswith("__") and n.endswith("__")))


def own_private_names() -> set[str]:
    """The ``_names`` the package defines itself (its own private functions and attributes; not the seam's
    overrides of a library's methods)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path == Path(seam.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def private_uses_outside_the_seam(package: Path) -> dict[str, list[str]]:
    """{module: the library private names it uses} for every module of `package` but the seam."""
    theirs = library_private_names() - own_private_names() - FILE_KEYS
    found = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "seam.py" and path.parent == package:
            continue
        used = sorted(private_names_used(ast.parse(path.read_text())) & theirs)
        if used:
            found[str(path.relative_to(package))] = used
    return found


def test_no_module_but_the_seam_uses_a_private_name_of_a_library() -> None:
    assert private_uses_outside_the_seam(PACKAGE) == {}


def test_the_seam_table_names_every_private_name_the_seam_uses() -> None:
    used = private_names_used(ast.parse(Path(seam.__file__).read_text())) & library_private_names()
    listed = {name for names in seam.PRIVATE_NAMES.values() for name in names}
    assert used - own_private_names() - FILE_KEYS <= listed


@pytest.mark.parametrize(
    "line", ["trainer._accelerator_connector.cluster_environment", "from timm.models._hub import save_for_hf"]
)
def test_a_private_name_written_outside_the_seam_is_found(tmp_path: Path, line: str) -> None:
    (tmp_path / "module.py").write_text(f"def f(trainer):\n    {line}\n")
    assert list(private_uses_outside_the_seam(tmp_path)) == ["module.py"]
