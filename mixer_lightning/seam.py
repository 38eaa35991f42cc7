"""Every reach into a library's private names (Lightning, jsonargparse, timm, datasets, huggingface_hub,
torchmetrics): one function per need, each naming the behaviour of the library it relies on. Nothing
else in the package uses a library's ``_private`` name (tests/test_seam.py checks both: that each name
used here still exists in the installed releases, and that no other module uses one). Libraries are
imported inside the functions, so this module sits beneath everything."""

from __future__ import annotations
