"""`ClassifierModule`: image classification with any network (lightning-hydra-template's ``net``): loss,
metrics (``train/loss``, ``train/acc1``, ``val/loss``, ``val/acc1``, ``val/acc5``, ``test/...``), optimiser
and schedule (called in `configure_optimizers`, after a strategy such as FSDP wrapped the model)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jsonargparse.typing import PositiveInt
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from mixer_lightning.data.sampling import rng_states, set_rng_states
from mixer_lightning.errors import TrainingError, require
from mixer_lightning.models.layers import Fraction, Rate
from mixer_lightning.models.registry import DATA_FACTS, class_path
from mixer_lightning.optim import WarmupDecayLR, layer_decay_groups, param_groups
from mixer_lightning.tasks.initialise import build_network, import_network, network_class

# Module state that is not the network: the training metrics' accumulators (filled in when absent).
NON_NETWORK_PREFIXES = ("train_metrics.", "train_loss.")


def mixer_connections(net) -> float:
    """Ω of a Mixer as built: the mean weights of its token- and of its channel-mixing FC layers, averaged
    (γ(C²S + CS²)/2 for full matrices, eq. 14; fewer for a low-rank W = A·B). The first block's S0 → S token
    mixing is left out where later blocks have S tokens in (its Ω is not the model's: App. A.2.4)."""
    layers = [layer for layer in net.mixing_layers() if layer.tokens_in == layer.tokens] or net.mixing_layers()
    means = []
    for axis in ("token", "channel"):
        counts = [count for layer in layers if layer.axis == axis for count in layer.connections()]
        means.append(sum(counts) / len(counts))
    return sum(means) / 2


def accuracy_metrics(num_classes: int, stage: str, top5: bool) -> MetricCollection:
    top_k = {"acc1": 1, **({"acc5": min(5, num_classes)} if top5 else {})}
    metrics = {name: MulticlassAccuracy(num_classes, top_k=k, average="micro") for name, k in top_k.items()}
    return MetricCollection(metrics, prefix=f"{stage}/")


def spec(factory: Any) -> dict[str, Any] | None:
    """``{class_path, init_args}`` of a class or a `functools.partial` of one (plain data for checkpoints)."""
    cls = network_class(factory)
    if cls is None:
        return None
    keywords = factory.keywords if isinstance(factory, functools.partial) else {}
    return {"class_path": class_path(cls), "init_args": dict(keywords)}


def recorded(value: Any, key: str) -> Any:
    """The callable a checkpoint's ``{class_path, init_args}`` of `key` records (what Lightning's
    `load_from_checkpoint` passes), its class imported from a trusted package only; anything else as it is."""
    if not isinstance(value, dict):
        return value
    cls = import_network(value["class_path"], f"model.{key}", "the checkpoint", nn.Module if key == "net" else object)
    return functools.partial(cls, **(value.get("init_args") or {}))


def optimizer_argument(factory: Any, name: str) -> Any:
    """The value the optimiser callable uses for `name` (``lr``, ``weight_decay``): bound, else its class's default."""
    parameter = inspect.signature(network_class(factory) or factory).parameters.get(name)
    default = None if parameter is None or parameter.default is parameter.empty else parameter.default
    return (getattr(factory, "keywords", None) or {}).get(name, default)


class ClassifierModule(LightningModule):
    """Image classification with the network `net`.

    Args:
        net: called as ``net(num_classes, image_size, in_chans)`` (a config's ``net: {class_path, init_args}``),
            or in Python a built ``nn.Module`` (``net``, ``optimizer``, ``lr_scheduler``: also the
            ``{class_path, init_args}`` a checkpoint records, `recorded`).
        num_classes, image_size, in_chans: the data's (linked by the CLI; in Python, else taken at `setup`).
        optimizer: called with the parameter groups (no weight decay on biases and norms); None: AdamW.
        lr_scheduler: called with the optimiser; `WarmupDecayLR` is told the training length.
        label_smoothing: of the training cross-entropy.
        layer_decay: layer-wise lr decay for fine-tuning (timm's ``--layer-decay``, the net's ``group_matcher``).
        init_from: a checkpoint, timm weights or an official JAX ``.npz`` (a head of another size starts at
            zero); the network arguments left at their defaults take the file's (`tasks.initialise`).
        upscale: K: fine-tune at K× the image side of ``init_from``'s network (Mixer supplementary C).
        compile: torch.compile the network (`configure_model`).
    """

    def __init__(
        self,
        net: Callable[[int, int, int], nn.Module],
        num_classes: PositiveInt | None = None,
        image_size: PositiveInt | None = None,
        in_chans: PositiveInt | None = None,
        optimizer: OptimizerCallable | None = None,
        lr_scheduler: LRSchedulerCallable | None = WarmupDecayLR,
        scheduler_interval: Literal["step", "epoch"] = "step",
        label_smoothing: Rate = 0.0,
        layer_decay: Fraction | None = None,
        init_from: str | None = None,
        upscale: PositiveInt | None = None,
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["net"] if isinstance(net, nn.Module) else None)
        for key in ("net", "optimizer", "lr_scheduler"):  # in plain Python: callables, recorded as class paths
            value = self.hparams.get(key)
            if value is not None and not isinstance(value, dict):
                self.hparams[key] = spec(value)
                if self.hparams[key] is None:
                    del self.hparams[key]
        net, optimizer, lr_scheduler = (
            recorded(net, "net"),
            recorded(optimizer, "optimizer"),
            recorded(lr_scheduler, "lr_scheduler"),
        )
        self.factory, self.num_classes, self.image_size, self.in_chans = net, num_classes, image_size, in_chans
        self.optimizer_factory = optimizer or torch.optim.AdamW  # jsonargparse#460: the default chosen here
        self.lr_scheduler_factory, self.scheduler_interval = lr_scheduler, scheduler_interval
        self.label_smoothing, self.layer_decay, self.compile_network = label_smoothing, layer_decay, compile
        self.init_from, self.upscale = init_from, upscale
        self._lr: float | None = None  # a learning rate set through `lr` (Lightning's LR finder)
        self.train_loss = MeanMetric()
        self.train_loss.persistent(True)
        # Evaluation losses as metrics: summed over every process at the epoch's end, weighted by batch size.
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self._rng_states_to_restore: dict | None = None
        self._pending_losses: list[tuple[torch.Tensor, int, int]] = []  # (loss, step, epoch) not yet checked
        self._last_loss: tuple[torch.Tensor, int] | None = None  # (loss, batch size) of the step running
        if None not in (num_classes, image_size, in_chans):
            self._build()

    def record(self, values: dict[str, Any]) -> None:
        """Add `values` to the hyper-parameters (checkpoints) and to those the loggers write (hparams.yaml)."""
        self.hparams.update(values)
        self.save_hyperparameters(self.hparams)  # the public way to refresh `hparams_initial`

    def _build(self) -> None:
        """Build the network for the data's facts, initialised from ``init_from`` (`tasks.initialise`)."""
        facts = (self.num_classes, self.image_size, self.in_chans)
        self.net, implied, self.upscale = build_network(self.factory, facts, self.init_from, self.upscale)
        net = self.hparams.get("net")
        if isinstance(net, dict):  # S solved from Ω, and the file's arguments: what was trained is on record
            init_args = {**(net.get("init_args") or {}), **implied}
            if init_args.get("omega") is not None and "tokens" in inspect.signature(type(self.net)).parameters:
                init_args["tokens"] = int(self.net.tokens)
            self.record({"net": {**net, "init_args": init_args}, "upscale": self.upscale})
        # The training metrics accumulate over an epoch, so their states go into checkpoints (persistent):
        # a run resumed mid-epoch reports the same epoch figures as an uninterrupted one.
        self.train_metrics = accuracy_metrics(self.num_classes, "train", top5=False)
        self.train_metrics.persistent(True)
        self.val_metrics = accuracy_metrics(self.num_classes, "val", top5=True)
        self.test_metrics = accuracy_metrics(self.num_classes, "test", top5=True)

    def setup(self, stage: str) -> None:
        """Build a network whose data facts were not given, from the trainer's data module (Lightning calls
        this before it moves the module to its device or restores a checkpoint)."""
        if hasattr(self, "net"):
            return
        datamodule = self.trainer.datamodule
        taken = {fact: getattr(self, fact) or getattr(datamodule, fact, None) for fact in DATA_FACTS}
        absent = ", ".join(fact for fact, value in taken.items() if value is None)
        problem = f"{absent} not given and the data module ({type(datamodule).__name__}) has none"
        require(not absent, "model", problem, "give them, or fit with a data module that has them (ImageDataModule)")
        self.num_classes, self.image_size, self.in_chans = (taken[fact] for fact in DATA_FACTS)
        self.record(taken)  # checkpoints rebuild the same network
        self._build()

    def architecture(self) -> dict[str, float]:
        """The widths the paper compares models by (Hayase & Karakida Sec. 4.1, as ``mixer width``): a Mixer's
        S, C, m = S·C, p = Ω/(γm²) and Ω, the weights its mixing layers hold (`mixer_connections`); an SW-MLP's
        m, Ω = γpm², p; none for another family."""
        from mixer_lightning.models.pk import PKMixer
        from mixer_lightning.models.sw_mlp import SWMLP
        from mixer_lightning.width import density

        net = getattr(self, "net", None)
        if isinstance(net, PKMixer):
            tokens, channels = net.tokens, net.channels
            p = density(tokens, channels, net.gamma)
            return {"S": tokens, "C": channels, "m": tokens * channels, "Ω": mixer_connections(net), "p": p}
        if isinstance(net, SWMLP):
            return {"m": net.width, "Ω": net.omega, "p": net.density}
        return {}

    def configure_model(self) -> None:
        """``compile: true``: torch.compile the network in place (parameter names and checkpoints unchanged)."""
        if self.compile_network and not getattr(self.net, "_compiled_call_impl", None):
            self.net.compile()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        # y: class indices (B,), or soft targets (B, K) from mixup/cutmix; cross_entropy smooths either.
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self._pending_losses.append((loss.detach(), self.global_step, self.current_epoch))  # see `check_finite`
        self._last_loss = (loss.detach(), len(x))  # logged in `on_train_batch_end`
        self.train_loss.update(loss.detach(), weight=len(x))
        self.train_metrics.update(logits, y.argmax(dim=1) if y.ndim == 2 else y)  # a mixed target's dominant class
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """``train/loss`` is logged (after `check_finite`) only at the steps the loggers write: the same figures,
        without `self.log` and a host sync at every step."""
        trainer, every = self.trainer, self.trainer.log_every_n_steps
        logs = (
            bool(trainer.fast_dev_run)
            or batch_idx + 1 >= trainer.num_training_batches
            or (every > 0 and trainer.global_step % every == 0)
        )
        if logs or len(self._pending_losses) >= (every or 50):
            self.check_finite()
        if logs and self._last_loss is not None:
            loss, batch_size = self._last_loss
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=batch_size)
        self._last_loss = None

    def on_train_epoch_end(self) -> None:
        self.check_finite()  # no figure of a diverged epoch is logged
        if self.train_loss.update_called:  # (a resumed epoch goes on from the accumulators' saved states)
            self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True)
            self.log_dict(self.train_metrics, on_step=False, on_epoch=True)

    def on_validation_start(self) -> None:
        self.check_finite()  # never validate (and keep as best.ckpt) diverged weights

    def on_train_end(self) -> None:
        self.check_finite()

    def check_finite(self) -> None:
        """Stop a diverged run before a checkpoint or a figure of it is written: the losses since the last check,
        in one host sync (every ``log_every_n_steps`` steps, before checkpoints, validation, epoch ends); under
        DDP every process learns that one diverged."""
        pending, self._pending_losses = self._pending_losses, []
        if not pending:  # (losses are only pending inside a trainer's fit)
            return
        losses = torch.stack([loss.float() for loss, _, _ in pending])
        bad = ~torch.isfinite(losses)
        if not self.trainer.strategy.reduce_boolean_decision(bool(bad.any()), all=False):
            return
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            what = f"the loss is {losses[first].item()} at step {pending[first][1]} (epoch {pending[first][2]})"
        else:
            what = f"the loss is not finite on another process, by step {self.global_step}"
        callbacks = self.trainer.checkpoint_callbacks
        saved = sorted({p for cb in callbacks for p in (cb.last_model_path, cb.best_model_path) if p})
        where = f"the last good checkpoints: {', '.join(saved)}" if saved else "no checkpoint was saved yet"
        raise TrainingError(
            f"training diverged: {what}; {where}; lower the learning rate, add warm-up or set trainer.gradient_clip_val"
        )

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str, metrics: MetricCollection) -> None:
        x, y = batch
        logits = self(x)
        loss = self.val_loss if stage == "val" else self.test_loss
        loss.update(F.cross_entropy(logits, y), weight=len(x))
        self.log(f"{stage}/loss", loss, prog_bar=True, on_step=False, on_epoch=True)
        metrics(logits, y)
        self.log_dict(metrics, prog_bar=True, batch_size=len(x))

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        """Class probabilities (B, num_classes)."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).float().softmax(dim=-1)

    def on_train_start(self) -> None:
        """Tell `WarmupDecayLR` the training length (here, not in configure_optimizers: asking for it there
        loads the data before a checkpoint is restored, and the data order could not resume mid-epoch)."""
        for config in self.trainer.lr_scheduler_configs:
            if not isinstance(config.scheduler, WarmupDecayLR):
                continue
            total = self.trainer.estimated_stepping_batches
            fix = "set trainer.max_epochs or trainer.max_steps"
            require(math.isfinite(total), "trainer.max_epochs", "a decaying schedule needs a finite length", fix)
            batches = self.trainer.num_training_batches
            per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
            config.scheduler.set_training_length(int(total), max(1, int(per_epoch)))
        if self._lr is not None:  # the LR finder gave every group its lr: back to each group's own scale
            schedules = {id(c.scheduler.optimizer): c.scheduler for c in self.trainer.lr_scheduler_configs}
            for optimizer in self.trainer.optimizers:
                scheduler = schedules.get(id(optimizer))
                for group in optimizer.param_groups:
                    peak = self._lr * group.get("lr_scale", 1.0)
                    if isinstance(scheduler, WarmupDecayLR):
                        group["lr"] = scheduler.lr_at(scheduler.last_epoch, peak)
                    elif scheduler is None:
                        group["lr"] = peak

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._rng_states_to_restore is not None:  # the first step after resuming: the RNG streams
            set_rng_states(self._rng_states_to_restore)  # (dropout, stochastic depth) go on as they would have
            self._rng_states_to_restore = None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_states_to_restore = checkpoint.get("rng_states")
        state = checkpoint.get("state_dict")  # files without the metric states (`mixer convert`) load strictly
        if isinstance(state, dict):
            for key, value in self.state_dict().items():
                if key.startswith(NON_NETWORK_PREFIXES):
                    state.setdefault(key, value)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Never a diverged run's weights (`check_finite`). Checkpoints hold the trained weights, so their
        hyper-parameters drop ``init_from`` (keeping what it implied): they load after the file is gone."""
        self.check_finite()
        checkpoint["rng_states"] = rng_states()
        hparams = checkpoint.get("hyper_parameters")
        if isinstance(hparams, dict) and hparams.get("init_from"):
            hparams["init_from"] = None

    @property
    def lr(self) -> float | None:
        """The peak learning rate (the head's, with ``layer_decay``), which Lightning's LR finder reads and sets."""
        return self._lr if self._lr is not None else optimizer_argument(self.optimizer_factory, "lr")

    @lr.setter
    def lr(self, value: float) -> None:
        """Used from the next `configure_optimizers`, and made the schedules' peaks (``base_lrs``, ``initial_lr``)."""
        self._lr = float(value)
        try:
            configs = self.trainer.lr_scheduler_configs
        except RuntimeError:  # not attached to a trainer (yet)
            return
        for config in configs:
            if hasattr(config.scheduler, "base_lrs"):
                groups = config.scheduler.optimizer.param_groups
                config.scheduler.base_lrs = [self._lr * group.get("lr_scale", 1.0) for group in groups]
                for group, peak in zip(groups, config.scheduler.base_lrs, strict=True):
                    group["initial_lr"] = peak
        rank_zero_info(f"model: learning rate {self._lr:.4g} (set through model.lr, as Lightning's LR finder does)")

    def configure_optimizers(self):
        if self.layer_decay is None:
            groups = param_groups(self)
        else:
            weight_decay = optimizer_argument(self.optimizer_factory, "weight_decay")
            groups = layer_decay_groups(self.net, self.layer_decay, weight_decay or 0.0)
        optimizer = self.optimizer_factory(groups)
        for group in optimizer.param_groups:
            # timm's groups carry `lr_scale`, applied here, before the schedule records each group's peak.
            group["lr"] = (self._lr if self._lr is not None else group["lr"]) * group.get("lr_scale", 1.0)
        if self.lr_scheduler_factory is None:
            return optimizer
        scheduler = self.lr_scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval}}
