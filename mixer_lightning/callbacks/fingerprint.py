"""What makes a run the run it is (`RunFingerprint`): the data and optimiser settings every checkpoint records under
`RUN_KEY`, which a resumed fit must give again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from mixer_lightning.callbacks.checkpoints import RUN_KEY, SPLIT_ARGUMENTS
from mixer_lightning.errors import ConfigError


def plain(value: Any) -> Any:
    """`value` in the built-in types a checkpoint read with ``weights_only`` holds (jsonargparse's restricted
    types are subclasses of them), tuples as lists; None for anything else."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return next((kind(value) for kind in (bool, int, float, str) if isinstance(value, kind)), None)


def settings(factory: Any, flag: str) -> dict[str, Any]:
    """``{flag: class_path, flag.arg: value}`` of an optimiser or schedule callable (a class, or a partial of one):
    every plain argument it is built with, bound or left at its class's default."""
    import inspect

    from mixer_lightning.tasks.classifier import spec
    from mixer_lightning.tasks.initialise import network_class

    found, cls = (spec(factory), network_class(factory)) if factory is not None else (None, None)
    if found is None or cls is None:
        return {flag: None}
    defaults = {
        name: p.default for name, p in list(inspect.signature(cls).parameters.items())[1:] if p.default is not p.empty
    }
    given = {**defaults, **found["init_args"]}
    return {flag: found["class_path"], **{f"{flag}.{name}": plain(value) for name, value in given.items()}}


def fingerprint(datamodule: Any, pl_module: LightningModule) -> dict[str, Any]:
    """What makes a run the run it is beyond what Lightning restores (`RunFingerprint`): the data (the arguments
    that split it, the size of each split, the digest of a packed dataset's manifest, of an image folder's or
    shard set's training files, its class names and normalisation) and the optimiser and
    schedule (a resumed run restores their state, learning rate and weight decay included, from the checkpoint)."""
    found: dict[str, Any] = {}
    hparams = dict(getattr(datamodule, "hparams", None) or {})
    for name in SPLIT_ARGUMENTS:
        if name in hparams:
            found[f"data.{name}"] = plain(hparams[name])
    sizes = {}
    for split in ("train", "val"):
        try:
            sizes[split] = len(getattr(datamodule, f"{split}_set"))
        except (AttributeError, TypeError):  # no such split, or a stream of unknown length
            sizes[split] = None
    found["data.sizes"] = sizes
    source = getattr(datamodule, "source", None)
    if getattr(source, "content", None) is not None:  # other images under the same names and counts
        found["data.content"] = source.content
    if hasattr(datamodule, "num_classes"):  # what the labels mean, and what the network sees of the pixels
        from mixer_lightning.data.predict import class_names

        found["data.class_names"] = class_names(datamodule)
    for name in ("mean", "std"):
        if getattr(datamodule, name, None) is not None:
            found[f"data.{name}"] = [float(v) for v in getattr(datamodule, name)]
    if getattr(source, "sharded", False) and hparams.get("root"):
        from mixer_lightning.data.manifest import MANIFEST
        from mixer_lightning.safety.atomic import sha256_file

        root = Path(str(hparams["root"]))
        manifest = (root if root.is_dir() else root.parent) / MANIFEST
        found["data.manifest"] = sha256_file(manifest) if manifest.is_file() else None
    found.update(settings(getattr(pl_module, "optimizer_factory", None), "model.optimizer"))
    found.update(settings(getattr(pl_module, "lr_scheduler_factory", None), "model.lr_scheduler"))
    return found


class RunFingerprint(Callback):
    """Writes into every checkpoint, under `RUN_KEY`, the run's data and optimiser settings (`fingerprint`); a fit
    resumed from a checkpoint that wrote other ones is refused, in one line naming the flag, before the resume's
    config is saved. Lightning restores the optimiser's state (its lr and weight decay) and the schedule's from the
    checkpoint whatever the config says, and trains on whatever data the config gives: a resume with a changed
    ``lr`` or ``data.root`` would be another run recorded as this one. `resumed`: the checkpoint's fingerprint."""

    def __init__(self, resumed: Any = None, ckpt_path: str | None = None, seed: int | None = None) -> None:
        self.resumed, self.ckpt_path, self.seed = resumed, ckpt_path, seed
        self.current: dict[str, Any] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # the seed too: the sampler's order of every epoch after the resume derives from it
        self.current = {"seed_everything": self.seed, **fingerprint(trainer.datamodule, pl_module)}
        saved = self.resumed if isinstance(self.resumed, dict) else {}  # older checkpoints recorded none
        for key in (key for key in saved if key in self.current):
            if saved[key] != self.current[key]:
                other_data = ("data.sizes", "data.manifest", "data.content", "data.class_names")  # the same arguments
                field = "data.root" if key in other_data else key
                raise ConfigError(
                    field,
                    f"{self.current[key]!r} differs from {saved[key]!r} of the run being resumed ({self.ckpt_path})",
                    "a resumed run keeps its data and optimiser: give the run's value, or start a new run "
                    "(model.init_from: its weights)",
                )

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.current is not None:
            checkpoint[RUN_KEY] = self.current
