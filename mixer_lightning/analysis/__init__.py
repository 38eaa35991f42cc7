"""Analyses of trained or freshly initialised networks: singular values of their layers (Hayase &
Karakida 2024, Sec. 4.3, App. D.1) and the effective wide-MLP view of Mixers (Sec. 3). Also here:
`width_spectra` (σ_max over width at fixed Ω, Fig. 4 right, App. D.1), `cka` (minibatch CKA, Sec. 3.4),
`fewshot` (linear few-shot evaluation), `visualize` (weight pictures), `features` (what they read),
`curves` (training curves from logs)."""

from mixer_lightning.analysis.spectrum import (
    mixing_layer_spectra,
    register_spectrum,
    singular_values,
    spectral_norm,
    weight_layers,
)

__all__ = ["mixing_layer_spectra", "register_spectrum", "singular_values", "spectral_norm", "weight_layers"]
