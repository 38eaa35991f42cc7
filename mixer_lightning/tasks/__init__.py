"""The LightningModule (`ClassifierModule`, which takes any network) and safe checkpoint loading."""

from mixer_lightning.tasks.classifier import ClassifierModule

__all__ = ["ClassifierModule"]
