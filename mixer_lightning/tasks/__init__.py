"""LightningModules: the shared training logic and one thin module per architecture family."""

from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.mixer import MLPMixerModule, SMixerModule

__all__ = ["ClassifierModule", "MLPMixerModule", "SMixerModule"]
