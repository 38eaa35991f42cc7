"""Minibatch CKA between the hidden features of two networks (Hayase & Karakida 2024, Sec. 3.4, Fig. 2;
Nguyen, Raghu & Kornblith 2021, "Do wide and deep networks learn the same things?", Sec. 3.1).

For minibatches i = 1 … k of n images, X_i and Y_i the features of two layers (flattened), K_i = X_i X_iᵀ
and L_i = Y_i Y_iᵀ their linear Gram matrices,

    CKA_minibatch = (1/k Σ HSIC₁(K_i, L_i)) / √(1/k Σ HSIC₁(K_i, K_i) · 1/k Σ HSIC₁(L_i, L_i))

with the unbiased estimator of HSIC (Song et al. 2012; Nguyen et al. eq. 3):

    HSIC₁(K, L) = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1 / ((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3)),

K̃, L̃ being K, L with their diagonals set to zero. Unbiased, so averaging over minibatches converges to
the CKA of the whole dataset without its memory; the 1/k factors cancel. `MinibatchCKA` keeps the three
sums as torchmetrics sum states, so runs on several devices add their minibatches exactly as one
process would (`torchmetrics.Metric` gathers and sums the states at `compute`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, Dataset, Sampler
from torchmetrics import Metric

from mixer_lightning.errors import require
from mixer_lightning.models.protocols import SkipInputs
from mixer_lightning.models.registry import paper_name


def gram_linear(features: torch.Tensor) -> torch.Tensor:
    """K = X Xᵀ for the (n, …) features X of a minibatch, flattened per example, in float64."""
    x = features.reshape(features.shape[0], -1).to(torch.float64)
    return x @ x.T


def _zero_diagonal(grams: torch.Tensor) -> torch.Tensor:
    return grams * (1 - torch.eye(grams.shape[-1], dtype=grams.dtype, device=grams.device))


def hsic_unbiased(k: torch.Tensor, l: torch.Tensor, pairwise: bool = True) -> torch.Tensor:
    """HSIC₁ of Gram matrices (Song et al. 2012, eq. 5; Nguyen et al. 2021, eq. 3). Needs n ≥ 4.

    ``pairwise``: every pair, (A, n, n) × (B, n, n) -> (A, B); else matching pairs, (A, n, n) × (A, n, n) -> (A,).
    """
    n = k.shape[-1]
    if n < 4:
        raise ValueError(f"the unbiased HSIC needs minibatches of at least 4 examples, got {n}")
    k, l = _zero_diagonal(k), _zero_diagonal(l)
    k_rows, l_rows = k.sum(-1), l.sum(-1)  # K̃1, L̃1
    if pairwise:
        trace = torch.einsum("aij,bij->ab", k, l)  # tr(K̃L̃) = Σ K̃ ∘ L̃ (both symmetric)
        sums = torch.outer(k_rows.sum(-1), l_rows.sum(-1))  # 1ᵀK̃1 · 1ᵀL̃1
        cross = k_rows @ l_rows.T  # 1ᵀK̃L̃1 = (K̃1)ᵀ(L̃1)
    else:
        trace = torch.einsum("aij,aij->a", k, l)
        sums = k_rows.sum(-1) * l_rows.sum(-1)
        cross = (k_rows * l_rows).sum(-1)
    return (trace + sums / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cross) / (n * (n - 3))


class MinibatchCKA(Metric):
    """Minibatch linear CKA between every layer of network A and every layer of network B.

    ``update(features_a, features_b)`` takes the per-layer features of one minibatch ((n, …) tensors: a
    Mixer's (n, S, C), an SW-MLP's (n, m)); ``compute()`` returns ``cka``, the (layers A, layers B) matrix,
    and the ``batches`` and ``examples`` it is over. The float64 sums Σ HSIC₁ (``hsic_ab``, ``hsic_aa``,
    ``hsic_bb``) and the counts are states reduced by summation across processes.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, layers_a: int, layers_b: int, **kwargs):
        super().__init__(**kwargs)
        self.layers_a, self.layers_b = layers_a, layers_b
        self.add_state("hsic_ab", torch.zeros(layers_a, layers_b, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("hsic_aa", torch.zeros(layers_a, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("hsic_bb", torch.zeros(layers_b, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("batches", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("examples", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, features_a: list[torch.Tensor], features_b: list[torch.Tensor]) -> None:
        k = torch.stack([gram_linear(f) for f in features_a])
        l = torch.stack([gram_linear(f) for f in features_b])
        # Out of place: with ddp_spawn on CPU the states travel to the processes in shared memory, and
        # an in-place += would add every process's minibatches into the same storage.
        self.hsic_ab = self.hsic_ab + hsic_unbiased(k, l)
        self.hsic_aa = self.hsic_aa + hsic_unbiased(k, k, pairwise=False)
        self.hsic_bb = self.hsic_bb + hsic_unbiased(l, l, pairwise=False)
        self.batches = self.batches + 1
        self.examples = self.examples + k.shape[-1]

    def compute(self) -> dict[str, torch.Tensor]:
        cka = self.hsic_ab / torch.sqrt(torch.outer(self.hsic_aa, self.hsic_bb))
        return {"cka": cka, "batches": self.batches.clone(), "examples": self.examples.clone()}


# ------------------------------------------------------------------------ evaluation with a Trainer


class MinibatchSampler(Sampler[list[int]]):
    """The minibatches of a CKA evaluation, the same whatever the number of processes: the dataset
    shuffled once with `seed`, cut into full minibatches (every HSIC₁ term is over n = batch_size), at
    most `num_batches`; process `rank` of `world_size` takes minibatches rank, rank + world_size, …
    whole, so the summed states equal one process's (a DistributedSampler would deal examples round-robin
    and pad, changing every minibatch)."""

    def __init__(self, num_examples: int, batch_size: int, num_batches: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1):  # fmt: skip
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        total = num_examples // batch_size
        self.total = total if num_batches is None else min(total, num_batches)
        self.rank, self.world_size = rank, world_size

    def __iter__(self):
        order = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(self.seed)).tolist()
        for b in range(self.rank, self.total, self.world_size):
            yield order[b * self.batch_size : (b + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(range(self.rank, self.total, self.world_size))


class CKAEvaluation(LightningModule):
    """Two frozen networks run over a dataset in a Lightning test loop, `MinibatchCKA` accumulated between
    the inputs of their skip connections (``forward_skip_inputs``); the matrix is logged as ``cka/{i}/{j}``
    (what ``trainer.test`` returns, spawned processes too) with ``cka/examples`` and ``cka/batches``."""

    def __init__(self, nets: list[SkipInputs], layers: list[int], dataset: Dataset, sampling: dict, num_workers: int):
        super().__init__()
        self.net_a, self.net_b = nets
        self.cka = MinibatchCKA(*layers)
        self.dataset, self.sampling, self.num_workers = dataset, sampling, num_workers

    def test_dataloader(self) -> DataLoader:
        ranks = {"rank": self.trainer.global_rank, "world_size": self.trainer.world_size}
        sampler = MinibatchSampler(len(self.dataset), **self.sampling, **ranks)
        return DataLoader(self.dataset, batch_sampler=sampler, num_workers=self.num_workers)

    def test_step(self, batch, batch_idx: int) -> None:
        images = batch[0]
        self.cka.update(self.net_a.forward_skip_inputs(images), self.net_b.forward_skip_inputs(images))

    def on_test_epoch_end(self) -> None:
        result = self.cka.compute()  # the states summed over every process
        metrics = {f"cka/{i}/{j}": value for (i, j), value in np.ndenumerate(result["cka"].cpu().numpy())}
        metrics.update({"cka/examples": result["examples"].double(), "cka/batches": result["batches"].double()})
        self.log_dict(metrics, sync_dist=True)  # the same values on every process: their mean changes nothing
        self.cka.reset()


def compute_matrix(
    ckpt_a: str,
    ckpt_b: str,
    configs: list[str],
    split: str = "test",
    batch_size: int | None = None,
    batches: int | None = None,
    seed: int = 0,
    data: dict[str, Any] | None = None,
    **trainer_args: Any,
) -> dict:
    """Minibatch CKA between the skip-connection inputs of the networks in two checkpoints, on the
    images of the ``data:`` section of `configs` with `data`'s init args over it (`mixer cka`, and `mixer sweep
    report` for Fig. 2(a)); `trainer_args` (accelerator, devices, strategy, num_nodes, precision) go to
    Lightning's Trainer."""
    from lightning.pytorch import Trainer

    from mixer_lightning.analysis.features import check_fits_data, datamodule_from_config, skip_input_names
    from mixer_lightning.tasks.loading import load_classifier

    modules = [load_classifier(path, field="ckpt") for path in (ckpt_a, ckpt_b)]
    nets = [module.net for module in modules]
    names = [skip_input_names(net) for net in nets]
    for path, net, layers in zip((ckpt_a, ckpt_b), nets, names, strict=True):
        fix = "compare Mixers (MLP-Mixer, S-Mixer, RP) and SW-MLPs"
        problem = f"{path!r} holds a {type(net).__name__}, which exposes no features before skip connections"
        require(bool(layers) and hasattr(net, "forward_skip_inputs"), "ckpt", problem, fix)
    datamodule = datamodule_from_config(configs, data)
    for module in modules:
        check_fits_data(module, datamodule, "config")
    datamodule.setup("test" if split == "test" else "validate")
    dataset = datamodule.test_set if split == "test" else datamodule.val_set
    batch_size = batch_size or datamodule.eval_batch_size
    require(len(dataset) >= batch_size, "batch_size", f"the {split} split has {len(dataset)} images, < one minibatch")
    sampling = {"batch_size": batch_size, "num_batches": batches, "seed": seed}
    evaluation = CKAEvaluation(nets, [len(n) for n in names], dataset, sampling, datamodule.num_workers)
    trainer_args = {k: v for k, v in trainer_args.items() if v is not None}
    quiet = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "enable_progress_bar": False,
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer = Trainer(**trainer_args, **quiet, use_distributed_sampler=False)  # MinibatchSampler shards
        results = trainer.test(evaluation, verbose=False)[0]
    matrix = [[float(results[f"cka/{i}/{j}"]) for j in range(len(names[1]))] for i in range(len(names[0]))]
    result = {"cka": matrix, "layers_a": names[0], "layers_b": names[1], "ckpt_a": ckpt_a, "ckpt_b": ckpt_b}
    named = [paper_name(type(net).__name__, getattr(net, "permute", False)) for net in nets]
    result |= {"model_a": named[0], "model_b": named[1], "split": split}
    result |= {
        "batch_size": batch_size,
        "batches": int(results["cka/batches"]),
        "examples": int(results["cka/examples"]),
    }
    result["main_process"] = trainer.is_global_zero
    if len(names[0]) == len(names[1]):  # Figure 2(a): the mean of the diagonal
        result["diagonal_mean"] = sum(matrix[i][i] for i in range(len(matrix))) / len(matrix)
    for key, net in (("mixing_a", nets[0]), ("mixing_b", nets[1])):
        if hasattr(net, "mixing_layers"):  # a Mixer: its mixing sizes (its density is (1/S + 1/C)/2)
            result[key] = {"S": int(net.tokens), "C": int(net.channels)}
    return result
