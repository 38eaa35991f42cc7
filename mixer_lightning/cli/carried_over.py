"""An optimiser or schedule switched by a flag takes its own defaults for what nobody set.

jsonargparse keeps the init args of a subclass when its ``class_path`` changes, wherever the new class
accepts them ("only what gets specified is changed", omni-us/jsonargparse#460). That is right for a
value someone wrote, but the old class's *defaults* are in the namespace too, and they are kept the same
way: ``--model.init_args.optimizer torch.optim.SGD`` over the default AdamW trained SGD with AdamW's
``weight_decay=0.01`` (SGD's is 0), an L2 penalty nobody asked for, and a switch from a config's SGD to
AdamW kept SGD's ``weight_decay=0`` in place of AdamW's 0.01.

So: an init arg of ``model.optimizer`` / ``model.lr_scheduler`` that no config file and no flag wrote,
and that differs from the final class's own default, is one the switch carried over from the class it
replaced; it takes the final class's default, said in one line. Values someone wrote carry over as
jsonargparse does. Where the arguments cannot be read with certainty (a model section given as the
name of another file), nothing is changed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from typing import Any

from mixer_lightning.safety.config_files import bounded_safe_load, load_configs

CALLABLES = ("optimizer", "lr_scheduler")
_UNREADABLE = object()  # a file given for a group that is no YAML mapping
_FLAG = re.compile(r"--model\.(?:init_args\.)?(optimizer|lr_scheduler)(?:\.(?:init_args\.)?(\w+))?$")


def _keys_of(spec: Any) -> set[str] | None:
    """The init args a subclass spec writes: a class name writes none; a mapping writes its ``init_args``
    and any other key but ``class_path``; anything else (a file name in a config) cannot be read."""
    if spec is None or (isinstance(spec, str) and not spec.lower().endswith((".yaml", ".yml", ".json"))):
        return set()
    if isinstance(spec, dict):
        init_args = spec.get("init_args") or {}
        if not isinstance(init_args, dict):
            return None
        return set(init_args) | {k for k in spec if k not in ("class_path", "init_args", "dict_kwargs")}
    return None


def _value(text: str) -> Any:
    """A flag's value as jsonargparse reads it: a YAML/JSON file's content, else the value as YAML."""
    if os.path.isfile(text):
        try:
            return load_configs([text], "config")
        except Exception:  # not a YAML mapping (`--model notes.txt`): jsonargparse's own line says so
            return _UNREADABLE
    try:
        return bounded_safe_load(text, "config", repr(text))
    except Exception:  # not YAML: jsonargparse reads it as a plain string (a class name)
        return text


def _pairs(args: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for each flag of `args` (``--flag value`` or ``--flag=value``)."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg.startswith("-") and "=" in arg:
            flag, value = arg.split("=", 1)
            pairs.append((flag, value))
        elif arg.startswith("-") and i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
            pairs.append((arg, str(args[i + 1])))
            i += 1
        else:
            pairs.append((arg, None))
        i += 1
    return pairs


def written_arguments(args: list[str]) -> dict[str, set[str]] | None:
    """For ``optimizer`` and ``lr_scheduler``, the init args that the config files or flags in `args`
    write (``--config`` files' ``model``, ``--model`` files or values, ``--model.optimizer VALUE`` and
    ``--model.init_args.optimizer.init_args.lr X``); None when some cannot be read."""
    written: dict[str, set[str]] = {name: set() for name in CALLABLES}
    for flag, value in _pairs(args):
        if flag in ("--config", "-c") and value is not None:
            root = _value(value)
            if root is _UNREADABLE:
                return None
            model = root.get("model") if isinstance(root, dict) else None
        elif flag == "--model" and value is not None:
            model = _value(value)
        else:
            found = _FLAG.match(flag)
            if found and found.group(2):
                written[found.group(1)].add(found.group(2))
            elif found and value is not None:
                keys = _keys_of(_value(value))
                if keys is None:
                    return None
                written[found.group(1)] |= keys
            continue
        if model is None:
            continue
        if model is _UNREADABLE or not isinstance(model, dict):
            return None  # a model section that names another file: not read here
        section = model.get("init_args") if isinstance(model.get("init_args"), dict) else {}
        for name in CALLABLES:
            for spec in (model.get(name), section.get(name)):
                keys = _keys_of(spec)
                if keys is None:
                    return None
                written[name] |= keys
    return written


def _class_defaults(class_path: str) -> dict[str, Any] | None:
    module, _, name = class_path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module), name)
        parameters = inspect.signature(target).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    try:
        return bool(value == default)
    except Exception:
        return False


def reset_carried_over(config: Any, written: dict[str, set[str]] | None, announce: bool) -> dict[str, dict]:
    """Give the model's optimiser/schedule their class defaults for init args nobody wrote (module
    docstring); with `announce`, one line per callable on stderr. Returns {callable: {arg: (was, now)}}."""
    model = config.get("model") if written is not None and config is not None else None
    model_args = model.get("init_args") if model is not None else None
    changed: dict[str, dict] = {}
    if model_args is None:
        return changed
    for name in CALLABLES:
        spec = model_args.get(name)
        init_args = spec.get("init_args") if spec is not None and hasattr(spec, "get") else None
        class_path = spec.get("class_path") if init_args is not None else None
        defaults = _class_defaults(class_path) if isinstance(class_path, str) else None
        if not defaults:
            continue
        for key, value in list(init_args.items()):
            if key in written[name] or key not in defaults or _same(value, defaults[key]):
                continue
            init_args[key] = defaults[key]
            changed.setdefault(name, {})[key] = (value, defaults[key])
        if announce and name in changed:
            now = " and ".join(f"{k}={new!r}" for k, (_, new) in changed[name].items())
            was = ", ".join(f"{old!r}" for old, _ in changed[name].values())
            flags = " / ".join(f"--model.init_args.{name}.init_args.{k}" for k in changed[name])
            print(
                f"mixer: note: {class_path.rsplit('.', 1)[-1]} takes its own default {now}, not {was} that "
                f"the {name} it replaced had and no config or flag set; to choose: {flags}",
                file=sys.stderr,
                flush=True,
            )
    return changed


def settled_flags(parser: Any, args: list[str], written: dict[str, set[str]]) -> list[str]:
    """For ``--print_config``, which jsonargparse prints while it parses: the flags that give the init args
    `reset_carried_over` would reset their final class's defaults (announced), found by parsing `args`
    once without ``--print_config``."""
    probe = parser.parse_args([a for a in args if not str(a).startswith("--print_config")])
    command = probe.get("subcommand")
    changed = reset_carried_over(probe.get(command) if command else probe, written, announce=True)
    return [
        f"--model.init_args.{name}.init_args.{key}={json.dumps(list(new) if isinstance(new, tuple) else new)}"
        for name, values in changed.items()
        for key, (_, new) in values.items()
    ]
