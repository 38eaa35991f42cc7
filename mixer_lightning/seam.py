"""Every reach into a library's private names (Lightning, jsonargparse, timm, datasets, huggingface_hub,
torchmetrics): one function per need, each naming the behaviour of the library it relies on. Nothing
else in the package uses a library's ``_private`` name (tests/test_seam.py checks both: that each name
used here still exists in the installed releases, and that no other module uses one). Libraries are
imported inside the functions, so this module sits beneath everything."""

from __future__ import annotations

from typing import Any

# Each private name used below, by the object that has it ("module:Class"); tests/test_seam.py checks that
# each still exists in the installed releases and that this table lists every one the module uses.
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.cli:LightningCLI": ("_subcommand_parsers",),
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop": (
        "_num_ready_batches_reached",
        "_should_accumulate",
        "_should_check_val_fx",
        "_batches_that_stepped",
    ),
    "lightning.pytorch.loops.fit_loop:_FitLoop": ("_data_fetcher",),
    "lightning.pytorch.trainer.trainer:Trainer": ("_accelerator_connector",),
    "argparse:ArgumentParser": ("_actions",),
    "jsonargparse._typehints:ActionTypeHint": ("_typehint",),
    "timm.models": ("_hub",),
}


# Warnings that ask nothing of a user of `mixer`, by the library module that words each and its words: the one
# wording of a library the package depends on (tests/test_seam.py checks each module's source still words it so).
LIBRARY_WARNINGS: dict[str, tuple[str, str]] = {
    # a library's deprecation about another library (Lightning's use of torch's pytree)
    "leaf_spec": ("torch.utils._pytree", r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # an epoch of fewer batches than log_every_n_steps: the line progress prints every epoch anyway
    "log_interval": ("lightning.pytorch.loops.fit_loop", r"is smaller than the logging interval"),
    # an evaluation needs the weights only, not the fit's callbacks
    "checkpoint_callbacks": ("lightning.pytorch.trainer.call", r"callbacks used to create the checkpoint need to"),
    # a resumed run's checkpoints folder holds its checkpoints; a folder of the user's own, its lock file
    "checkpoint_folder": ("lightning.pytorch.callbacks.model_checkpoint", r"Checkpoint directory .* exists and is not"),
}


def ignore_warning(name: str) -> None:
    """Ignore the library warning `name` of `LIBRARY_WARNINGS` (until the caller's ``catch_warnings`` ends)."""
    import warnings

    warnings.filterwarnings("ignore", message=f".*{LIBRARY_WARNINGS[name][1]}")


def option_names(cli: Any, subcommand: str) -> list[str]:
    """The dotted keys (``trainer.max_epochs``) that a LightningCLI subcommand takes as flags.

    Lightning: LightningCLI keeps each subcommand's parser in ``_subcommand_parsers``; argparse: a parser's
    options are the ``option_strings`` of its ``_actions``."""
    actions = cli._subcommand_parsers[subcommand]._actions
    names = [s[2:] for action in actions for s in action.option_strings if s.startswith("--")]
    return [name for name in names if not name.endswith(".help") and name != "help"]


# Trainer arguments where an int counts batches and a float is a fraction of the epoch.
BATCH_COUNTS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
    "val_check_interval",
)


def batch_counts_as_ints(parser: Any) -> None:
    """Make ``--trainer.limit_train_batches 1`` one batch (Lightning's meaning), not 1.0, the whole epoch.

    jsonargparse: an argument from a type hint is an ``ActionTypeHint`` trying the members of its
    ``_typehint`` union in order; Lightning annotates ``Optional[Union[int, float]]``, but typing caches unions
    as equal whatever their order, so the hint may come back as ``Union[float, int, None]`` (float first)."""
    from typing import Union

    for action in parser._actions:
        hint = getattr(action, "_typehint", None)
        members = getattr(hint, "__args__", None)
        if action.dest.split(".")[-1] in BATCH_COUNTS and isinstance(members, tuple) and {int, float} <= set(members):
            action._typehint = Union[tuple([int, float, *(m for m in members if m not in (int, float))])]  # noqa: UP007


def resumable_after_batch(trainer) -> bool:
    """Whether Lightning resumes a checkpoint taken now, at ``on_train_batch_end``, exactly: not when the
    epoch's training is over (Lightning would resume it by skipping the epoch's validation and end),
    nor when a validation follows inside the epoch (``val_check_interval``: skipped too), nor after a
    batch that only accumulated gradients (a checkpoint does not hold them). Relies on
    ``_TrainingEpochLoop._num_ready_batches_reached``, ``._should_accumulate``, ``._should_check_val_fx``
    and ``_FitLoop._data_fetcher``, which decide the same in Lightning's own loop."""
    loop = trainer.fit_loop.epoch_loop
    if loop.batch_progress.is_last_batch or loop._num_ready_batches_reached() or loop._should_accumulate():
        return False
    fetcher = trainer.fit_loop._data_fetcher
    return fetcher is None or not loop._should_check_val_fx(fetcher)


def logger_step(trainer) -> int:
    """The step Lightning logs training figures at: ``_TrainingEpochLoop._batches_that_stepped`` (one per
    batch that stepped the optimiser; incremented after ``on_train_batch_end``)."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def restart_after_last_batch(loops: dict) -> None:
    """Rewrite the loop state of a checkpoint taken as an epoch starts, for a trainer that counts steps
    (``max_steps``): Lightning then always restarts its loops, and starts the next epoch afresh only from
    the state "saved after the last batch's training step" (``RestartStage.RESTARTED_ON_TRAIN_BATCH_END``,
    which advances one logger step and marks the batch complete), so the epoch loop is put one step
    before that. Relies on the checkpoint keys ``fit_loop/epoch_loop.batch_progress``,
    ``epoch_loop.state_dict/_batches_that_stepped`` and ``epoch_loop.val_loop.batch_progress``."""
    fit = loops.get("fit_loop", {})
    batches = fit.get("epoch_loop.batch_progress", {})
    for key in ("total", "current"):
        if isinstance(batches.get(key), dict):
            batches[key]["completed"] = batches[key]["processed"] - 1
    batches["is_last_batch"] = True
    fit.get("epoch_loop.state_dict", {})["_batches_that_stepped"] -= 1
    validation = fit.get("epoch_loop.val_loop.batch_progress")
    if isinstance(validation, dict):
        validation["is_last_batch"] = True  # else Lightning counts the epoch complete twice


def cluster_environment(trainer) -> object:
    """The trainer's cluster environment (``SLURMEnvironment`` with its ``auto_requeue``, ``requeue_signal``),
    from ``Trainer._accelerator_connector.cluster_environment``: single-device strategies do not expose it,
    and Lightning's signal connector reads it there."""
    return trainer._accelerator_connector.cluster_environment


def timm_model_card(card: dict, name: str) -> str:
    """README.md of a hub repo as timm's public ``push_to_hf_hub`` writes it (front matter with tags,
    library and datasets; then the ``description``, ``details`` and ``usage`` of `card`), for the same
    card written into a local folder: timm's ``timm.models._hub.generate_readme``."""
    from timm.models._hub import generate_readme

    return generate_readme(card, name)
