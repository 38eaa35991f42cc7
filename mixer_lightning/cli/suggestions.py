"""Argument errors as one line with a did-you-mean: jsonargparse's error for an unknown flag or config
key (``model.chanels`` → ``channels``, ``trainer.max_epoch`` → ``max_epochs``, ``dataa.batch_size`` →
``data.batch_size``), or for a missing model and data (no config given)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from typing import Any

from mixer_lightning.errors import ConfigError, translate_library_error


def _init_parameters(cls: type) -> list[str]:
    """The keyword arguments of `cls` (its ``__init__`` and, through ``**kwargs``, its bases')."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names += [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return list(dict.fromkeys(names))


def _closest(word: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def suggest_argument(error: BaseException, parser: Any, command: str | None) -> ConfigError | None:
    """jsonargparse's error for an unknown flag or config key as one line with a did-you-mean, or None
    to let `mixer_lightning.errors.translate_library_error` say it."""
    message = str(error)
    help_ = f"see `mixer {command} --help`" if command else "see `mixer --help`"
    option = re.search(r"Option '([^']+)' is not accepted", message)
    if option is not None:  # a class (the model, the optimiser, a callback) has no such argument
        before = message[: option.start()]
        after = message[option.end() :]
        got = re.search(r"class_path='([\w.]+)'", after)
        given = re.findall(r"Problem with given class_path '([\w.]+)'", before)
        class_path = got.group(1) if got else given[-1] if given else None
        keys = re.findall(r'Parser key "([^"]+)"', before)
        field = ".".join(keys)
        if got:  # a callable/class argument inside the class of the first key (model.optimizer)
            field += ".init_args"
        field = f"{field}.{option.group(1)}" if field else option.group(1)
        cls = None
        if class_path:
            module, _, name = class_path.rpartition(".")
            try:
                cls = getattr(importlib.import_module(module), name)  # already imported by jsonargparse
            except (ImportError, AttributeError):
                cls = None
        problem = f"{class_path.rsplit('.', 1)[-1] if class_path else 'the class'} has no option {option.group(1)!r}"
        close = _closest(option.group(1), _init_parameters(cls)) if cls is not None else None
        fix = f"did you mean {close!r}? {help_}" if close else help_
        return ConfigError(field, problem, fix)
    required = re.search(r"the following arguments are required: (.*)", message)
    if (
        required
        and command
        and {f"{command}.model", f"{command}.data"} & {a.strip() for a in required.group(1).split(",")}
    ):
        fix = (
            "give --config CONFIG.yaml, e.g. configs/quickstart.yaml"
            if command == "fit"
            else "give --ckpt_path RUN/checkpoints/best.ckpt (the run's config.yaml comes with it) or --config"
        )
        return ConfigError("config", "none given (the model and the data are set by a config)", fix)
    translated = translate_library_error(error, command)
    if not isinstance(translated, ConfigError) or "no such option" not in translated.problem:
        return None
    from mixer_lightning.cli.adapter import option_keys  # here: `unknown_flag` is used without Lightning

    return unknown_flag(translated.field.lstrip("-"), option_keys(parser), command, translated.problem)


def unknown_flag(
    key: str, known: list[str], command: str | None, problem: str = "no such option"
) -> ConfigError | None:
    """The one line for a flag ``--key`` that the parser does not have, with the closest of the
    option keys `known` (or the closest group: ``dataa.batch_size`` → ``data.batch_size``); None when
    nothing is close. Also what `mixer_lightning.cli.parser_cache` answers without building the parser."""
    help_ = f"see `mixer {command} --help`" if command else "see `mixer --help`"
    close = _closest(key, known)
    if close is None and "." in key:  # a mistyped group: dataa.batch_size -> data.batch_size
        head, _, rest = key.partition(".")
        group = _closest(head, sorted({k.split(".", 1)[0] for k in known}))
        close = f"{group}.{rest}" if group else None
    if close is None or close == key:
        return None
    return ConfigError(key, problem, f"did you mean {close!r}? {help_}")
