"""Every reach into a library's private names (Lightning, jsonargparse, timm, datasets, huggingface_hub,
torchmetrics): one function per need, each naming the behaviour of the library it relies on. Nothing
else in the package uses a library's ``_private`` name (tests/test_seam.py checks both: that each name
used here still exists in the installed releases, and that no other module uses one). Libraries are
imported inside the functions, so this module sits beneath everything."""

from __future__ import annotations


def timm_model_card(card: dict, name: str) -> str:
    """README.md of a hub repo as timm's public ``push_to_hf_hub`` writes it (front matter with tags,
    library and datasets; then the ``description``, ``details`` and ``usage`` of `card`), for the same
    card written into a local folder: timm's ``timm.models._hub.generate_readme``."""
    from timm.models._hub import generate_readme

    return generate_readme(card, name)
