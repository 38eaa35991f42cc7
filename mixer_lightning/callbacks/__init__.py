"""Lightning callbacks of the project: the prediction writer, the data facts a checkpoint carries and the
weight monitors here; images/s, MFU and the data wait in `throughput` (`SpeedMonitor`); checkpoints and
the resumable stop in `checkpoints`; SLURM's requeue in `slurm`."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from lightning.pytorch.utilities import rank_zero_info

from mixer_lightning.loggers import run_directory
from mixer_lightning.safety.atomic import atomic_write

# The seed of the run a checkpoint belongs to (``seed_everything``; None: not seeded), which a resume keeps.
SEED_KEY = "seed_everything"


class PredictionWriter(BasePredictionWriter):
    """Writes what ``mixer predict`` computes, one file per process under DDP, atomically:

    - image files (``data.predict_root``): a CSV, one row per file in the order read, with the `topk`
      classes: ``file, class_1, name_1, prob_1, ..., class_k, name_k, prob_k`` (as timm's
      ``inference.py --topk``); default ``<run dir>/predictions.csv``;
    - the test split: the class probabilities (N × num_classes, dataset order) in a torch file; default
      ``<run dir>/predictions.pt``.

    An existing ``output`` is replaced only with ``overwrite: true`` (checked before predicting); the
    default name takes the next free number (``predictions1.csv``, ...) rather than replace one."""

    def __init__(self, output: str | None = None, overwrite: bool = False, topk: PositiveInt = 5):
        super().__init__(write_interval="epoch")
        self.output, self.overwrite, self.topk = output, overwrite, topk
        self.resolved: Path | None = None  # where the CLI decided they go

    def target(self, log_dir: str | None, files: bool) -> Path:
        """Where the predictions go: ``output``, else the first free ``predictions[N].csv|pt`` of `log_dir`."""
        if self.output:
            return Path(self.output)
        name, folder = Path("predictions.csv" if files else "predictions.pt"), Path(log_dir or ".")
        path, number = folder / name, 1
        while path.exists():
            path, number = folder / f"{name.stem}{number}{name.suffix}", number + 1
        return path

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        if predictions and isinstance(predictions[0], list):  # several dataloaders: keep the first
            predictions = predictions[0]
            batch_indices = batch_indices[0] if batch_indices else batch_indices
        if not predictions:
            return
        probabilities = torch.cat([p.cpu() for p in predictions])
        datamodule = trainer.datamodule
        files = getattr(datamodule, "predict_set", None) if getattr(datamodule, "predict_root", None) else None
        path = self.resolved or self.target(run_directory(trainer), files is not None)
        if trainer.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
        if files is None:
            with atomic_write(path, "wb", field="prediction_writer.output") as f:
                torch.save({"probabilities": probabilities}, f)
            rank_zero_info(f"Predictions ({tuple(probabilities.shape)}) written to {path}")
            return
        indices = flat_indices(batch_indices)
        if len(indices) != len(probabilities):  # not tracked: the loader's order
            indices = list(range(len(probabilities)))
        self.write_csv(path, files, probabilities, indices, datamodule)
        rank_zero_info(f"Predictions of {len(indices)} images written to {path}")

    def write_csv(self, path: Path, files: Any, probabilities: torch.Tensor, indices: list[int], data: Any) -> None:
        from mixer_lightning.data.predict import class_names, spreadsheet_text

        names = class_names(data)
        names = names if len(names) == probabilities.shape[1] else [str(i) for i in range(probabilities.shape[1])]
        k = min(self.topk, probabilities.shape[1])
        top = probabilities.topk(k, dim=1)
        header = ["file"] + [f"{what}_{rank}" for rank in range(1, k + 1) for what in ("class", "name", "prob")]
        with atomic_write(path, "w", field="prediction_writer.output") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            seen: set[int] = set()
            for row, index in enumerate(indices):
                if index in seen:  # a DistributedSampler pads the last batch with repeats
                    continue
                seen.add(index)
                # Names as text a spreadsheet does not run (a file named =1+1.png, say); numbers as they are.
                cells = [spreadsheet_text(files.names[index])]
                for value, cls in zip(top.values[row].tolist(), top.indices[row].tolist(), strict=True):
                    cells += [cls, spreadsheet_text(names[cls]), f"{value:.6f}"]
                writer.writerow(cells)


def flat_indices(batch_indices: Any) -> list[int]:
    """The dataset indices of the predictions, in order: Lightning gives them per dataloader, per batch."""
    if isinstance(batch_indices, (list, tuple)):
        return [i for item in batch_indices for i in flat_indices(item)]
    return [int(batch_indices)] if batch_indices is not None else []


class DataFacts(Callback):
    """Writes the facts of the data into every checkpoint, under ``data`` (classes and their names, image
    size, channels, normalisation, evaluation crop, input permutation: `mixer_lightning.data.predict.data_facts`),
    so that ``mixer predict --ckpt_path CKPT --data.predict_root DIR`` needs no data config; and the run's
    seed, under `SEED_KEY`. Plain values, read back with ``torch.load(weights_only=True)``."""

    def __init__(self, seed: int | None = None) -> None:
        self.facts: dict[str, Any] | None = None
        self.seed = seed

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit" and self.facts is None:
            from mixer_lightning.data.predict import data_facts

            self.facts = data_facts(trainer.datamodule)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.facts is not None:
            checkpoint["data"] = dict(self.facts)
        checkpoint[SEED_KEY] = self.seed


class WeightMonitor(Callback):
    """Logs statistics of the network's effective FC layers (`weight_layers`: a Mixer's mixing layers,
    an SW-MLP's sparse layers) to every logger every `every_n_steps` optimiser steps and once before
    training. Computed on the global-zero process only (the weights are the same on every process;
    not for FSDP, whose processes hold shards)."""

    def __init__(self, every_n_steps: PositiveInt = 100):
        super().__init__()
        self.every_n_steps = every_n_steps
        self.last_step: int | None = None

    def statistics(self, layers: list[tuple[str, torch.nn.Module, float]]) -> dict[str, float]:
        raise NotImplementedError

    def log_statistics(self, trainer: Trainer, pl_module: LightningModule) -> None:
        step = trainer.global_step
        if self.last_step == step or not trainer.is_global_zero or not trainer.loggers:
            return
        from mixer_lightning.analysis.spectrum import weight_layers

        self.last_step = step
        layers = weight_layers(getattr(pl_module, "net", pl_module))
        if not layers:
            return
        metrics = self.statistics(layers)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.log_statistics(trainer, pl_module)  # the initial weights (step 0, or the step a run resumes at)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self.log_statistics(trainer, pl_module)


class SpectrumMonitor(WeightMonitor):
    """Logs the largest singular value σ_max of every effective FC layer as ``spectrum/sigma_max/<layer>``
    (and their maximum as ``spectrum/sigma_max/max``): W's for a Mixer's I ⊗ W (Kronecker products with
    I and permutations keep the singular values), M ⊙ W's for an SW-MLP (Hayase & Karakida Sec. 4.3:
    at initialisation ≈ 1 + √γ for Mixers, growing with width for SW-MLPs).

    Exact for weights of up to `exact_max_entries` entries; larger ones (an SW-MLP's γm×m) by
    `power_iterations` steps of power iteration on the sparse weight, warm-started from the previous
    call's vector (the estimate is a lower bound that tightens over training). In a config:
    ``trainer.callbacks: [{class_path: mixer_lightning.callbacks.SpectrumMonitor}]``.
    """

    def __init__(
        self, every_n_steps: PositiveInt = 100, exact_max_entries: int = 2**22, power_iterations: PositiveInt = 20
    ):
        super().__init__(every_n_steps)
        self.exact_max_entries, self.power_iterations = exact_max_entries, power_iterations
        self.vectors: dict[str, dict] = {}

    def statistics(self, layers: list[tuple[str, torch.nn.Module, float]]) -> dict[str, float]:
        from mixer_lightning.analysis.spectrum import spectral_norm

        metrics = {
            f"spectrum/sigma_max/{name}": spectral_norm(
                layer, self.vectors.setdefault(name, {}), self.exact_max_entries, self.power_iterations
            )
            for name, layer, _ in layers
        }
        metrics["spectrum/sigma_max/max"] = max(metrics.values())
        return metrics


class SparsityMonitor(WeightMonitor):
    """Logs the sparsity of every effective FC layer (Hayase & Karakida Sec. 3-4):

    - ``sparsity/density/<layer>``: the non-zero ratio p of the effective weight in the wide MLP (1/C
      for a token-mixing layer's I_C ⊗ W, 1/S for channel mixing, the mask density for an SW-MLP);
    - ``sparsity/near_zero/<layer>``: the fraction of the trainable weights with |w| < `threshold` ×
      the layer's RMS weight (the implicit sparsification of Sec. 3.2's L1-like bias);
    - ``sparsity/effective_density/<layer>``: density × (1 − near_zero), the fraction of the wide
      weight's entries that are not negligible;
    - ``sparsity/l1_l2/<layer>``: ‖w‖₁ / (√n ‖w‖₂) ∈ (0, 1], √(2/π) ≈ 0.80 for Gaussian weights and
      smaller as the weights concentrate on fewer entries.
    """

    def __init__(self, every_n_steps: PositiveInt = 100, threshold: PositiveFloat = 0.01):
        super().__init__(every_n_steps)
        self.threshold = threshold

    @torch.no_grad()
    def statistics(self, layers: list[tuple[str, torch.nn.Module, float]]) -> dict[str, float]:
        from mixer_lightning.analysis.spectrum import trainable_weight

        metrics = {}
        for name, layer, density in layers:
            w = trainable_weight(layer).double()
            rms = w.pow(2).mean().sqrt()
            near_zero = float((w.abs() < self.threshold * rms).double().mean()) if rms > 0 else 1.0
            metrics[f"sparsity/density/{name}"] = density
            metrics[f"sparsity/near_zero/{name}"] = near_zero
            metrics[f"sparsity/effective_density/{name}"] = density * (1.0 - near_zero)
            metrics[f"sparsity/l1_l2/{name}"] = float(w.abs().sum() / (w.numel() ** 0.5 * w.norm())) if rms > 0 else 0.0
        return metrics
