"""A family's LightningModule re-declares its network's architecture arguments (the CLI reads their
types from its signature): the two signatures must agree, so neither can drift from the other."""

from __future__ import annotations

import inspect

import pytest

from mixer_lightning.tasks import FAMILY_MODULES

# Arguments of the data (linked by the CLI) and of the module alone, not of the network.
DATA = {"num_classes", "image_size", "in_chans"}
MODULE_ONLY = {"self", "preset", "kwargs"}


def network_classes() -> dict[str, tuple[type, set[str]]]:
    """Module name → (its network class, network arguments the module fixes itself)."""
    from mixer_lightning.models import SWMLP, MLPMixer, ShallowMLP, SMixer

    return {
        "MLPMixerModule": (MLPMixer, set()),
        "SMixerModule": (SMixer, set()),
        "SWMLPModule": (SWMLP, set()),
        "KronMLPModule": (ShallowMLP, {"structure"}),  # the family is the structure
        "MonarchMLPModule": (ShallowMLP, {"structure"}),
    }


# Where the module's CLI type is deliberately another than the network's, and why.
CLI_TYPES = {
    # `--model.omega 2**18` (a string, parsed by width.parse_omega) or 262144: a float type would turn
    # 2**18 into a jsonargparse usage error; the network also takes floats from Python.
    "omega": "int|str|None",
    # YAML and flags give lists; the network also takes an (a, b) tuple from Python.
    "factors": "list[int]|None",
}


def test_every_family_module_is_checked() -> None:
    assert {cls.__name__ for cls in FAMILY_MODULES} == set(network_classes())


@pytest.mark.parametrize("module", FAMILY_MODULES, ids=lambda cls: cls.__name__)
def test_the_module_declares_exactly_the_networks_arguments(module: type) -> None:
    network, fixed = network_classes()[module.__name__]
    ours = inspect.signature(module.__init__).parameters
    theirs = inspect.signature(network.__init__).parameters
    ours_names = set(ours) - DATA - MODULE_ONLY
    theirs_names = set(theirs) - DATA - {"self"} - fixed
    assert ours_names == theirs_names, (
        f"only in {module.__name__}: {sorted(ours_names - theirs_names)}; "
        f"only in {network.__name__}: {sorted(theirs_names - ours_names)}"
    )
    for name in sorted(ours_names):
        # None means "the preset's value, else the network's default"; the type is the network's.
        assert ours[name].default is None, f"{module.__name__}.{name} must default to None"
        annotation = str(ours[name].annotation).replace(" ", "")
        wanted = str(theirs[name].annotation).replace(" ", "")
        if name in CLI_TYPES:
            assert annotation == CLI_TYPES[name], f"{module.__name__}.{name}: {annotation}"
            continue
        assert annotation in (wanted, f"{wanted}|None"), (
            f"{module.__name__}.{name}: {annotation} vs {network.__name__}.{name}: {wanted}"
        )
