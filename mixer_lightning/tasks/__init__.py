"""LightningModules: the shared training logic and one thin module per architecture family."""

from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.loading import families
from mixer_lightning.tasks.mixer import MLPMixerModule, SMixerModule
from mixer_lightning.tasks.mlp import KronMLPModule, MonarchMLPModule, SWMLPModule

# The families a checkpoint may name as its module class (`mixer_lightning.tasks.loading.family_module`):
# each joins with `@family` on its class, and its module is imported above, or its checkpoints are refused.
FAMILY_MODULES = families()

__all__ = [
    "FAMILY_MODULES",
    "ClassifierModule",
    "KronMLPModule",
    "MLPMixerModule",
    "MonarchMLPModule",
    "SMixerModule",
    "SWMLPModule",
]
