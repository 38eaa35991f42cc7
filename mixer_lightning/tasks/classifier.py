"""`ClassifierModule`: the training logic every architecture family shares, written once.

A family module (e.g. `MLPMixerModule`) only builds its network (``self.net``, a plain ``nn.Module``
from `mixer_lightning.models`); loss, metrics, optimiser and schedule live here.

Metrics are torchmetrics objects per stage, logged under ``/``-namespaced names: ``train/loss``,
``train/acc1``, ``val/loss``, ``val/acc1``, ``val/acc5``, ``test/loss``, ``test/acc1``, ``test/acc5``.
The optimiser and the schedule are callables (init arguments), called in `configure_optimizers`,
i.e. after a strategy such as FSDP has wrapped the model.
"""

from __future__ import annotations

import copy
import inspect
import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from mixer_lightning.data.sampling import rng_states, set_rng_states
from mixer_lightning.errors import ConfigError, TrainingError, field_prefix, require
from mixer_lightning.models import get_entry
from mixer_lightning.optim import WarmupDecayLR, layer_decay_groups, param_groups
from mixer_lightning.tasks.initialise import build_initialised, implied_arguments
from mixer_lightning.tasks.loading import check_family
from mixer_lightning.weights import read_weights


def accuracy_metrics(num_classes: int, stage: str, top5: bool) -> MetricCollection:
    metrics = {"acc1": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if top5:
        metrics["acc5"] = MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro")
    return MetricCollection(metrics, prefix=f"{stage}/")


DATA_FACTS = ("num_classes", "image_size", "in_chans")  # what the network needs to know of the data


def optimizer_argument(factory: Any, name: str) -> Any:
    """The value the optimiser callable will use for `name` (``lr``, ``weight_decay``): the one bound by
    the config (jsonargparse and `functools.partial` keep it in ``keywords``), else the optimiser
    class's default; None when it has no such argument."""
    keywords = getattr(factory, "keywords", None) or {}
    if name in keywords:
        return keywords[name]
    try:
        parameter = inspect.signature(getattr(factory, "func", factory)).parameters.get(name)
    except (TypeError, ValueError):
        return None
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


class ClassifierModule(LightningModule):
    """Image classification with any backbone of the project.

    Args:
        num_classes: classes of the dataset (linked from the data module by the CLI; left None in
            Python, taken from the trainer's data module at `setup`, where the network is then built).
        image_size: image side in pixels (linked from the data module, or taken at `setup`).
        in_chans: image channels (linked from the data module, or taken at `setup`).
        optimizer: the optimiser, called with the parameter groups (no weight decay on biases and
            normalisation parameters).
        lr_scheduler: the learning-rate schedule, called with the optimiser; `WarmupDecayLR` is told
            the training length. None: constant learning rate.
        scheduler_interval: step the schedule every optimiser ``step`` or every ``epoch``.
        label_smoothing: label smoothing of the training cross-entropy.
        layer_decay: layer-wise learning-rate decay for fine-tuning (BEiT; timm's ``--layer-decay``):
            the head trains at the optimiser's lr, each layer below at ``layer_decay`` times the one
            above (the network's ``group_matcher`` names the layers: stem, blocks, final norm with the
            last block). The scales apply to the peak lr; `WarmupDecayLR`'s ``warmup_start_lr`` and
            ``min_lr`` stay absolute. None: one lr for every parameter.
        init_from: initial weights of the network: a checkpoint of this project (``mixer fit`` or
            ``mixer convert``), timm weights (``.pth``/``.safetensors``) or an official JAX ``.npz``;
            a head of another size is re-initialised to zero (see `build_network`).
        upscale: K: fine-tune at K× the image side of ``init_from``'s network (Mixer supplementary
            C): token-mixing weights become K² block-diagonal copies, tokens ordered region by region.
        compile: compile the network with torch.compile (`configure_model`); see README, Performance.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        image_size: int | None = None,
        in_chans: int | None = None,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = WarmupDecayLR,
        scheduler_interval: Literal["step", "epoch"] = "step",
        label_smoothing: float = 0.0,
        layer_decay: float | None = None,
        init_from: str | None = None,
        upscale: int | None = None,
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        with field_prefix("model"):
            require(num_classes is None or num_classes > 1, "num_classes", f"must be at least 2, got {num_classes}")
            require(0.0 <= label_smoothing < 1.0, "label_smoothing", f"must be in [0, 1), got {label_smoothing}")
            require(
                layer_decay is None or 0.0 < layer_decay <= 1.0,
                "layer_decay",
                f"must be in (0, 1], got {layer_decay}",
                "fine-tuning recipes use 0.65 to 0.85 (timm's --layer-decay)",
            )
        self.num_classes = num_classes
        self.image_size = image_size
        self.in_chans = in_chans
        self.optimizer_factory = optimizer
        self.lr_scheduler_factory = lr_scheduler
        self.scheduler_interval = scheduler_interval
        self.label_smoothing = label_smoothing
        self.layer_decay = layer_decay
        self.init_from = init_from
        self.upscale = upscale
        self.compile_network = compile
        self._lr: float | None = None  # a learning rate set through `lr` (Lightning's LR finder)
        self._recipe: tuple[str, str | None, dict[str, Any]] | None = None  # see `set_network`
        self.train_loss = MeanMetric()
        self.train_loss.persistent(True)
        # The evaluation losses as metric objects: torchmetrics sums them over every process at the
        # epoch's end, weighted by batch size, where a plain logged tensor would be rank 0's mean only.
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self._rng_states_to_restore: dict | None = None
        self._pending_losses: list[tuple[torch.Tensor, int, int]] = []  # (loss, step, epoch) not yet checked
        self._last_loss: tuple[torch.Tensor, int] | None = None  # (loss, batch size) of the step running

    net: nn.Module  # set by the family module, with `set_network`

    def set_network(self, family: str, preset: str | None, **architecture: Any) -> None:
        """Build the network (`build_network`) now if the data facts (num_classes, image_size,
        in_chans) are known, else at `setup`, from the trainer's data module (plain Python:
        ``Trainer().fit(MLPMixerModule(patch_size=4), datamodule)``)."""
        self._recipe = (family, preset, architecture)
        if all(getattr(self, fact) is not None for fact in DATA_FACTS):
            self._build()

    def _build(self) -> None:
        assert self._recipe is not None
        family, preset, architecture = self._recipe
        self.net = self.build_network(family, preset, **architecture)
        self.record_hparams(self.resolved_arguments())
        # The training metrics accumulate over an epoch, so their states go into checkpoints (persistent):
        # a run resumed mid-epoch reports the same epoch figures as an uninterrupted one.
        self.train_metrics = accuracy_metrics(self.num_classes, "train", top5=False)
        self.train_metrics.persistent(True)
        self.val_metrics = accuracy_metrics(self.num_classes, "val", top5=True)
        self.test_metrics = accuracy_metrics(self.num_classes, "test", top5=True)

    def setup(self, stage: str) -> None:
        """Build a network whose data facts were not given, from the data module's (Lightning calls
        this before it moves the module to its device, configures the optimiser or restores a checkpoint)."""
        if self._recipe is None or "net" in self._modules:
            return
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        missing = [fact for fact in DATA_FACTS if getattr(self, fact) is None]
        taken = {fact: getattr(datamodule, fact, None) for fact in missing}
        absent = [fact for fact, value in taken.items() if value is None]
        if absent:
            where = f"the data module ({type(datamodule).__name__}) has none" if datamodule else "no data module"
            raise ConfigError(
                "model",
                f"{', '.join(absent)} not given and {where}",
                f"give them: {type(self).__name__}({', '.join(f'{fact}=...' for fact in absent)}), or fit with a "
                "data module that has them (mixer_lightning.data.ImageDataModule)",
            )
        with field_prefix("model"):
            require(
                taken.get("num_classes", 2) > 1, "num_classes", f"must be at least 2, got {taken.get('num_classes')}"
            )
        for fact, value in taken.items():
            setattr(self, fact, value)
        self.record_hparams(taken)  # checkpoints rebuild the same network
        self._build()

    def record_hparams(self, values: dict[str, Any]) -> None:
        """Add `values` to the hyper-parameters the checkpoints hold (``hparams``) and to those the loggers
        write (hparams.yaml): Lightning logs ``hparams_initial``, its copy taken by `save_hyperparameters`."""
        self.hparams.update(values)
        self._hparams_initial = copy.deepcopy(self._hparams)

    def resolved_arguments(self) -> dict[str, Any]:
        """Architecture arguments the network solved from others, written back into the hyper-parameters
        (hparams.yaml, checkpoints) so that what was trained is on record: S of a Mixer given by Ω.
        A checkpoint then holds both ``omega`` and ``tokens``, which agree (`width.resolve_tokens`)."""
        tokens = getattr(self.net, "tokens", None)
        if self.hparams.get("omega") is not None and "tokens" in self.hparams and isinstance(tokens, int):
            return {"tokens": tokens}
        return {}

    def architecture(self) -> dict[str, float]:
        """The widths the paper compares models by (Hayase & Karakida Sec. 4.1, as ``mixer width`` gives
        them), from the built network: a Mixer's S and C, its width m = S·C, Ω = γ(C²S + CS²)/2 (eq. 14)
        and p = Ω/(γm²); an SW-MLP's m, Ω = γpm² and p. Empty for other networks (shallow MLPs)."""
        from mixer_lightning.width import density, omega

        net = self._modules.get("net")
        if net is None:
            return {}
        if isinstance(getattr(net, "tokens", None), int) and isinstance(getattr(net, "channels", None), int):
            tokens, channels, gamma = net.tokens, net.channels, getattr(net, "gamma", 1.0)
            return {
                "S": tokens,
                "C": channels,
                "m": tokens * channels,
                "Ω": omega(tokens, channels, gamma),
                "p": density(tokens, channels, gamma),
            }
        if all(isinstance(getattr(net, name, None), (int, float)) for name in ("width", "omega", "density")):
            return {"m": net.width, "Ω": net.omega, "p": net.density}
        return {}

    def build_network(self, family: str, preset: str | None, **architecture: Any) -> nn.Module:
        """The network of `family`: the registered `preset` (or the family's generic constructor) with
        the dataset's num_classes, image_size and in_chans and every architecture argument not None.

        With ``init_from``, its weights come from that file (`mixer_lightning.weights`), and the
        architecture arguments left None (preset included) take the values the file implies (a
        checkpoint's hyper-parameters of the same module class; ``act: gelu_tanh`` for a JAX file),
        recorded in ``hparams``. With ``upscale`` K, the network is built at image_size / K, loaded and
        upscaled (`mixer_lightning.models.upscale.upscale_tokens`)."""
        with field_prefix("model"):
            weights = read_weights(self.init_from, "init_from") if self.init_from else None
            if weights is not None:
                fix = f"start from a checkpoint of this family, or set model.class_path to {weights.class_path}"
                check_family(weights.class_path, self, "init_from", repr(self.init_from), fix)
                given = {"preset": preset, "upscale": self.upscale, **architecture}
                implied = implied_arguments(weights, type(self).__name__, given)
                if implied:
                    rank_zero_info(
                        f"model: {', '.join(f'{k}={v!r}' for k, v in implied.items())} from {self.init_from}"
                    )
                    self.hparams.update(implied)
                    preset = implied.pop("preset", preset)
                    self.upscale = implied.pop("upscale", self.upscale)
                    architecture.update(implied)
            entry = get_entry(preset or family, field="preset")
            require(
                entry.family == family,
                "preset",
                f"{entry.name!r} is a {entry.family} model, not {family}",
                "choose one of this family's presets (see `mixer models`)",
            )
            given = {name: value for name, value in architecture.items() if value is not None}
            if self.upscale not in (None, 1) and weights is None:
                rank_zero_warn(
                    f"model.upscale: {self.upscale} without model.init_from: the upscaled network starts from a random "
                    "initialisation (as it should when a checkpoint (--ckpt_path) supplies its weights)"
                )
            net, messages = build_initialised(
                lambda size: entry.build(
                    num_classes=self.num_classes, image_size=size, in_chans=self.in_chans, **given
                ),
                self.image_size,
                weights,
                self.upscale,
            )
            for message in messages:
                rank_zero_info(f"model.{message}")
            return net

    def configure_model(self) -> None:
        """``compile: true``: compile the network's forward with torch.compile. In place
        (`nn.Module.compile`), so parameter names, checkpoints and FSDP wrapping are unchanged."""
        if self.compile_network and not getattr(self.net, "_compiled_call_impl", None):
            self.net.compile()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        # y is class indices (B,), or soft targets (B, K) from mixup/cutmix: cross_entropy takes both and
        # smooths either (= timm's Mixup(label_smoothing) + SoftTargetCrossEntropy, tests/test_data_mixup.py).
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self._pending_losses.append((loss.detach(), self.global_step, self.current_epoch))  # see `check_finite`
        self._last_loss = (loss.detach(), len(x))  # logged in `on_train_batch_end`
        # The epoch figures' accumulators; logged once, at the epoch's end (`on_train_epoch_end`). `update`,
        # not the metrics' forward, which also computes a per-batch value nobody reads.
        self.train_loss.update(loss.detach(), weight=len(x))
        # Train accuracy against the dominant class of a mixed target.
        self.train_metrics.update(logits, y.argmax(dim=1) if y.ndim == 2 else y)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """``train/loss`` is logged where the loggers write it (every ``trainer.log_every_n_steps``
        steps, the last one, every step of fast_dev_run; decided after the callbacks' hooks, as the
        loggers decide) and at an epoch's last batch (for the progress bar and
        ``trainer.callback_metrics``): the loggers receive the same values at the same steps as when
        it is logged every step, and the other steps pay neither `self.log` (≈ 1 ms of Python on a
        CPU) nor the progress bar's read of the loss (a host sync on a GPU). A loss is checked
        (`check_finite`) before it is logged."""
        trainer = self.trainer
        logs = (
            bool(trainer.fast_dev_run)
            or batch_idx + 1 >= trainer.num_training_batches
            or (trainer._logger_connector.should_update_logs)
        )
        if logs or len(self._pending_losses) >= (trainer.log_every_n_steps or 50):
            self.check_finite()
        if logs and self._last_loss is not None:
            loss, batch_size = self._last_loss
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=batch_size)
        self._last_loss = None

    def on_train_epoch_end(self) -> None:
        self.check_finite()  # no figure of a diverged epoch is logged
        if self.train_loss.update_called:  # (a resumed epoch goes on from the accumulators' saved states)
            # Logged as metric objects: Lightning computes them (synced across processes) and resets them.
            self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True)
            self.log_dict(self.train_metrics, on_step=False, on_epoch=True)

    def on_validation_start(self) -> None:
        self.check_finite()  # inside fit: never validate (and keep as best.ckpt) diverged weights

    def on_train_end(self) -> None:
        self.check_finite()

    def check_finite(self) -> None:
        """Stop a diverged run, in one line, before a checkpoint or a figure of it is written.

        The losses of the steps since the last check are checked on the host together (one host sync),
        every ``trainer.log_every_n_steps`` steps, before every checkpoint is saved (`on_save_checkpoint`),
        before validation, at the end of every epoch and of training, not every step (a GPU would wait
        for each step to finish). A diverged step's update may reach the weights in memory before the
        check, but no checkpoint is written from them: the checkpoints on disk are the last good ones.
        Under DDP every process learns that one diverged (else the others would wait for it forever)."""
        pending, self._pending_losses = self._pending_losses, []
        if not pending or self._trainer is None:
            return
        losses = torch.stack([loss.float() for loss, _, _ in pending])
        bad = ~torch.isfinite(losses)
        diverged = bool(bad.any())
        if self.trainer.world_size > 1:
            diverged = self.trainer.strategy.reduce_boolean_decision(diverged, all=False)
        if not diverged:
            return
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            _, step, epoch = pending[first]
            what = f"the loss is {losses[first].item()} at step {step} (epoch {epoch})"
        else:
            what = f"the loss is not finite on another process, by step {self.global_step} (epoch {self.current_epoch})"
        saved = sorted(
            {
                path
                for cb in self.trainer.checkpoint_callbacks
                for path in (cb.last_model_path, cb.best_model_path)
                if path
            }
        )
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
        """Tell `WarmupDecayLR` how long training is. Done here, not in configure_optimizers: asking the
        trainer for its step count there loads the training data before a checkpoint is restored,
        and the data order could then not resume mid-epoch."""
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if not isinstance(scheduler, WarmupDecayLR):
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
            scheduler.set_training_length(int(total), max(1, int(per_epoch)))
        if self._lr is not None:
            # The LR finder callback ends by giving every group the found lr itself: back to each group's
            # own (its layer_decay scale, the schedule's value at this step).
            schedules = {
                id(config.scheduler.optimizer): config.scheduler for config in self.trainer.lr_scheduler_configs
            }
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
        # Checkpoints without the metric states (`mixer convert` outputs, older runs) still load strictly.
        state = checkpoint.get("state_dict")
        if isinstance(state, dict):
            for key, value in self.state_dict().items():
                if key.startswith(("train_metrics.", "train_loss.")):
                    state.setdefault(key, value)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A diverged run's weights never reach a checkpoint (`check_finite`).

        Checkpoints rebuild their network without the ``init_from`` file: they hold the trained
        weights, so their hyper-parameters drop ``init_from`` (the run's config.yaml keeps it) and keep
        ``upscale`` and the architecture arguments the file implied. ``mixer test --ckpt_path``,
        resuming and ``load_from_checkpoint`` then work after the original weights file is gone."""
        self.check_finite()
        checkpoint["rng_states"] = rng_states()
        hparams = checkpoint.get("hyper_parameters")
        if isinstance(hparams, dict) and hparams.get("init_from"):
            hparams["init_from"] = None

    @property
    def lr(self) -> float | None:
        """The peak learning rate (the head's, with ``layer_decay``): the optimiser's ``lr``, or the one set
        here. Lightning's LR finder (`Tuner.lr_find`, the ``LearningRateFinder`` callback) reads and sets it."""
        return self._lr if self._lr is not None else optimizer_argument(self.optimizer_factory, "lr")

    @lr.setter
    def lr(self, value: float) -> None:
        """Used from the next `configure_optimizers`; when the optimiser exists already (the finder as a
        callback, after it restored the initial state), also the schedules' peaks (``base_lrs``,
        ``initial_lr``), from which `WarmupDecayLR` computes every step's lr (else the next step would
        go back to the configured lr)."""
        self._lr = float(value)
        if self._trainer is None:
            return
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if hasattr(scheduler, "base_lrs"):
                peaks = [self._lr * group.get("lr_scale", 1.0) for group in scheduler.optimizer.param_groups]
                scheduler.base_lrs = peaks
                for group, peak in zip(scheduler.optimizer.param_groups, peaks, strict=True):
                    group["initial_lr"] = peak
        rank_zero_info(
            f"model: learning rate {self._lr:.4g} (set through model.lr, as Lightning's learning-rate finder does; "
            "config.yaml keeps the configured one)"
        )

    def configure_optimizers(self):
        if self.layer_decay is None:
            groups = param_groups(self)
        else:
            weight_decay = optimizer_argument(self.optimizer_factory, "weight_decay")
            groups = layer_decay_groups(self.net, self.layer_decay, weight_decay or 0.0)
        optimizer = self.optimizer_factory(groups)
        for group in optimizer.param_groups:
            # timm's groups carry `lr_scale`, which only timm's schedulers apply: applied here, before the
            # schedule records each group's peak (`initial_lr`), so that every group decays from its own.
            group["lr"] = (self._lr if self._lr is not None else group["lr"]) * group.get("lr_scale", 1.0)
        if self.lr_scheduler_factory is None:
            return optimizer
        scheduler = self.lr_scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval}}
