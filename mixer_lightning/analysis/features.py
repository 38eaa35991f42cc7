"""What the analysis commands share: the data module of a config's ``data:`` section (built as ``mixer
fit`` builds it, with the same errors), checks that a trained network fits the data, and the names of
the features each network exposes."""

from __future__ import annotations

from typing import Any

from mixer_lightning.errors import require
from mixer_lightning.models.protocols import MixingNetwork, SkipInputs
from mixer_lightning.safety.config_files import load_configs


def datamodule_from_config(paths: list[str] | str, overrides: dict[str, Any] | None = None, field: str = "config"):
    """The data module of the ``data:`` section of the YAML config(s) at `paths` (later files override
    earlier ones, as repeated ``--config`` do), with `overrides` applied to its init args."""
    from jsonargparse import ArgumentParser
    from lightning.pytorch import LightningDataModule

    paths = [paths] if isinstance(paths, str) else list(paths)
    data = load_configs(paths, field).get("data")
    fix = "give a config with data: {class_path: mixer_lightning.data.ImageDataModule, init_args: ...}"
    require(isinstance(data, dict), field, f"{' + '.join(paths)} has no data: section", fix)
    data = {"class_path": "mixer_lightning.data.ImageDataModule", **data}
    data["init_args"] = {**(data.get("init_args") or {}), **(overrides or {})}
    parser = ArgumentParser(exit_on_error=False)  # jsonargparse: its import policy and its errors, as `mixer fit`
    parser.add_subclass_arguments(LightningDataModule, "data")
    return parser.instantiate_classes(parser.parse_object({"data": data})).data


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
