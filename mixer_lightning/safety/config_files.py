"""Reading YAML configs (sweeps, analysis commands, and the files `mixer fit` is given, checked first):
several files compose as repeated ``--config`` do, later files over earlier ones, recursively for
mappings; a class path outside the trusted packages is refused before import (`mixer_lightning.safety.trust`).

Every YAML text the ``mixer`` command reads is read within bounds (issue 25, RC15): YAML aliases are
shared references, so a 500-byte file of nine anchors of nine aliases each parses in a millisecond into
9^9 = 3.9e8 values, which whatever walks, copies or prints the tree then expands (an 8-level file took
four CPU-minutes); and PyYAML recurses once per nesting level, so 100,000 ``[`` end in a 3,000-line
`RecursionError`. `yaml_bounds_problem` measures the composed node graph (shared nodes counted once per
reference, in time proportional to the distinct nodes) before anything is built from it. It guards
`load_configs` here and, through `install_bounded_yaml_loader`, every YAML text jsonargparse loads
(config files, files named inside them, flag values). `special_file_kind` names what is not a regular
file or a folder: a FIFO blocks the reader until something writes into it, a device never ends.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from mixer_lightning.errors import ConfigError, require
from mixer_lightning.safety.trust import check_class_paths


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, recursively for mappings (what composing ``--config`` files does)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# A config holds ~100 values nested ~6 deep; these bounds are far above any config and far below what
# costs time (10^5 values are walked in ~0.1 s; PyYAML's recursion limit is near 300 levels).
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 100


class _TooDeep(Exception):
    pass


class _BoundedComposer(yaml.SafeLoader):
    """PyYAML's safe composer, refusing a node nested deeper than `MAX_YAML_DEPTH` as it reaches it
    (the scanner and parser read ahead lazily, so 100,000 ``[`` cost ~100 tokens, not a recursion error)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(root: Any) -> tuple[int, int] | None:
    """(values, depth) of the node graph `root` once its aliases are expanded, each distinct node
    measured once (iteratively: an alias chain may be deeper than Python's recursion limit); None when
    a node contains itself (``&a [*a]``), which no expansion ends."""
    done: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()  # the nodes on the current path, whose measure waits for their children's
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        children = _children(node)
        if leaving:
            done[id(node)] = (
                1 + sum(done[id(child)][0] for child in children),
                1 + max((done[id(child)][1] for child in children), default=0),
            )
            open_.discard(id(node))
            continue
        if id(node) in done:
            continue
        open_.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                return None
            if id(child) not in done:
                stack.append((child, False))
    return done[id(root)]


def _children(node: Any) -> list:
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def yaml_bounds_problem(text: str) -> str | None:
    """What makes the YAML `text` too large to read (`MAX_YAML_VALUES` values once its aliases are
    expanded, `MAX_YAML_DEPTH` levels), or None. Text that is no valid YAML is the reader's to report."""
    deep = f"nests deeper than {MAX_YAML_DEPTH} levels, refused (a config nests a few)"
    # Flow brackets first: PyYAML's scanner reads ~1,000 characters ahead, each step costing as many
    # steps as the open brackets (100,000 ``[`` would cost a second before the composer's check).
    depth = 0
    for bracket in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if bracket.group() in "[{" else max(depth - 1, 0)
        if depth > MAX_YAML_DEPTH:
            return deep
    loader = _BoundedComposer(text)
    try:
        root = loader.get_single_node()
    except _TooDeep:
        return deep
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()
    if root is None:
        return None
    size = _expanded_size(root)
    if size is None:
        return "contains itself through a YAML alias, refused (an endless value)"
    values, depth = size
    if values > MAX_YAML_VALUES:
        return (
            f"expands to {values:.1e} values through YAML aliases, refused before expanding them "
            f"(at most {MAX_YAML_VALUES:,})"
        )
    if depth > MAX_YAML_DEPTH:
        return deep
    return None


def bounded_safe_load(text: str, field: str, where: str) -> Any:
    """``yaml.safe_load(text)`` within the bounds of `yaml_bounds_problem`; beyond them a `ConfigError`
    on `field` naming `where` (the file, or the value). Invalid YAML raises `yaml.YAMLError`."""
    problem = yaml_bounds_problem(text)
    if problem is not None:
        raise ConfigError(field, f"{where} {problem}", "fix the file")
    return yaml.safe_load(text)


def special_file_kind(path: str | os.PathLike) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a folder ("a FIFO", "a character
    device", ...), after symlinks; None otherwise, also for a name no file can have (a component over
    255 bytes: ENAMETOOLONG) or one that cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


_jsonargparse_yaml_load: Any = None


def install_bounded_yaml_loader() -> None:
    """From now on, jsonargparse loads YAML (config files, files named inside them, flag values)
    through `bounded_jsonargparse_load`: its own loader (its float and timestamp rules kept), after
    the text passed `yaml_bounds_problem`. Installed once per process, however often ``mixer`` runs."""
    global _jsonargparse_yaml_load
    from jsonargparse import get_loader, set_loader

    if _jsonargparse_yaml_load is None:
        _jsonargparse_yaml_load = get_loader("yaml")
    # Only yaml.YAMLError means "not YAML" (jsonargparse then takes the text as a plain string); a
    # ConfigError is not listed, so a refusal stops the parse and reaches `mixer` as one line.
    set_loader("yaml", bounded_jsonargparse_load, exceptions=(yaml.YAMLError,))


def bounded_jsonargparse_load(stream: str, path: str | os.PathLike = "") -> Any:
    """jsonargparse's YAML loader within the bounds of `yaml_bounds_problem` (`path`: the file the text
    was read from, when jsonargparse says)."""
    if isinstance(stream, str):
        problem = yaml_bounds_problem(stream)
        if problem is not None:
            where = repr(str(path)) if path else f"a YAML value of {len(stream):,} characters"
            raise ConfigError("config", f"{where} {problem}", "fix it")
    return _jsonargparse_yaml_load(stream)


def load_configs(paths: list[str] | str, field: str = "config") -> dict:
    """The YAML files at `paths` merged in order; a missing, unreadable or non-mapping file is a
    `ConfigError` naming `field`."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    require(bool(paths), field, "no config given", "give --config FILE.yaml")
    config: dict = {}
    for path in paths:
        kind = special_file_kind(path)
        if kind is not None:  # a FIFO would block the read, a device never end it
            raise ConfigError(field, f"{path!r} is {kind} (not a regular file)", "give the path of a YAML config")
        is_file = os.path.isfile(path)  # os.path: a name over 255 bytes is no file (pathlib raises ENAMETOOLONG)
        require(is_file or not os.path.isdir(path), field, f"{path!r} is a folder", "give the path of a YAML config")
        require(is_file, field, f"no such file {path!r}", "give the path of a YAML config")
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(
                field,
                f"{path!r} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})",
                "save it as UTF-8",
            ) from None
        except OSError as error:
            raise ConfigError(field, f"cannot read {path!r} ({error.strerror})") from None
        try:
            loaded = bounded_safe_load(text, field, repr(path))
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(field, f"{path!r} is not valid YAML ({problem}{where})", "fix the file") from None
        require(
            loaded is not None,
            field,
            f"{path!r} is empty (no settings)",
            "give a YAML mapping, e.g. a run's config.yaml",
        )
        require(
            isinstance(loaded, dict),
            field,
            f"{path!r} is not a YAML mapping (it holds a {type(loaded).__name__})",
            "give a mapping of keys such as trainer:, model:, data:",
        )
        check_class_paths(loaded, field, repr(str(path)))  # before anything imports the classes it names
        config = deep_merge(config, loaded)
    return config
