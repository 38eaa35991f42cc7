"""The package's parts import downwards (docs/architecture.md): every import of every module, lazy ones
included, read from its source; no circle between modules, and none between the parts of the root."""

from __future__ import annotations

import ast
from pathlib import Path

import mixer_lightning

PACKAGE = Path(mixer_lightning.__file__).parent
# The parts of the package root, lowest first; a part imports only parts of lower layers. A part below the
# command line that runs `mixer` (a sweep's points, a benchmarked fit) starts it as a process of its own
# (`hardware.mixer_command`), as a shell does: no import.
LAYERS = [
    {"errors", "seam", "hardware"},
    {"safety", "width"},
    {"models"},
    {"weights", "data", "optim"},
    {"tasks"},
    {"analysis", "loggers"},
    {"callbacks"},
    {"benchmarks"},
    {"commands"},
    {"cli"},
]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the package that `name` imports, at the top or inside a function: `from a.b import c`
    is the module ``a.b.c`` when there is one, else ``a.b``."""

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {module_of(alias.name) for alias in node.names if alias.name.startswith("mixer_lightning")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.startswith("mixer_lightning"):
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else module_of(base) for a in node.names}
    return found - {None, name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_no_import_circle() -> None:
    edges = graph()
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                circles.append(" → ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, circles


def test_no_module_is_over_400_lines() -> None:
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long


def test_the_parts_of_the_root_import_downwards() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    edges = graph()
    assert {part(m) for m in edges} - {""} == set(rank), "every part of the root has a layer"
    upwards = sorted(
        f"{source} → {target}"
        for source, targets in edges.items()
        for target in targets
        if part(source) and part(target) and part(source) != part(target) and rank[part(target)] >= rank[part(source)]
    )
    assert not upwards, upwards


# The only modules that import by a string, and what: a name a config or checkpoint gives, never the package's own.
IMPORTS_BY_NAME = {
    "mixer_lightning.tasks.initialise": "the network class a config or checkpoint names, trusted first",
    "mixer_lightning.cli.lightning": "the class a jsonargparse message names, imported already",
}


def test_nothing_imports_the_package_by_a_string() -> None:
    """An import by a string is an edge this test cannot read (`run_mixer` hid cli ← commands that way):
    import machinery is called only where a config or checkpoint names the class."""
    calls = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if function in ("import_module", "__import__", "find_spec", "import_object", "locate", "run_module"):
                    calls.add(f"{name}: {function}")
    assert {call.split(":")[0] for call in calls} <= set(IMPORTS_BY_NAME), sorted(calls)
