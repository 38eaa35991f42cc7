"""Lightning modules of the Mixer families: MLP-Mixer and S-Mixer (normal and random-permuted).

Fine-tuning (``init_from``, ``upscale``; `ClassifierModule.build_network`) works for both families;
the official JAX and timm weights exist for the MLP-Mixer only (``mixer convert``).
"""

from __future__ import annotations

from typing import Any

from mixer_lightning.models.layers import Activation, InitMode
from mixer_lightning.tasks.classifier import ClassifierModule
from mixer_lightning.tasks.loading import family


@family
class MLPMixerModule(ClassifierModule):
    """An MLP-Mixer (`mixer_lightning.models.MLPMixer`) trained as a classifier.

    Architecture arguments left at None take the preset's value, else the family default.

    Args:
        preset: a registered MLP-Mixer (``mixer_b16``, ``mixer_ss_w``, ...; see ``mixer models``).
        patch_size: P.
        tokens: S, the tokens of the mixing layers (default: the patch grid's S0).
        channels: C, the channels of the mixing layers.
        omega: Ω, connections per layer, from which S is solved (give tokens or omega).
        gamma: γ; hidden widths D_S = γS, D_C = γC unless given.
        token_hidden: D_S.
        channel_hidden: D_C.
        num_blocks: L.
        permute: RP MLP-Mixer: true for every block, or one flag per block.
        skip_layer: SkipLayer in the first block (default: when S ≠ S0).
        drop_rate: MLP dropout.
        drop_path: stochastic depth of the last MLP (rising linearly from 0).
        norm_eps: LayerNorm ε.
        act: ``gelu`` or ``gelu_tanh``.
        init: ``xavier`` or ``lecun`` dense init.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        image_size: int | None = None,
        in_chans: int | None = None,
        preset: str | None = None,
        patch_size: int | None = None,
        tokens: int | None = None,
        channels: int | None = None,
        omega: int | str | None = None,
        gamma: float | None = None,
        token_hidden: int | None = None,
        channel_hidden: int | None = None,
        num_blocks: int | None = None,
        permute: bool | list[bool] | None = None,
        skip_layer: bool | None = None,
        drop_rate: float | None = None,
        drop_path: float | None = None,
        norm_eps: float | None = None,
        act: Activation | None = None,
        init: InitMode | None = None,
        **kwargs: Any,
    ):
        super().__init__(num_classes=num_classes, image_size=image_size, in_chans=in_chans, **kwargs)
        self.set_network(
            "mlp_mixer",
            preset,
            patch_size=patch_size,
            tokens=tokens,
            channels=channels,
            omega=omega,
            gamma=gamma,
            token_hidden=token_hidden,
            channel_hidden=channel_hidden,
            num_blocks=num_blocks,
            permute=permute,
            skip_layer=skip_layer,
            drop_rate=drop_rate,
            drop_path=drop_path,
            norm_eps=norm_eps,
            act=act,
            init=init,
        )


@family
class SMixerModule(ClassifierModule):
    """An S-Mixer (`mixer_lightning.models.SMixer`) trained as a classifier.

    Args:
        preset: a registered S-Mixer (see ``mixer models``).
        patch_size: P.
        tokens: S (default S0), or give ``omega``.
        channels: C.
        omega: Ω = (C²S + CS²)/2, from which S is solved.
        num_blocks: L.
        permute: RP S-Mixer: true for every block, or one flag per block (App. D.5).
        skip_layer: SkipLayer in the first block (default: when S ≠ S0).
        drop_rate: dropout after each FC + σ.
        drop_path: stochastic depth of the last mixing layer.
        norm_eps: LayerNorm ε (default 1e-5, as the paper).
        act: ``gelu`` or ``gelu_tanh``.
        init: ``xavier`` or ``lecun`` dense init.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        image_size: int | None = None,
        in_chans: int | None = None,
        preset: str | None = None,
        patch_size: int | None = None,
        tokens: int | None = None,
        channels: int | None = None,
        omega: int | str | None = None,
        num_blocks: int | None = None,
        permute: bool | list[bool] | None = None,
        skip_layer: bool | None = None,
        drop_rate: float | None = None,
        drop_path: float | None = None,
        norm_eps: float | None = None,
        act: Activation | None = None,
        init: InitMode | None = None,
        **kwargs: Any,
    ):
        super().__init__(num_classes=num_classes, image_size=image_size, in_chans=in_chans, **kwargs)
        self.set_network(
            "s_mixer",
            preset,
            patch_size=patch_size,
            tokens=tokens,
            channels=channels,
            omega=omega,
            num_blocks=num_blocks,
            permute=permute,
            skip_layer=skip_layer,
            drop_rate=drop_rate,
            drop_path=drop_path,
            norm_eps=norm_eps,
            act=act,
            init=init,
        )
