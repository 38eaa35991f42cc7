"""Checks of a run's settings that Lightning would only fail on later (a traceback, or after the run
directory exists): each a one-line `ConfigError` before anything is written."""

from __future__ import annotations

import math
from typing import Any

import torch

from mixer_lightning.callbacks import PredictionWriter
from mixer_lightning.callbacks.checkpoints import BEST_NAME, SPECIAL_CKPT_PATHS
from mixer_lightning.commands.lists import SEED_LIMIT
from mixer_lightning.errors import ConfigError
from mixer_lightning.safety.atomic import check_output_file
from mixer_lightning.tasks import ClassifierModule
from mixer_lightning.tasks.loading import check_checkpoint

# Words of torch.optim's ValueErrors -> the argument they are about.
OPTIMIZER_WORDS = (
    ("learning rate", "lr"),
    ("weight_decay", "weight_decay"),
    ("epsilon", "eps"),
    ("beta", "betas"),
    ("momentum", "momentum"),
    ("dampening", "dampening"),
)


def check_seed(config: Any) -> None:
    """``seed_everything`` in numpy's range (Lightning's seed_everything refuses, or in older releases
    replaces, a seed outside it)."""
    subcommand = config.get("subcommand")
    seed = (config[subcommand] if subcommand else config).get("seed_everything")
    if isinstance(seed, bool) or not isinstance(seed, int) or 0 <= seed < SEED_LIMIT:
        return
    raise ConfigError(
        "seed_everything",
        f"{seed} is not in bounds, numpy accepts from 0 to {SEED_LIMIT - 1}",
        f"give a seed in 0..{SEED_LIMIT - 1}",
    )


def check_trainer_settings(config: Any) -> None:
    """Trainer settings Lightning divides by or takes a modulo of, and a logger whose package is missing;
    ``checkpoint.save_last`` is turned off (last.ckpt is step_checkpoint's, written at resumable moments only)."""
    trainer = config.get("trainer") or {}
    accumulate = trainer.get("accumulate_grad_batches")
    if accumulate is not None and accumulate < 1:  # Lightning divides by it
        raise ConfigError(
            "trainer.accumulate_grad_batches", f"must be >= 1, got {accumulate}", "give 1 (no accumulation) or more"
        )
    every = trainer.get("check_val_every_n_epoch")
    if every is not None and every < 1:  # Lightning takes the epoch modulo it
        raise ConfigError(
            "trainer.check_val_every_n_epoch",
            f"must be >= 1 (or null), got {every}",
            "give 1 to validate every epoch",
        )
    interval = trainer.get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool):
        if interval < 1 if isinstance(interval, int) else not 0 < interval <= 1:  # Lightning takes a modulo of it
            raise ConfigError(
                "trainer.val_check_interval",
                f"must be a number of batches >= 1 or a fraction of the epoch in (0, 1], got {interval}",
                "give 1.0 to validate once per epoch, 0.25 four times, or 100 every 100 batches",
            )
    clip = trainer.get("gradient_clip_val")
    if isinstance(clip, (int, float)) and not (math.isfinite(clip) and clip >= 0):  # Lightning ignores clip <= 0
        raise ConfigError(
            "trainer.gradient_clip_val",
            f"must be a finite norm >= 0, got {clip} (a negative one would silently clip nothing)",
            "give e.g. 1.0, or 0 (or null) for no clipping",
        )
    checkpoint = config.get("checkpoint")
    if checkpoint is not None and checkpoint.get("save_last"):
        checkpoint.save_last = False
    if checkpoint is not None:
        check_top_k_filename(checkpoint)


def check_top_k_filename(checkpoint: Any) -> None:
    """``checkpoint.save_top_k`` k > 1 needs a file name that differs between the k checkpoints (the
    default ``best`` becomes ``{epoch}-{step}-{monitor}``: `BestCheckpoint`): with one fixed name every
    candidate replaces the previous one, and that file is the latest model, not the best."""
    k, filename = checkpoint.get("save_top_k"), checkpoint.get("filename")
    if k in (0, 1, None) or not filename or filename == BEST_NAME or "{" in filename:
        return
    if checkpoint.get("enable_version_counter"):  # Lightning's NAME-v1.ckpt, NAME-v2.ckpt, ...
        return
    raise ConfigError(
        "checkpoint.filename",
        f"{filename!r} names one file, but save_top_k {k} keeps {'every' if k == -1 else k} checkpoints "
        "(each would replace the one before)",
        "put {epoch} or the metric in it, e.g. --checkpoint.filename '{epoch}-{val/acc1:.4f}'",
    )


def trainer_error(error: Exception) -> ConfigError:
    """Lightning's refusal to build the Trainer (FSDP on the CPU, a GPU that is not there) as one line."""
    problem = str(error).strip().splitlines()[0].rstrip("!.")
    fix = None
    if "gpu backend" in problem.lower() or "cuda" in problem.lower() and "not available" in problem.lower():
        fix = "use --trainer.accelerator cpu (or auto), or run on a machine with a CUDA GPU"
    return ConfigError("trainer", problem, fix)


def check_ckpt_file(path: Any, model: Any) -> None:
    """The checkpoint at `path` (``--ckpt_path``) loads into the configured `model`."""
    if path and path not in SPECIAL_CKPT_PATHS:
        check_checkpoint(path, model)


# float16's smallest positive value (a subnormal): anything below rounds to 0 in a half-precision tensor.
FLOAT16_TINY = 2.0**-24


def _optimizers(configured: Any) -> list:
    """The torch optimisers in what ``configure_optimizers`` returned (one, a list, a dict, a tuple)."""
    if isinstance(configured, torch.optim.Optimizer):
        return [configured]
    if isinstance(configured, dict):
        return _optimizers(configured.get("optimizer"))
    if isinstance(configured, (list, tuple)):
        return [o for item in configured for o in _optimizers(item)]
    return []


def check_optimizers(model: Any, precision: str | None = None) -> None:
    """Build the optimiser and schedule once on the side: a negative learning rate or weight decay is
    a one-line error now, before the run directory exists, not a traceback after it; so is an infinite
    learning rate (torch.optim accepts it; the loss is nan at the first step) and, with ``trainer.precision
    16-true``, an Adam ``eps`` that is 0 in float16 (Adam then divides by zero at the first step)."""
    configure = getattr(model, "configure_optimizers", None)
    if not isinstance(model, ClassifierModule) or configure is None:
        return
    try:
        configured = configure()
    except ValueError as error:  # torch.optim: "Invalid learning rate: -0.1", "Invalid weight_decay value: -1"
        problem = str(error).splitlines()[0].rstrip(".")
        argument = next((name for words, name in OPTIMIZER_WORDS if words in problem.lower()), None)
        field = f"model.optimizer.init_args.{argument}" if argument else "model.optimizer"
        raise ConfigError(
            field,
            problem[0].lower() + problem[1:],
            "give a value the optimiser accepts (learning rate and weight decay >= 0)",
        ) from None
    except TypeError as error:
        raise ConfigError(
            "model.optimizer",
            str(error).splitlines()[0],
            "check the arguments of model.optimizer and model.lr_scheduler",
        ) from None
    for optimizer in _optimizers(configured):
        for group in optimizer.param_groups:
            for key in ("initial_lr", "lr"):  # initial_lr: the base of a schedule that starts from a warm-up
                lr = group.get(key)
                if isinstance(lr, (int, float, torch.Tensor)) and not math.isfinite(float(lr)):
                    raise ConfigError(
                        "model.optimizer.init_args.lr",
                        f"must be a finite number, got {float(lr)}",
                        "give a learning rate such as 0.001",
                    )
            eps = group.get("eps")
            if precision == "16-true" and isinstance(eps, float) and eps < FLOAT16_TINY:
                raise ConfigError(
                    "model.optimizer.init_args.eps",
                    f"{eps:g} is 0 in float16 (trainer.precision 16-true), so the optimiser divides by zero at "
                    "the first step",
                    "use trainer.precision 16-mixed or bf16-true, or give eps >= 1e-4",
                )


def check_prediction_output(trainer: Any) -> None:
    """``prediction_writer.output`` is a file that may be written (not another's, unless overwrite)."""
    for callback in trainer.callbacks:
        if isinstance(callback, PredictionWriter) and callback.output:
            check_output_file(
                callback.output,
                "prediction_writer.output",
                callback.overwrite,
                "--prediction_writer.overwrite true",
            )
