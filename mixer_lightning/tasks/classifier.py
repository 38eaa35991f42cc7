"""`ClassifierModule`: image classification with any network (lightning-hydra-template's ``net``): loss,
metrics, optimiser and schedule are written once here, the network is given.

Metrics are torchmetrics objects per stage: ``train/loss``, ``train/acc1``, ``val/loss``, ``val/acc1``,
``val/acc5``, ``test/loss``, ``test/acc1``, ``test/acc5``. The optimiser and the schedule are called in
`configure_optimizers`, after a strategy such as FSDP has wrapped the model.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jsonargparse.typing import PositiveInt, restricted_number_type
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from mixer_lightning.data.sampling import rng_states, set_rng_states
from mixer_lightning.errors import ConfigError, TrainingError, field_prefix
from mixer_lightning.models.registry import DATA_FACTS, class_path
from mixer_lightning.optim import WarmupDecayLR, layer_decay_groups, param_groups
from mixer_lightning.tasks.initialise import build_initialised, implied_arguments, network_class
from mixer_lightning.weights import read_weights

# Module state that is not the network: the training metrics' accumulators (filled in when absent).
NON_NETWORK_PREFIXES = ("train_metrics.", "train_loss.")
Smoothing = restricted_number_type(None, float, [(">=", 0.0), ("<", 1.0)])  # [0, 1)
LayerDecay = restricted_number_type(None, float, [(">", 0.0), ("<=", 1.0)])  # (0, 1]


def accuracy_metrics(num_classes: int, stage: str, top5: bool) -> MetricCollection:
    metrics = {"acc1": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if top5:
        metrics["acc5"] = MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro")
    return MetricCollection(metrics, prefix=f"{stage}/")


def spec(factory: Any) -> dict[str, Any] | None:
    """``{class_path, init_args}`` of a class or a `functools.partial` of one (plain data for checkpoints)."""
    cls = network_class(factory)
    if cls is None:
        return None
    keywords = factory.keywords if isinstance(factory, functools.partial) else {}
    return {"class_path": class_path(cls), "init_args": dict(keywords)}


def optimizer_argument(factory: Any, name: str) -> Any:
    """The value the optimiser callable will use for `name` (``lr``, ``weight_decay``): the one it binds,
    else the optimiser class's default; None when it has no such argument."""
    keywords = getattr(factory, "keywords", None) or {}
    if name in keywords:
        return keywords[name]
    parameter = inspect.signature(network_class(factory) or factory).parameters.get(name)
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


class ClassifierModule(LightningModule):
    """Image classification with the network `net`.

    Args:
        net: the network: a factory called as ``net(num_classes, image_size, in_chans)`` (from a config,
            ``net: {class_path: mixer_lightning.models.SMixer, init_args: {...}}``), or, in Python, a built
            ``nn.Module``.
        num_classes: classes (linked from the data module by the CLI; in Python taken at `setup` from the
            trainer's data module when None, where the network is then built).
        image_size: image side in pixels (as num_classes).
        in_chans: image channels (as num_classes).
        optimizer: called with the parameter groups (no weight decay on biases and norms); None: AdamW.
        lr_scheduler: called with the optimiser; `WarmupDecayLR` is told the training length.
        scheduler_interval: step the schedule every optimiser ``step`` or every ``epoch``.
        label_smoothing: of the training cross-entropy.
        layer_decay: layer-wise lr decay for fine-tuning (BEiT; timm's ``--layer-decay``): the head at the
            optimiser's lr, each layer below at ``layer_decay`` times the one above (the network's
            ``group_matcher``); ``WarmupDecayLR``'s ``warmup_start_lr`` and ``min_lr`` stay absolute.
        init_from: initial weights: a checkpoint of this project, timm weights (``.pth``, ``.safetensors``,
            ``timm:``/``hf-hub:`` names) or an official JAX ``.npz``; a head of another size starts at zero.
            The network arguments the config leaves at their defaults take the file's values (but dropout
            and stochastic depth); checkpoints record them and drop ``init_from``.
        upscale: K: fine-tune at K× the image side of ``init_from``'s network (Mixer supplementary C).
        compile: compile the network with torch.compile (`configure_model`).
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
        label_smoothing: Smoothing = 0.0,
        layer_decay: LayerDecay | None = None,
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
        self.factory = net
        self.num_classes, self.image_size, self.in_chans = num_classes, image_size, in_chans
        self.optimizer_factory = optimizer or torch.optim.AdamW  # jsonargparse#460: the default chosen here
        self.lr_scheduler_factory = lr_scheduler
        self.scheduler_interval = scheduler_interval
        self.label_smoothing = label_smoothing
        self.layer_decay = layer_decay
        self.init_from = init_from
        self.upscale = upscale
        self.compile_network = compile
        self._lr: float | None = None  # a learning rate set through `lr` (Lightning's LR finder)
        self.train_loss = MeanMetric()
        self.train_loss.persistent(True)
        # Evaluation losses as metrics: summed over every process at the epoch's end, weighted by batch size.
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
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
        with field_prefix("model"):
            weights = read_weights(self.init_from, "init_from") if self.init_from else None
            implied, upscale = implied_arguments(self.factory, weights, repr(self.init_from)) if weights else ({}, None)
            if implied:
                rank_zero_info(
                    f"model.net: {', '.join(f'{k}={v!r}' for k, v in implied.items())} from {self.init_from}"
                )
            upscale = self.upscale or upscale
            self.upscale = None if upscale is None else int(upscale)  # a plain int for the checkpoints
            if self.upscale not in (None, 1) and weights is None:
                rank_zero_warn(
                    f"model.upscale: {self.upscale} without model.init_from: the upscaled network starts from a "
                    "random initialisation (as it should when a checkpoint (--ckpt_path) supplies its weights)"
                )
            facts = (self.num_classes, self.image_size, self.in_chans)
            self.net, messages = build_initialised(self.factory, facts, weights, self.upscale, implied)
            for message in messages:
                rank_zero_info(f"model.{message}")
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
        """Build a network whose data facts were not given from the trainer's data module (Lightning
        calls this before it moves the module to its device or restores a checkpoint)."""
        if "net" in self._modules:
            return
        datamodule = self.trainer.datamodule
        taken = {fact: getattr(self, fact) or getattr(datamodule, fact, None) for fact in DATA_FACTS}
        absent = [fact for fact, value in taken.items() if value is None]
        if absent:
            raise ConfigError(
                "model",
                f"{', '.join(absent)} not given and the data module ({type(datamodule).__name__}) has none",
                "give them to ClassifierModule, or fit with a data module that has them (ImageDataModule)",
            )
        self.num_classes, self.image_size, self.in_chans = (taken[fact] for fact in DATA_FACTS)
        self.record(taken)  # checkpoints rebuild the same network
        self._build()

    def architecture(self) -> dict[str, float]:
        """The widths the paper compares models by (Hayase & Karakida Sec. 4.1, as ``mixer width``): a Mixer's
        S, C, m = S·C, Ω = γ(C²S + CS²)/2 (eq. 14), p = Ω/(γm²); an SW-MLP's m, Ω = γpm², p; else none."""
        from mixer_lightning.width import density, omega

        net = self._modules.get("net")
        if isinstance(getattr(net, "tokens", None), int) and isinstance(getattr(net, "channels", None), int):
            tokens, channels, gamma = int(net.tokens), int(net.channels), getattr(net, "gamma", 1.0)
            m, o, p = tokens * channels, omega(tokens, channels, gamma), density(tokens, channels, gamma)
            return {"S": tokens, "C": channels, "m": m, "Ω": o, "p": p}
        if all(isinstance(getattr(net, name, None), (int, float)) for name in ("width", "omega", "density")):
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
        """``train/loss`` is logged at the steps the loggers write (every ``log_every_n_steps`` optimiser
        steps, an epoch's last batch, fast_dev_run): the same figures as logging every step, without
        paying `self.log` and a host sync at every step. A loss is checked (`check_finite`) before."""
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
        """Stop a diverged run before a checkpoint or a figure of it is written: the losses since the last
        check, on the host together (one sync), every ``log_every_n_steps`` steps, before every checkpoint,
        validation and epoch end. Under DDP every process learns that one diverged."""
        pending, self._pending_losses = self._pending_losses, []
        if not pending or self._trainer is None:
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
            if not math.isfinite(total):
                raise ConfigError(
                    "trainer.max_epochs",
                    "a decaying learning-rate schedule needs a finite training length",
                    "set trainer.max_epochs or trainer.max_steps",
                )
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
        """Used from the next `configure_optimizers`; with an optimiser already made (the finder as a
        callback), also the schedules' peaks (``base_lrs``, ``initial_lr``), which `WarmupDecayLR` steps from."""
        self._lr = float(value)
        if self._trainer is None:
            return
        for config in self.trainer.lr_scheduler_configs:
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
