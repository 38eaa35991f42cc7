"""LightningModules: the shared training logic and one thin module per architecture family."""

from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.mixer import MLPMixerModule, SMixerModule
from mixer_lightning.tasks.mlp import KronMLPModule, MonarchMLPModule, SWMLPModule

# The families a checkpoint may name as its module class (`mixer_lightning.tasks.loading.family_module`):
# a new family is added here, or its checkpoints are refused.
FAMILY_MODULES = (MLPMixerModule, SMixerModule, SWMLPModule, KronMLPModule, MonarchMLPModule)

__all__ = [
    "FAMILY_MODULES",
    "ClassifierModule",
    "KronMLPModule",
    "MLPMixerModule",
    "MonarchMLPModule",
    "SMixerModule",
    "SWMLPModule",
]
