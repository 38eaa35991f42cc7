"""LightningModules: the shared training logic and one thin module per architecture family."""

from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.mixer import MLPMixerModule, SMixerModule
from mixer_lightning.tasks.mlp import KronMLPModule, MonarchMLPModule, SWMLPModule

__all__ = [
    "ClassifierModule",
    "KronMLPModule",
    "MLPMixerModule",
    "MonarchMLPModule",
    "SMixerModule",
    "SWMLPModule",
]
