"""Analyses of trained or freshly initialised networks: singular values of their layers (`spectrum`,
`width_spectra`: Hayase & Karakida 2024, Sec. 4.3, App. D.1), the effective wide-MLP view of Mixers
(`effective`, Sec. 3), minibatch CKA (`cka`, Sec. 3.4), few-shot evaluation (`fewshot`), weight pictures
(`visualize`), what the commands read (`features`) and training curves from logs (`curves`)."""

from mixer_lightning.analysis.spectrum import mixing_layer_spectra, singular_values, spectral_norm, weight_layers

__all__ = ["mixing_layer_spectra", "singular_values", "spectral_norm", "weight_layers"]
