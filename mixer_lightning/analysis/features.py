"""What the analysis commands share: the data module of a config, checks that a trained network fits
the data, and the names of the features each network exposes.

Only the ``data:`` section of a config is read (a full training config works as well), and it is
built exactly as ``mixer fit`` builds it, with the same one-line errors (`ConfigError`s of the data
module name the field as ``data.<argument>``).
"""

from __future__ import annotations

from typing import Any

from mixer_lightning.errors import ConfigError, require

find_config_error = lambda error: error.__cause__ or error.__context__  # TEMPORARY (house-lead): H3 rewrites it
from mixer_lightning.models.protocols import MixingNetwork, SkipInputs
from mixer_lightning.safety.config_files import load_configs


def datamodule_from_config(paths: list[str] | str, overrides: dict[str, Any] | None = None, field: str = "config"):
    """The `ImageDataModule` of the ``data:`` section of the YAML config(s) at `paths` (later files
    override earlier ones, as repeated ``--config`` do), with `overrides` applied to its init args."""
    from jsonargparse import ArgumentParser
    from lightning.pytorch import LightningDataModule

    paths = [paths] if isinstance(paths, str) else list(paths)
    require(bool(paths), field, "no config given", "give --config DATA.yaml (a config with a data: section)")
    config = load_configs(paths, field)
    data = config.get("data")
    require(
        isinstance(data, dict),
        field,
        f"{' + '.join(paths)} has no data: section",
        "give a config with data: {class_path: mixer_lightning.data.ImageDataModule, init_args: ...}",
    )
    data = dict(data)
    data.setdefault("class_path", "mixer_lightning.data.ImageDataModule")
    data["init_args"] = {**(data.get("init_args") or {}), **(overrides or {})}
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data")
    try:
        return parser.instantiate_classes(parser.parse_object({"data": data})).data
    except Exception as error:
        cause = find_config_error(error)
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError("data", _first_problem(str(error)), "check the data: section of the config") from None


def _first_problem(message: str) -> str:
    """The informative line of a jsonargparse error (it nests the real one inside a Union report)."""
    lines = [line.strip(" -") for line in message.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("Problem with given class_path") and i + 1 < len(lines):
            return lines[i + 1]
        if line.startswith("data.") or "is not accepted" in line:
            return line
    return lines[0] if lines else "cannot build the data module"


def check_fits_data(module, datamodule, field: str) -> None:
    """A `ConfigError` unless the checkpoint's network takes the data module's images."""
    for name in ("image_size", "in_chans"):
        trained, given = getattr(module, name, None), getattr(datamodule, name)
        require(
            trained is None or trained == given,
            field,
            f"the network was trained on {name} = {trained}, the data gives {given}",
            f"set data.{name} (or pick the matching config)",
        )


def skip_input_names(net: SkipInputs) -> list[str]:
    """Names of the features `forward_skip_inputs` returns (`SkipInputs`): ``{block}.token`` /
    ``{block}.channel`` (the input of each mixing layer of a Mixer, `MixingNetwork`) or ``{block}``
    (the input of each block of another network, e.g. the SW-MLP); none for a network without them."""
    if isinstance(net, MixingNetwork):
        return [f"{i // 2 + 1}.{layer.axis}" for i, layer in enumerate(net.mixing_layers())]
    if isinstance(net, SkipInputs) and hasattr(net, "blocks"):
        return [str(i + 1) for i in range(len(net.blocks))]
    return []
