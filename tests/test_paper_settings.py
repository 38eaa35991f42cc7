"""Every config's settings against the papers, as ``mixer fit --config X --print_config`` resolves them.

`PAPER` is a table transcribed from the papers: for every config under configs/, one row per setting
(category, key, value, source). Sources cite the passage: "H&K" is Hayase & Karakida 2024 (its appendix
included), "T" Tolstikhin et al. 2021 (main text), "T supp." its supplementary. A row whose source starts
with "choice" is a setting the paper leaves open: the config's header names it and the row keeps it from
drifting silently. Every config has rows for its architecture, optimiser, schedule, batch, epochs and
augmentation (`CATEGORIES`); a config without rows fails `test_every_config_has_rows_for_every_category`.

Keys are dotted paths into the printed config (``model.net.init_args.<arg>`` for the network, ``model.<arg>``
for training). The configs write the architecture out (a preset's values included), and ``--print_config``
gives every network argument, defaults included, so each is checked as the network receives it. Derived keys: ``global_batch`` (the
GlobalBatchSize callback's batch, else data.batch_size on one device), ``S`` (the tokens a Mixer
solves from Ω, `width.resolve_tokens`), ``m`` and ``p`` (an SW-MLP's width and density, eq. S.43).

One ``--print_config`` costs ~0.6 s after the first (~10 s of imports), so the fast suite checks a
config of each family and recipe (`FAST`) and the slow suite (``pytest -m slow``, ~45 s) all of them.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import pytest
import yaml

from helpers import CONFIGS
from mixer_lightning.cli import main
from mixer_lightning.models import SWMLP, MLPMixer, ShallowMLP, SMixer
from mixer_lightning.models.sw_mlp import resolve_width_density
from mixer_lightning.width import resolve_tokens

CATEGORIES = ("architecture", "optimiser", "schedule", "batch", "epochs", "augmentation")
FAST = {
    "cifar10_mixer_ss8",
    "cifar10_fig4_mixer",
    "cifar10_fig4_sw_mlp",
    "cifar10_fig5_s_mixer",
    "imagenet_mixer_b_w",
    "imagenet_mixer_b16_tolstikhin",
}
CHOICE = "choice (not stated in the paper; the config's header)"


class Row(NamedTuple):
    category: str
    key: str
    value: Any
    source: str


# --- row builders: one call per category, every value with its source --------------------------------


TRAINING = ("upscale", "label_smoothing")  # ClassifierModule's own arguments among the architecture rows


def arch(source: str, **settings: Any) -> list[Row]:
    """Architecture rows: network arguments (``S``, ``m``, ``p``: derived, see the module doc; `TRAINING`: the module's)."""
    return [
        Row(
            "architecture",
            key if key in ("S", "m", "p") else f"model.{key}" if key in TRAINING else f"model.net.init_args.{key}",
            value,
            source,
        )
        for key, value in settings.items()
    ]


def model_class(name: str, source: str) -> list[Row]:
    return [Row("architecture", "model.net.class_path", f"mixer_lightning.models.{name}", source)]


def data(source: str, **settings: Any) -> list[Row]:
    return [Row("augmentation", f"data.init_args.{key}", value, source) for key, value in settings.items()]


def optimiser(source: str, class_path: str, **settings: Any) -> list[Row]:
    rows = [Row("optimiser", "model.optimizer.class_path", class_path, source)]
    return rows + [Row("optimiser", f"model.optimizer.init_args.{k}", v, source) for k, v in settings.items()]


def schedule(source: str, **settings: Any) -> list[Row]:
    rows = [Row("schedule", "model.lr_scheduler.class_path", "mixer_lightning.optim.WarmupDecayLR", source)]
    return rows + [Row("schedule", f"model.lr_scheduler.init_args.{k}", v, source) for k, v in settings.items()]


def batch(value: int, source: str) -> list[Row]:
    return [Row("batch", "global_batch", value, source)]


def epochs(value: int, source: str) -> list[Row]:
    return [Row("epochs", "trainer.max_epochs", value, source)]


def steps(value: int, source: str) -> list[Row]:
    return [Row("epochs", "trainer.max_steps", value, source)]


def augmentation(source: str, **settings: Any) -> list[Row]:
    return [Row("augmentation", f"data.init_args.{k}", v, source) for k, v in settings.items()]


def trainer(category: str, source: str, **settings: Any) -> list[Row]:
    return [Row(category, f"trainer.{k}", v, source) for k, v in settings.items()]


# --- Hayase & Karakida 2024 ------------------------------------------------------------------------

HAYASE_ARCH = "H&K App. A.2.1 eq. S.4 (LN ε = 1e-5 'in all experiments'), Sec. 4.3 / eq. S.39 (N(0, 1/n))"
SW_INIT = (
    CHOICE + ": App. A.2.5 masks of ones times W ~ N(0, 1/(pm)), Sec. 4.3's initial M⊙W (init: masked); App. A.2.1 (ε)"
)
SPARSE = CHOICE + ": CSR storage of M⊙W, the same function as the paper's dense M⊙W (models/sparse.py)"
NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "stl10": "STL-10"}


def hayase_mixer_arch() -> list[Row]:
    return arch(HAYASE_ARCH, norm_eps=1e-5, init="normal") + arch("H&K eq. S.3 (σ = GELU)", act="gelu")


def c4_data(dataset: str, size_source: str = "H&K App. C.4 (STL-10 resized to 32×32)") -> list[Row]:
    rows = augmentation(
        "H&K App. C.4 (random cropping and random horizontal flipping)",
        dataset=dataset,
        train_crop="random_crop",
        hflip=0.5,
    )
    rows += augmentation(CHOICE + ": train on the whole train split, report the test split", val_split=0.0)
    if dataset == "stl10":
        rows += augmentation(size_source, image_size=32)
    return rows


def c4_recipe(
    dataset: str,
    lr: float = 0.02,
    lr_source: str = "H&K App. C.4",
    epochs_: int = 200,
    epochs_source: str = "H&K App. C.4",
    batch_: int = 128,
    batch_source: str = "H&K App. C.4",
    autoaugment: bool = False,
    aug_source: str = "",
) -> list[Row]:
    """App. C.4's settings, "used throughout the whole study on CIFAR-10, CIFAR-100, and STL-10" unless
    otherwise specified: Nesterov SGD (momentum 0.9), batch 128, 200 epochs, lr 0.02, cosine annealing."""
    rows = optimiser("H&K App. C.4 (Nesterov SGD, momentum 0.9)", "torch.optim.SGD", momentum=0.9, nesterov=True)
    rows += optimiser(lr_source, "torch.optim.SGD", lr=lr)[1:]
    rows += optimiser(CHOICE, "torch.optim.SGD", weight_decay=0.0)[1:]
    rows += schedule("H&K App. C.4 (cosine annealing)", decay="cosine", min_lr=0.0)
    rows += schedule(CHOICE + ": no warm-up", warmup_epochs=0.0, warmup_steps=None)
    rows += batch(batch_, batch_source) + epochs(epochs_, epochs_source) + c4_data(dataset)
    rows += augmentation(
        aug_source or "H&K App. C.4 (crop and flip only)", auto_augment="original" if autoaugment else None
    )
    rows += augmentation("H&K App. C.4 (no mixup)", mixup=0.0, cutmix=0.0)
    return rows


def c1_recipe(
    aug: bool = True,
    lr_source: str = "H&K App. C.1",
    epochs_: int = 600,
    batch_: int = 128,
    source: str = "H&K App. C.1",
) -> list[Row]:
    """App. C.1's Fig. 2(a) settings: AdamW, momentum 0.9, lr 0.01, batch 128, 600 epochs, cosine, AutoAugment."""
    rows = optimiser(source + " (AdamW, momentum 0.9)", "torch.optim.AdamW", betas=[0.9, 0.999])
    rows += optimiser(lr_source, "torch.optim.AdamW", lr=0.01)[1:]
    rows += optimiser(CHOICE + ": torch's AdamW default", "torch.optim.AdamW", weight_decay=0.01)[1:]
    rows += schedule(source + " (cosine annealing)", decay="cosine", min_lr=0.0)
    rows += schedule(CHOICE + ": no warm-up", warmup_epochs=0.0, warmup_steps=None)
    rows += batch(batch_, source) + epochs(epochs_, source)
    rows += augmentation(source + " (auto-augmentation)", auto_augment="original" if aug else None)
    rows += augmentation(
        CHOICE + ": C.4's crop + flip under AutoAugment", dataset="cifar10", train_crop="random_crop", hflip=0.5
    )
    rows += augmentation(CHOICE + ": train on the whole train split, report the test split", val_split=0.0)
    rows += augmentation(CHOICE + ": no mixup", mixup=0.0, cutmix=0.0)
    return rows


def hayase_imagenet_recipe(source: str = "H&K App. C.5 (ImageNet-1k, timm-based)") -> list[Row]:
    """App. C.5's ImageNet-1k recipe (Table 1 lower and Fig. 6(d); C.3: "the same as the other experiments")."""
    rows = optimiser(source, "torch.optim.AdamW", lr=1e-3, weight_decay=0.05)
    rows += schedule(
        source + ": warm-up 5 epochs from 1e-6, cosine to 1e-5",
        decay="cosine",
        warmup_epochs=5.0,
        warmup_start_lr=1e-6,
        min_lr=1e-5,
    )
    rows += batch(4096, source + " and Table S.2") + epochs(300, source + " and Table S.2")
    rows += augmentation(
        source,
        auto_augment="rand-m9-mstd0.5-inc1",
        random_erasing=0.25,
        mixup=0.8,
        cutmix=1.0,
        mixup_switch_prob=0.5,
        dataset="imagenet",
        image_size=224,
    )
    rows += [Row("augmentation", "model.label_smoothing", 0.1, source)]
    rows += augmentation(
        CHOICE + ": timm train.py defaults",
        train_crop="random_resized_crop",
        crop_scale=[0.08, 1.0],
        hflip=0.5,
        interpolation="random",
        random_erasing_mode="pixel",
        eval_crop="resmall_crop",
        eval_crop_pct=0.875,
    )
    rows += trainer("optimiser", CHOICE + ": timm's default, no clipping", gradient_clip_val=None)
    return rows


PAPER: dict[str, list[Row]] = {}

# Table 1 (upper): Mixer-SS/8, Mixer-SS-W on CIFAR-10/100, App. C.3.
for _ds in ("cifar10", "cifar100"):
    for _preset, _lr in (("mixer_ss8", 0.06 if _ds == "cifar100" else 0.04), ("mixer_ss_w", 0.04)):
        PAPER[f"{_ds}_{_preset}"] = [
            *model_class("MLPMixer", "H&K Table 1"),
            *arch(
                "H&K Table 1 / App. C.3 (L = 2, γ = 4; SS/8: P = 8, S = 16, C = 986; SS-W: P = 4, S = 64, C = 487)",
                num_blocks=2,
                gamma=4.0,
                patch_size=8 if _preset == "mixer_ss8" else 4,
                tokens=16 if _preset == "mixer_ss8" else 64,
                channels=986 if _preset == "mixer_ss8" else 487,
            ),
            *hayase_mixer_arch(),
            *arch("H&K App. A.2.4 (SkipLayer only where S ≠ S0 or S is swept; here S = S0)", skip_layer=None),
            *optimiser(
                "H&K App. C.3 (AdamW; lr 0.06 for SS/8 on CIFAR-100, 0.04 otherwise)", "torch.optim.AdamW", lr=_lr
            ),
            *optimiser(CHOICE + ": torch's AdamW default", "torch.optim.AdamW", weight_decay=0.01)[1:],
            *schedule("H&K App. C.3 (cosine annealing)", decay="cosine", min_lr=0.0),
            *schedule(CHOICE + ": no warm-up", warmup_epochs=0.0, warmup_steps=None),
            *batch(1024, "H&K App. C.3"),
            *epochs(4000, "H&K App. C.3"),
            *augmentation("H&K App. C.3 (auto-augmentation)", auto_augment="original", dataset=_ds),
            *augmentation(CHOICE + ": C.4's crop + flip under AutoAugment", train_crop="random_crop", hflip=0.5),
            *augmentation(CHOICE + ": whole train split, test split reported", val_split=0.0),
        ]

# Table 1 (lower): Mixer-B-W and Mixer-B/16 with the same recipe, ImageNet-1k.
PAPER["imagenet_mixer_b_w"] = [
    *model_class("MLPMixer", "H&K Table 1"),
    *arch(
        "H&K App. C.3 (L = 8, P = 14, C = 588, S = 256, γ = 4.57)",
        num_blocks=8,
        patch_size=14,
        tokens=256,
        channels=588,
        gamma=4.57,
    ),
    *hayase_mixer_arch(),
    *arch("H&K App. A.2.4 (S = S0 = 256, not swept)", skip_layer=None),
    *hayase_imagenet_recipe(),
]
PAPER["imagenet_mixer_b16"] = [
    *model_class("MLPMixer", "H&K Table 1 (Mixer-B/16 row)"),
    *arch(
        "T Table 1 (Mixer-B/16: 12 layers, P = 16, C = 768, D_S = 384, D_C = 3072)",
        num_blocks=12,
        patch_size=16,
        channels=768,
        token_hidden=384,
        channel_hidden=3072,
    ),
    *arch(
        HAYASE_ARCH + "; choice: Hayase's settings on B/16 to compare like for like with B-W",
        norm_eps=1e-5,
        init="normal",
    ),
    *arch("timm's exact GELU (H&K C.5 trains with timm)", act="gelu"),
    *hayase_imagenet_recipe(),
]

# Fig. 6(d) and Table S.3 (ImageNet): MLP-Mixer / RP MLP-Mixer, L = 8, γ = 4.
for _rp in (False, True):
    _kind = "rp_mlp_mixer" if _rp else "mlp_mixer"
    PAPER[f"imagenet_fig6_{_kind}"] = [
        *model_class("MLPMixer", "H&K Fig. 6(d), App. C.5"),
        *arch(
            "H&K Table S.2 / App. C.5 (L = 8, γ = 4, Ω = 290,217,984; grid point P = 16, C = 3P²)",
            num_blocks=8,
            gamma=4.0,
            omega=290217984,
            patch_size=16,
            channels=768,
            S=196,
            permute=_rp,
        ),
        *arch("H&K App. A.2.4 (the sweeps use the SkipLayer even when S = S0)", skip_layer=True),
        *hayase_mixer_arch(),
        *hayase_imagenet_recipe(),
    ]
    PAPER[f"imagenet_s3_{_kind}"] = [
        *model_class("MLPMixer", "H&K Table S.3"),
        *arch(
            "H&K Table S.3 / App. D.9 (ImageNet: S = 256, C = 588, L = 8, γ = 4; P = 14 as Mixer-B-W)",
            num_blocks=8,
            gamma=4.0,
            tokens=256,
            channels=588,
            patch_size=14,
            permute=_rp,
        ),
        *arch("H&K App. A.2.4 (S = S0, not swept)", skip_layer=False),
        *hayase_mixer_arch(),
        *hayase_imagenet_recipe(),
    ]

# Fig. 2: MLP-Mixer L = 3, γ = 2, S = C = 64, P = 4 vs SW-MLP p = 2^-n, App. C.1.
PAPER["cifar10_fig2_mixer"] = [
    *model_class("MLPMixer", "H&K Fig. 2, App. C.1"),
    *arch(
        "H&K App. C.1 (L = 3, γ = 2, S = C = 64, patch 4)",
        num_blocks=3,
        gamma=2.0,
        tokens=64,
        channels=64,
        patch_size=4,
    ),
    *arch("H&K App. A.2.4 (S = 32 ≠ S0 needs it; S = 64 as S = 32 for a fair comparison: choice)", skip_layer=True),
    *hayase_mixer_arch(),
    *c1_recipe(),
]
PAPER["cifar10_fig2_sw_mlp"] = [
    *model_class("SWMLP", "H&K Fig. 2, App. C.1"),
    *arch(
        "H&K App. C.1 (the 3-block Mixer's MLPs replaced by M⊙A: 6 blocks, γ = 2, P = 4)",
        num_blocks=6,
        block="mlp",
        gamma=2.0,
        patch_size=4,
    ),
    *arch("H&K App. C.1 (sparsity 2^-n; base n = 6, the Fig. 2(b) SW-MLP of sparsity 1/64)", p=2**-6),
    *arch(CHOICE + ": m = S·C = 4096 as the Mixer's; the Mixer's MLP form", m=4096, out_act=False),
    *arch(SW_INIT, init="masked", norm_eps=1e-5),
    *arch(SPARSE, impl="sparse"),
    *c1_recipe(),
]

# Fig. 4 (left): Ω = 2^19, γ = 2, 3 blocks, App. C.2 = C.1's training.
PAPER["cifar10_fig4_mixer"] = [
    *model_class("MLPMixer", "H&K Fig. 4, App. C.2"),
    *arch(
        "H&K Fig. 4 / App. C.2 (Ω = 2^19, γ = 2, C = 4 … 64 and S from Ω; base C = 32, S = 113)",
        omega=524288,
        gamma=2.0,
        channels=32,
        S=113,
        patch_size=4,
    ),
    *arch("H&K App. C.1 (L = 3, as Fig. 2(a))", num_blocks=3),
    *arch("H&K App. A.2.4 (the sweeps use the SkipLayer even when S = S0)", skip_layer=True),
    *hayase_mixer_arch(),
    *c1_recipe(source="H&K App. C.2 ('the same training settings as in Figure 2(a)')"),
]
PAPER["cifar10_fig4_sw_mlp"] = [
    *model_class("SWMLP", "H&K Fig. 4, App. C.2"),
    *arch(
        "H&K Fig. 4 / App. C.2 (Ω = 2^19, γ = 2, widths of the Mixers; base m = 4096, p = Ω/(γm²) = 1/64)",
        omega=524288,
        gamma=2.0,
        m=4096,
        p=1 / 64,
        patch_size=4,
    ),
    *arch(CHOICE + ": C.1's construction, 6 blocks in the Mixer's MLP form", num_blocks=6, block="mlp", out_act=False),
    *arch(SW_INIT, init="masked", norm_eps=1e-5),
    *arch(SPARSE, impl="sparse"),
    *c1_recipe(source="H&K App. C.2 ('the same training settings as in Figure 2(a)')"),
]

# Fig. 5: S-Mixer / RP S-Mixer (8 blocks) and SW-MLP at fixed Ω, App. C.4.
for _ds in NAMES:
    for _rp in (False, True):
        PAPER[f"{_ds}_fig5_{'rp_' if _rp else ''}s_mixer"] = [
            *model_class("SMixer", "H&K Fig. 5, App. C.4 (i)"),
            *arch(
                "H&K App. C.4 (i) (8 blocks, P = 4, Ω = 2^18, pair (C, S) = (32, 113))",
                num_blocks=8,
                patch_size=4,
                omega=262144,
                channels=32,
                S=113,
                permute=_rp,
            ),
            *arch("H&K App. A.2.4 (the sweeps use the SkipLayer even when S = S0)", skip_layer=True),
            *hayase_mixer_arch(),
            *c4_recipe(_ds),
        ]
    if _ds == "cifar10":  # App. A.2.3 read literally: only J2 random (docs/reproductions.md 0c, arm (a))
        PAPER["cifar10_fig5_rp_s_mixer_output"] = [
            *PAPER["cifar10_fig5_rp_s_mixer"],
            *arch("H&K App. A.2.3 ('random shuffling of output indexes of vectors': J1 structured)", permute_j1=False),
        ]
    PAPER[f"{_ds}_fig5_sw_mlp"] = [
        *model_class("SWMLP", "H&K Fig. 5, App. C.4 (ii)"),
        *arch(
            "H&K App. C.4 (ii) (8 blocks, Ω = 2^18, 1-p = 0.5: m = √(Ω/p) = 724, eq. S.16/S.43)",
            num_blocks=8,
            block="fc",
            omega=262144,
            p=0.5,
            m=724,
            patch_size=4,
        ),
        *arch(SW_INIT, init="masked", norm_eps=1e-5),
        *arch(SPARSE, impl="sparse"),
        *c4_recipe(_ds),
    ]

# Fig. 6 (a)-(c): S-Mixer / RP S-Mixer, L = 12, Table S.2 (prose of C.5 disagrees; the headers say so).
for _ds, (_omega, _c, _s) in {
    "cifar10": (2**21, 64, 226),
    "cifar100": (2**21, 64, 226),
    "stl10": (2**18, 48, 83),
}.items():
    for _rp in (False, True):
        _rows = [
            *model_class("SMixer", "H&K Fig. 6, App. C.5"),
            *arch(
                f"H&K Table S.2 (L = 12, Ω = 2^{int(math.log2(_omega))}) and the C.4 pair (C, S) = ({_c}, {_s})",
                num_blocks=12,
                omega=_omega,
                channels=_c,
                S=_s,
                patch_size=4,
                permute=_rp,
            ),
            *arch("H&K App. A.2.4 (the sweeps use the SkipLayer even when S = S0)", skip_layer=True),
            *hayase_mixer_arch(),
        ]
        if _ds == "cifar10":
            _rows += optimiser("H&K Table S.2 (CIFAR10: AdamW, lr 0.02)", "torch.optim.AdamW", lr=0.02)
            _rows += optimiser(
                CHOICE + ": torch's AdamW default (0.05 is C.5's ImageNet recipe)",
                "torch.optim.AdamW",
                weight_decay=0.01,
            )[1:]
            _rows += schedule("H&K App. C.4 (cosine annealing)", decay="cosine", min_lr=0.0)
            _rows += schedule(CHOICE + ": no warm-up", warmup_epochs=0.0, warmup_steps=None)
            _rows += batch(1024, "H&K Table S.2") + epochs(2000, "H&K Table S.2") + c4_data(_ds)
            _rows += augmentation("H&K Table S.2 (no hard augmentation)", auto_augment=None, mixup=0.0, cutmix=0.0)
        else:
            _rows += c4_recipe(
                _ds,
                lr=0.1,
                lr_source="H&K Table S.2 (SGD 0.1)",
                batch_source="H&K Table S.2",
                epochs_=600 if _ds == "cifar100" else 2000,
                epochs_source="H&K Table S.2",
                aug_source="H&K Table S.2 (no hard augmentation)",
            )
        PAPER[f"{_ds}_fig6_{'rp_' if _rp else ''}s_mixer"] = _rows

# Fig. 7: S = C = 128, L ∈ {4, …, 20} (base L = 4), App. C.6 with C.4's settings; D.5 and D.6.
for _ds in NAMES:
    for _rp in (False, True):
        PAPER[f"{_ds}_fig7_{'rp_' if _rp else ''}s_mixer"] = [
            *model_class("SMixer", "H&K Fig. 7, App. C.6"),
            *arch(
                "H&K App. C.6 (S = C = 128, L ∈ {4, 8, 12, 16, 20}: base L = 4; P = 4 as C.4)",
                tokens=128,
                channels=128,
                num_blocks=4,
                patch_size=4,
                permute=_rp,
            ),
            *arch("H&K App. A.2.4 (S ≠ S0 = 64)", skip_layer=True),
            *hayase_mixer_arch(),
            *c4_recipe(_ds),
        ]
    PAPER[f"{_ds}_d5_s_mixer"] = [
        *model_class("SMixer", "H&K App. D.5, Fig. S.4"),
        *arch(
            "H&K App. D.5 (4 blocks, S = C = 64, one block RP: base the first)",
            num_blocks=4,
            tokens=64,
            channels=64,
            patch_size=4,
            permute=[True, False, False, False],
        ),
        *arch(CHOICE + ": the SkipLayer as Fig. 7's models (D.5: 'consistent with C.6')", skip_layer=True),
        *hayase_mixer_arch(),
        *c4_recipe(_ds, lr_source="H&K App. D.5 ('consistent with Section C.6') and C.4"),
    ]
    _stl = _ds == "stl10"
    _rows = [
        *model_class("SMixer", "H&K App. D.6, Fig. S.5"),
        *arch(
            "H&K App. D.6 (S = C = 64, 4 blocks; P swept: base P = 4 for CIFAR (S0 = 64), 6 for STL-10 at 90 px)",
            tokens=64,
            channels=64,
            num_blocks=4,
            patch_size=6 if _stl else 4,
            permute=False,
        ),
        *arch("H&K App. A.2.4 (S0 is swept: the SkipLayer at every P)", skip_layer=True),
        *hayase_mixer_arch(),
        *c4_recipe(
            _ds,
            lr=0.1,
            lr_source="H&K App. D.6 (initial learning rate 0.1)",
            epochs_=400 if _stl else 200,
            epochs_source="H&K App. D.6 (STL-10: 400 epochs; CIFAR: 200)",
        ),
    ]
    if _stl:
        _rows = [r for r in _rows if r.key != "data.init_args.image_size"]
        _rows += augmentation("H&K App. D.6 (STL-10 resized to 90×90×3)", image_size=90)
    PAPER[f"{_ds}_d6_s_mixer"] = _rows

# Fig. S.1 left: SW-MLP trainability at Ω = 2^16 (D.1).
PAPER["cifar10_s1_sw_mlp"] = [
    *model_class("SWMLP", "H&K App. D.1, Fig. S.1 (left)"),
    *arch("H&K App. D.1 (Ω = 2^16; p swept: base p = 2^-4, m = √(Ω/p) = 1024)", omega=65536, p=2**-4, m=1024),
    *arch(
        CHOICE + ": γ 'according to Golubeva' read as plain FC layers (γ = 1); C.4's 8-block SW-MLP",
        block="fc",
        num_blocks=8,
        patch_size=4,
    ),
    *arch(SW_INIT, init="masked", norm_eps=1e-5),
    *arch(SPARSE, impl="sparse"),
    *c4_recipe("cifar10"),
]

# D.2 / Fig. S.2: MLP-Mixer, RP MLP-Mixer, SW-MLP with γ = 4, lr 0.1.
for _ds in ("cifar10", "cifar100"):
    for _rp in (False, True):
        PAPER[f"{_ds}_d2_{'rp_' if _rp else ''}mlp_mixer"] = [
            *model_class("MLPMixer", "H&K App. D.2, Fig. S.2"),
            *arch(
                "H&K App. D.2 (γ = 4; C ∈ {16, …, 173}, S from Ω ∈ {2^18, 2^20}: base C = 32 at 2^18, S = 50)",
                gamma=4.0,
                omega=262144,
                channels=32,
                S=50,
                permute=_rp,
            ),
            *arch(CHOICE + ": C.4's 8 blocks and P = 4", num_blocks=8, patch_size=4),
            *arch(
                "H&K App. A.2.4 (the sweeps use the SkipLayer; 'the same setting for the MLP-Mixer')", skip_layer=True
            ),
            *hayase_mixer_arch(),
            *c4_recipe(_ds, lr=0.1, lr_source="H&K App. D.2 (initial learning rate 0.1)"),
        ]
    PAPER[f"{_ds}_d2_sw_mlp"] = [
        *model_class("SWMLP", "H&K App. D.2, Fig. S.2"),
        *arch(
            "H&K App. D.2 (γ = 4, p ∈ {0.1, …, 0.9}, m = √(Ω/(γp)): base Ω = 2^18, p = 0.1, m = 810)",
            gamma=4.0,
            omega=262144,
            p=0.1,
            m=810,
            block="mlp",
        ),
        *arch(CHOICE + ": 8 MLP blocks (eq. S.17) as the Mixer arms, P = 4", num_blocks=8, patch_size=4),
        *arch(SW_INIT, init="masked", norm_eps=1e-5),
        *arch(SPARSE, impl="sparse"),
        *c4_recipe(_ds, lr=0.1, lr_source="H&K App. D.2 (initial learning rate 0.1)"),
    ]

# D.3 / Fig. S.3: γ at fixed m = 4096 (eq. S.46).
for _rp in (False, True):
    PAPER[f"cifar10_d3_{'rp_' if _rp else ''}mlp_mixer"] = [
        *model_class("MLPMixer", "H&K App. D.3, Fig. S.3"),
        *arch(
            "H&K App. D.3 / eq. S.46 (m = 4096; base C = S = √m = 64, γ = 2Ω/(m(C + m/C)) = 2 at Ω = 2^19: choice)",
            tokens=64,
            channels=64,
            gamma=2.0,
            permute=_rp,
        ),
        *arch(CHOICE + ": C.4's 8 blocks and P = 4", num_blocks=8, patch_size=4),
        *arch("H&K App. A.2.4 (S is swept)", skip_layer=True),
        *hayase_mixer_arch(),
        *c4_recipe("cifar10"),
    ]

# D.7 / Figs. S.6-S.8: overfitting of normal vs RP, 600 epochs.
for _rp in (False, True):
    _p = "rp_" if _rp else ""
    PAPER[f"cifar10_d7_{_p}s_mixer"] = [
        *model_class("SMixer", "H&K App. D.7, Fig. S.6"),
        *arch(
            "H&K Fig. S.6 (L = 8, C ∈ {16, 32, 64, 114, 173}: base C = 173; Ω = 2^18 (choice): S = 16)",
            num_blocks=8,
            channels=173,
            omega=262144,
            S=16,
            permute=_rp,
        ),
        *arch(CHOICE + ": P = 4 (C.4)", patch_size=4),
        *arch("H&K App. A.2.4 (S is swept)", skip_layer=True),
        *hayase_mixer_arch(),
        *c4_recipe(
            "cifar10",
            lr=0.1,
            lr_source="H&K Fig. S.6 (initial learning rate 0.1)",
            epochs_=600,
            epochs_source="H&K Fig. S.6 (600 epochs)",
            batch_source=CHOICE + ": C.4's 128",
        ),
    ]
    PAPER[f"cifar10_d7_{_p}mlp_mixer_sgd"] = [
        *model_class("MLPMixer", "H&K App. D.7, Fig. S.7"),
        *arch("H&K App. D.7 / Fig. S.7 (MLP-Mixer, γ = 4, C = 173)", gamma=4.0, channels=173, permute=_rp),
        *arch(
            CHOICE + ": Fig. S.6's (C, S) = (173, 16), i.e. Ω = 2^20 at γ = 4; L = 8, P = 4",
            omega=1048576,
            S=16,
            num_blocks=8,
            patch_size=4,
        ),
        *arch("H&K App. A.2.4 (S is swept)", skip_layer=True),
        *hayase_mixer_arch(),
        *c4_recipe(
            "cifar10",
            lr=0.1,
            lr_source="H&K Fig. S.7 (initial learning rate 0.1)",
            epochs_=600,
            epochs_source="H&K Fig. S.7 (600 epochs)",
            batch_=256,
            batch_source="H&K Fig. S.7 (mini-batch 256)",
            autoaugment=True,
            aug_source="H&K App. D.7 (auto-augmentation added)",
        ),
    ]
    PAPER[f"cifar10_d7_{_p}mlp_mixer_adamw"] = [
        *model_class("MLPMixer", "H&K App. D.7, Fig. S.8"),
        *arch("H&K Fig. S.8 (S = C = 64) and D.7 (MLP-Mixer, γ = 4)", tokens=64, channels=64, gamma=4.0, permute=_rp),
        *arch(
            CHOICE + ": L = 8, P = 4 as Fig. S.7; the SkipLayer as Fig. S.7's models",
            num_blocks=8,
            patch_size=4,
            skip_layer=True,
        ),
        *hayase_mixer_arch(),
        *optimiser("H&K App. D.7 / Fig. S.8 (AdamW, lr 0.01)", "torch.optim.AdamW", lr=0.01),
        *optimiser(CHOICE + ": torch's AdamW default", "torch.optim.AdamW", weight_decay=0.01)[1:],
        *schedule(CHOICE + ": C.4's cosine annealing, no warm-up", decay="cosine", warmup_epochs=0.0, min_lr=0.0),
        *batch(256, "H&K Fig. S.8 (mini-batch 256)"),
        *epochs(600, "H&K Fig. S.8 (600 epochs)"),
        *augmentation("H&K Fig. S.8 (auto-augmentation)", auto_augment="original", dataset="cifar10"),
        *augmentation(
            CHOICE + ": C.4's crop + flip under AutoAugment", train_crop="random_crop", hflip=0.5, val_split=0.0
        ),
    ]

# Table S.3 (CIFAR): S = C = 64, L = 3, γ = 2 (fits its FLOPs and memory; the headers show the arithmetic).
_S3 = "H&K Table S.3 (805M / 3.22GB and 12.5M FLOPs fit S = C = 64, L = 3, γ = 2: choice, see the header)"
_S3_TRAIN = "H&K App. C.3's runtime paragraph (AdamW, mini-batch 128, 600 epochs)"
for _rp in (False, True):
    PAPER[f"cifar10_s3_{'rp_' if _rp else ''}mlp_mixer"] = [
        *model_class("MLPMixer", "H&K Table S.3"),
        *arch(_S3, tokens=64, channels=64, num_blocks=3, gamma=2.0, patch_size=4, permute=_rp),
        *arch(CHOICE + ": Fig. 4's C = 64 model", skip_layer=True),
        *hayase_mixer_arch(),
        *c1_recipe(lr_source=CHOICE + ": Fig. 2/4's lr", source=_S3_TRAIN),
    ]
PAPER["cifar10_s3_sw_mlp_dense"] = [
    *model_class("SWMLP", "H&K Table S.3"),
    *arch(
        _S3 + "; App. C.1's 6 blocks, p = 1/64", m=4096, p=1 / 64, num_blocks=6, gamma=2.0, block="mlp", patch_size=4
    ),
    *arch("H&K App. D.9 (the SW-MLP stores dense M⊙W)", impl="dense"),
    *arch(CHOICE + ": the Mixer's MLP form (C.1)", out_act=False),
    *arch(SW_INIT, init="masked", norm_eps=1e-5),
    *c1_recipe(lr_source=CHOICE + ": Fig. 2/4's lr", source=_S3_TRAIN),
]

# Fig. 2(d): shallow Kronecker / Monarch MLPs on MNIST (and the offline 8×8 digits), App. C.1.
for _family in ("kron", "monarch"):
    for _ds, _n in (("mnist", 28), ("digits", 8)):
        _src = "H&K App. C.1 (Fig. 2(d): AdamW, 200 epochs, lr 0.01, cosine)"
        PAPER[f"{_ds}_{_family}_mlp"] = [
            *model_class("ShallowMLP", "H&K Fig. 2(d), Sec. 3.3"),
            *arch("H&K Fig. 2(d), Sec. 3.3 (Kronecker or Monarch B1, B2)", structure=_family),
            *arch(f"H&K Sec. 3.3 (B_c B2 ReLU(B1 x), one ReLU; n = {_n}·{_n})", factors=[_n, _n], second_act=False),
            *optimiser(_src, "torch.optim.AdamW", lr=0.01),
            *optimiser(CHOICE + ": torch's AdamW default", "torch.optim.AdamW", weight_decay=0.01)[1:],
            *schedule(_src, decay="cosine", warmup_epochs=0.0),
            *batch(128, CHOICE),
            *epochs(200, _src),
            *augmentation(
                ("H&K App. C.1 (MNIST)" if _ds == "mnist" else CHOICE + ": MNIST's offline stand-in"), dataset=_ds
            ),
            *augmentation(CHOICE + ": no augmentation", auto_augment=None, mixup=0.0, hflip=None),
        ]

# Not a paper experiment: the README's quickstart.
_QS = "not from a paper: the README's quickstart (digits on a CPU)"
PAPER["quickstart"] = [
    *model_class("MLPMixer", _QS),
    *arch(_QS, patch_size=2, tokens=16, channels=64, gamma=4, num_blocks=4),
    *optimiser(_QS, "torch.optim.AdamW", lr=0.003, weight_decay=0.05),
    *schedule(_QS, decay="cosine", warmup_epochs=2.0),
    *batch(64, _QS),
    *epochs(30, _QS),
    *augmentation(_QS, dataset="digits", auto_augment=None, mixup=0.0),
]

# --- Tolstikhin et al. 2021 --------------------------------------------------------------------------

T_ARCH = "T supp. F (flax nn.gelu: tanh approximation; nn.LayerNorm: ε = 1e-6)"
T_PRE = "T Sec. 3 'Pre-training' (Adam β = (0.9, 0.999), 10k-step linear warm-up, linear decay, batch 4096, clip 1)"
T_FT = "T Sec. 3 'Fine-tuning' (momentum SGD, batch 512, clip 1, cosine with linear warm-up, no weight decay)"
VIT = "choice: ViT's fine-tuning setup (T supp. C: 'We follow the setup of [ViT]'; vit_jax/configs/common.py)"
_T_SIZES = {
    "b16": dict(num_blocks=12, channels=768, token_hidden=384, channel_hidden=3072),
    "l16": dict(num_blocks=24, channels=1024, token_hidden=512, channel_hidden=4096),
}


def tolstikhin_pretraining(name: str, dataset: str, randaug: int, mixup: float, table_row: str) -> list[Row]:
    return [
        *model_class("MLPMixer", "T Table 1"),
        *arch(f"T Table 1 (Mixer-{name[0].upper()}/16)", patch_size=16, **_T_SIZES[name]),
        *arch(T_ARCH, act="gelu_tanh", norm_eps=1e-6),
        *arch(f"T supp. Table 1 ({table_row}: dropout 0, stoch. depth 0.1)", drop_rate=0.0, drop_path=0.1),
        *arch(CHOICE + ": the ViT JAX code's init (timm's)", init="xavier"),
        *optimiser(T_PRE, "torch.optim.AdamW", betas=[0.9, 0.999]),
        *optimiser(f"T supp. Table 1 ({table_row}: lr 0.001, wd 0.1)", "torch.optim.AdamW", lr=1e-3, weight_decay=0.1)[
            1:
        ],
        *trainer("optimiser", T_PRE, gradient_clip_val=1.0, gradient_clip_algorithm="norm"),
        *schedule(T_PRE, warmup_steps=10000, decay="linear", min_lr=0.0),
        *batch(4096, T_PRE),
        *epochs(300, f"T supp. Table 1 ({table_row}: 300 epochs)"),
        *augmentation(
            f"T supp. B / Table 1 ({table_row}: RandAugment 2 layers, m = {randaug}; mixup {mixup})",
            auto_augment=f"rand-m{randaug}-n2",
            mixup=mixup,
        ),
        *augmentation(
            CHOICE + ": the authors' pipeline (Inception crop + flip, inputs in [-1, 1])",
            dataset=dataset,
            train_crop="random_resized_crop",
            hflip=0.5,
            cutmix=0.0,
            mean=[0.5, 0.5, 0.5],
            std=[0.5, 0.5, 0.5],
            image_size=224,
        ),
        Row("augmentation", "model.label_smoothing", 0.0, CHOICE + ": none stated"),
    ]


for _name in ("b16", "l16"):
    PAPER[f"imagenet_mixer_{_name}_tolstikhin"] = tolstikhin_pretraining(_name, "imagenet", 15, 0.5, "ImNet")
    PAPER[f"imagenet21k_mixer_{_name}_tolstikhin"] = tolstikhin_pretraining(
        _name, "folder", 10 if _name == "b16" else 20, 0.2 if _name == "b16" else 0.5, "ImNet-21k"
    )
    PAPER[f"imagenet_mixer_{_name}_tolstikhin_finetune"] = [
        *model_class("MLPMixer", "T Table 3"),
        *arch(
            "T Table 3 (Mixer-" + _name[0].upper() + "/16, 224)",
            patch_size=16,
            **_T_SIZES[_name],
        ),
        Row(
            "architecture",
            "raw:model.net.init_args.act",
            "gelu",
            CHOICE + ": left at the default, so init_from implies the checkpoint's σ (tanh GELU)",
        ),
        *arch("T Sec. 3.2 (fine-tuned at the pre-training resolution, 224)", upscale=None),
        *arch(VIT + ": no dropout or stochastic depth", drop_rate=0.0, drop_path=0.0),
        *optimiser(T_FT, "torch.optim.SGD", weight_decay=0.0),
        *optimiser(VIT + ": momentum 0.9, base_lr 0.03", "torch.optim.SGD", momentum=0.9, lr=0.03)[1:],
        *trainer("optimiser", T_FT, gradient_clip_val=1.0, gradient_clip_algorithm="norm"),
        *schedule(T_FT, decay="cosine"),
        *schedule(VIT + ": 500 warm-up steps", warmup_steps=500)[1:],
        *batch(512, T_FT),
        *steps(20000, VIT + ": 20,000 steps for imagenet2012"),
        *augmentation("T Sec. 3.2 ('Unless stated otherwise, we fine-tune at resolution 224')", image_size=224),
        *augmentation("T supp. C ((ii) resmall-crop for Table 3 on ImageNet)", eval_crop="resmall_crop"),
        *augmentation("T supp. A.2 (mixup did not help in fine-tuning)", mixup=0.0, cutmix=0.0),
        *augmentation(
            VIT + ": Inception crop + flip, inputs in [-1, 1]",
            dataset="imagenet",
            train_crop="random_resized_crop",
            hflip=0.5,
            auto_augment=None,
            mean=[0.5, 0.5, 0.5],
        ),
    ]

PAPER["imagenet_finetune_448"] = [
    *model_class("MLPMixer", "T Table 2"),
    *arch("T Table 2 (Mixer-L/16 pre-trained on ImageNet-21k, fine-tuned at 448)", patch_size=16, **_T_SIZES["l16"]),
    *arch("T supp. C (448 = 2 × 224: K = 2, block-diagonal token mixing)", upscale=2),
    *arch(VIT + ": no dropout or stochastic depth", drop_rate=0.0, drop_path=0.0),
    *optimiser(T_FT, "torch.optim.SGD", weight_decay=0.0),
    *optimiser(VIT + ": momentum 0.9, base_lr 0.03", "torch.optim.SGD", momentum=0.9, lr=0.03)[1:],
    *trainer("optimiser", T_FT, gradient_clip_val=1.0, gradient_clip_algorithm="norm"),
    *schedule(T_FT, decay="cosine"),
    *schedule(VIT + ": 500 warm-up steps", warmup_steps=500)[1:],
    *batch(512, T_FT),
    *steps(20000, VIT + ": 20,000 steps for imagenet2012"),
    *augmentation("T Table 2 (resolution 448)", image_size=448),
    *augmentation("T supp. C ((i) resize-crop for the Table 2 models)", eval_crop="resize_crop"),
    *augmentation("T supp. A.2 (mixup did not help in fine-tuning)", mixup=0.0, cutmix=0.0),
    *augmentation(
        VIT + ": Inception crop + flip, inputs in [-1, 1]",
        dataset="imagenet",
        train_crop="random_resized_crop",
        hflip=0.5,
        mean=[0.5, 0.5, 0.5],
    ),
]

PAPER["imagenet_mixer_b16_permutation"] = [
    *tolstikhin_pretraining("b16", "imagenet", 15, 0.5, "ImNet (JFT-300M substituted: choice)"),
    *augmentation(
        "T Sec. 3.4 (patch + pixel shuffling; the same permutation for all images)",
        input_permutation="patch_pixel",
        permutation_patch_size=16,
    ),
]


# --- resolving a config as the network is built ------------------------------------------------------

NETWORKS = {cls.__name__: cls for cls in (MLPMixer, SMixer, SWMLP, ShallowMLP)}
_PRINTED: dict[str, dict] = {}


def printed_config(name: str) -> dict:
    """``mixer fit --config configs/<name>.yaml --print_config``, parsed (once per session)."""
    if name not in _PRINTED:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--print_config"])
        assert exit_info.value.code in (0, None)
        _PRINTED[name] = yaml.safe_load(out.getvalue())
    return _PRINTED[name]


def _lookup(tree: dict, key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def architecture(printed: dict, name: str) -> Any:
    """A network argument as the network gets it: the config's, else the network's default."""
    net = printed["model"]["net"]
    if name in (net.get("init_args") or {}):
        return net["init_args"][name]
    parameter = inspect.signature(NETWORKS[net["class_path"].rsplit(".", 1)[-1]]).parameters.get(name)
    return None if parameter is None else parameter.default


def resolve(printed: dict, key: str) -> Any:
    if key.startswith("raw:"):  # the printed value itself, not resolved (left null on purpose)
        return _lookup(printed, key.removeprefix("raw:"))
    if key == "global_batch":
        for callback in printed["trainer"].get("callbacks") or []:
            if callback["class_path"].endswith("GlobalBatchSize"):
                return callback["init_args"]["batch_size"]
        return printed["data"]["init_args"]["batch_size"]
    if key == "S":
        s_mixer = printed["model"]["net"]["class_path"].endswith(".SMixer")  # γ = 1 (eq. 14)
        gamma = 1.0 if s_mixer else architecture(printed, "gamma")
        return resolve_tokens(*(architecture(printed, k) for k in ("tokens", "omega", "channels")), gamma)
    if key in ("m", "p"):
        data_args = printed["data"]["init_args"]
        size, patch = data_args.get("image_size") or 32, architecture(printed, "patch_size")
        gamma = 1.0 if architecture(printed, "block") == "fc" else float(architecture(printed, "gamma") or 2.0)
        m, p = resolve_width_density(
            (size // patch) ** 2, gamma, *(architecture(printed, k) for k in ("channels", "width", "density", "omega"))
        )
        return m if key == "m" else p
    if key.startswith("model.net.init_args."):
        return architecture(printed, key.rsplit(".", 1)[-1])
    return _lookup(printed, key)


def same(expected: Any, got: Any) -> bool:
    if isinstance(expected, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(expected) and all(map(same, expected, got))
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return got == expected and type(got) is type(expected)
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    return got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def config_names() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


def marked(names: Iterable[str]) -> list:
    return [pytest.param(n, id=n, marks=() if n in FAST else pytest.mark.slow) for n in names]


# --- the tests ---------------------------------------------------------------------------------------


def test_every_config_has_rows_for_every_category() -> None:
    names = config_names()
    assert set(PAPER) == set(names), (
        f"configs without rows: {sorted(set(names) - set(PAPER))}; rows without a config: {sorted(set(PAPER) - set(names))}"
    )
    for name in names:
        missing = set(CATEGORIES) - {row.category for row in PAPER[name]}
        assert not missing, f"{name}: no rows for {sorted(missing)}"


def test_every_row_cites_its_source() -> None:
    for name, rows in PAPER.items():
        values: dict[str, Any] = {}
        for row in rows:  # a recipe block may repeat a row (the schedule's class); never with another value
            assert same(values.setdefault(row.key, row.value), row.value), f"{name}: {row.key} has two values"
        for row in rows:
            assert row.category in CATEGORIES and row.source.strip(), (name, row)
            assert row.source.startswith(("H&K", "T ", "T supp.", "choice", "timm", "not from a paper")), (name, row)


def test_the_resolver_reads_family_defaults_and_derived_sizes() -> None:
    """A network argument a config leaves out takes the network's default (the MLP-Mixer's ε 1e-6), and
    derived sizes follow the paper's formulas."""
    plain = {"model": {"net": {"class_path": "mixer_lightning.models.MLPMixer", "init_args": {}}}}
    assert resolve(plain, "model.net.init_args.norm_eps") == 1e-6
    mixer = {
        "model": {
            "net": {
                "class_path": "mixer_lightning.models.MLPMixer",
                "init_args": {"tokens": None, "omega": 524288, "channels": 4, "gamma": 2},
            }
        }
    }
    assert resolve(mixer, "S") == 360  # App. C.2's first pair
    sw = {
        "model": {
            "net": {
                "class_path": "mixer_lightning.models.SWMLP",
                "init_args": {"patch_size": 4, "block": "fc", "omega": 262144, "density": 0.1},
            }
        },
        "data": {"init_args": {}},
    }
    assert resolve(sw, "m") == 1619  # App. C.4 (ii): 1 - p = 0.9
    assert not same(1e-5, 1e-6) and same([0.9, 0.999], (0.9, 0.999)) and not same(True, 1) and same(0.0, 0)


@pytest.mark.parametrize("name", marked(config_names()))
def test_config_follows_the_papers(name: str) -> None:
    printed = printed_config(name)
    wrong = []
    for row in PAPER[name]:
        try:
            got = resolve(printed, row.key)
        except KeyError:
            got = "<missing>"
        if not same(row.value, got):
            wrong.append(f"{row.key}: {got!r}, the paper: {row.value!r} ({row.source})")
    assert not wrong, f"{name} drifts from the papers:\n  " + "\n  ".join(wrong)


def test_the_table_covers_what_the_configs_set() -> None:
    """Every network and model argument a config sets has a row (so a new setting cannot slip in unchecked)."""
    ignored = {"net", "optimizer", "lr_scheduler", "init_from"}
    sizes = ("omega", "tokens", "density", "width", "channels")
    for name in config_names():
        model = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())["model"]
        keys = {row.key for row in PAPER[name]}
        derived = {"S", "m", "p"} & keys
        assert "model.net.class_path" in keys, f"{name}: no row for its network class"
        written = [f"model.net.init_args.{arg}" for arg in model["net"].get("init_args") or {}]
        written += [f"model.{arg}" for arg in model if arg not in ignored]
        for key in written:
            covered = {key, f"raw:{key}"} & keys or (key.rsplit(".", 1)[-1] in sizes and derived)
            assert covered, f"{name}: {key} has no row in PAPER"


def test_every_config_is_in_the_configs_readme() -> None:
    readme = (CONFIGS / "README.md").read_text()
    for name in config_names():
        assert f"`{name}.yaml`" in readme or f"{name}.yaml" in readme, f"configs/README.md does not list {name}.yaml"
