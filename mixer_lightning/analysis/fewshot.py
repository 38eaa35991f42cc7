"""Linear few-shot evaluation of frozen features (Tolstikhin et al. 2021, Sec. 3: "ℓ2-regularized linear
regression" from frozen representations to the labels, as ViT and BiT), following big_vision's
``fewshot_lsr``: k images per class drawn per seed; their pre-logit features standardised (mean, std +
1e-5 of the k-shot set) with a constant feature of 100 appended; one-hot targets in {−1, +1};
W = (XᵀX + λI)⁻¹XᵀY through one eigendecomposition (of XXᵀ when there are fewer examples than
features), so each λ of a grid costs a matrix product; the accuracy of argmax(X_test W) on the test split.

λ: big_vision fixes 2¹⁰; its earlier grid 2⁻¹⁰ … 2¹⁹ was chosen on other datasets' test accuracies. With
one dataset that would select on the test set, so ``auto`` picks λ by the accuracy on held-out training
images of the same seed, disjoint from the shots (ties: the larger λ).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from mixer_lightning.errors import require

L2_GRID = [2.0**i for i in range(-10, 20)]  # big_vision's l2_regs
BIG_VISION_L2 = 2.0**10  # big_vision's fixed l2_reg
BIAS_CONSTANT = 100.0


@dataclass
class RidgeSolver:
    """(XᵀX + λI)⁻¹XᵀY for any λ from one eigendecomposition (big_vision's ``_precompute_cache``)."""

    mean: torch.Tensor
    std: torch.Tensor
    lhs: torch.Tensor
    eigenvalues: torch.Tensor
    rhs: torch.Tensor

    @classmethod
    def fit(cls, features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> RidgeSolver:
        x = features.double()
        mean, std = x.mean(0, keepdim=True), x.std(0, unbiased=False, keepdim=True) + 1e-5
        x = cls._prepare(x, mean, std)
        y = 2.0 * torch.nn.functional.one_hot(labels.long(), num_classes).double() - 1.0
        if x.shape[0] >= x.shape[1]:  # W = Q (Λ + λ)⁻¹ Qᵀ Xᵀ Y with XᵀX = Q Λ Qᵀ
            eigenvalues, q = torch.linalg.eigh(x.T @ x)
            lhs, rhs = q, q.T @ (x.T @ y)
        else:  # W = Xᵀ (XXᵀ + λ)⁻¹ Y = Xᵀ Q (Λ + λ)⁻¹ Qᵀ Y with XXᵀ = Q Λ Qᵀ
            eigenvalues, q = torch.linalg.eigh(x @ x.T)
            lhs, rhs = x.T @ q, q.T @ y
        return cls(mean, std, lhs, eigenvalues, rhs)

    @staticmethod
    def _prepare(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        x = (x.double() - mean) / std
        return torch.nn.functional.pad(x, (0, 1), value=BIAS_CONSTANT)

    def weights(self, l2: float) -> torch.Tensor:
        return (self.lhs / (self.eigenvalues + l2)[None, :]) @ self.rhs

    def accuracy(self, features: torch.Tensor, labels: torch.Tensor, l2: float) -> float:
        scores = self._prepare(features, self.mean, self.std) @ self.weights(l2)
        return float((scores.argmax(1) == labels.to(scores.device)).double().mean())


def dataset_labels(dataset: Dataset) -> torch.Tensor:
    """The labels of an (image, label) dataset without decoding its images where the format allows."""
    from mixer_lightning.data.pil_path import TransformedDataset
    from mixer_lightning.data.sources.huggingface import HFImages

    if isinstance(dataset, TransformedDataset):
        labels = dataset_labels(dataset.base)
        return labels if dataset.indices is None else labels[torch.as_tensor(dataset.indices)]
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[1].long()
    if isinstance(dataset, HFImages):
        return torch.as_tensor(dataset.dataset[dataset.label_column]).long()
    for name in ("targets", "labels"):  # torchvision (CIFAR, MNIST, ImageFolder: targets; STL-10: labels)
        if hasattr(dataset, name):
            return torch.as_tensor(np.asarray(getattr(dataset, name))).long()
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))])


@torch.no_grad()
def extract_features(
    net: nn.Module, dataset: Dataset, batch_size: int, device: torch.device, num_workers: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-logit features (``forward_head(forward_features(x), pre_logits=True)``) and labels."""
    net = net.to(device).eval()
    features, labels = [], []
    for images, targets in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers):
        out = net.forward_head(net.forward_features(images.to(device)), pre_logits=True)
        features.append(out.float().cpu())
        labels.append(torch.as_tensor(targets).long())
    return torch.cat(features), torch.cat(labels)


def draw_shots(labels: torch.Tensor, num_classes: int, shots: int, holdout: int, seed: int) -> tuple[list, list]:
    """Indices of `shots` training images per class and of up to `holdout` more (for choosing λ), drawn
    with `seed` (numpy's default_rng permutation of each class, as big_vision)."""
    rng = np.random.default_rng(seed)
    chosen, held = [], []
    for c in range(num_classes):
        members = rng.permutation(np.flatnonzero(labels.numpy() == c))
        require(
            len(members) >= shots,
            "shots",
            f"class {c} has {len(members)} training images, fewer than {shots} shots",
            f"use --shots <= {len(members)}",
        )
        chosen.extend(members[:shots].tolist())
        held.extend(members[shots : shots + holdout].tolist())
    return chosen, held


def evaluate(
    train_features: dict[int, torch.Tensor],
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    shots: int,
    seeds: list[int],
    l2: float | list[float] | str = "auto",
    holdout: int = 10,
) -> dict:
    """Few-shot accuracy per seed and its mean ± std. `train_features` maps a training index to its
    features (only the drawn images need any); `l2` is a number, a list to select from, or "auto"."""
    grid = L2_GRID if l2 == "auto" else ([float(l2)] if isinstance(l2, (int, float)) else [float(v) for v in l2])
    select = len(grid) > 1
    runs = []
    for seed in seeds:
        chosen, held = draw_shots(train_labels, num_classes, shots, holdout if select else 0, seed)
        if select:
            require(
                bool(held),
                "holdout",
                "no training images are left to choose λ on",
                "lower --shots, raise --holdout or give one --l2",
            )
        x = torch.stack([train_features[i] for i in chosen])
        solver = RidgeSolver.fit(x, train_labels[chosen], num_classes)
        if select:
            x_held = torch.stack([train_features[i] for i in held])
            scores = [solver.accuracy(x_held, train_labels[held], value) for value in grid]
            best = max(scores)
            chosen_l2 = max(value for value, score in zip(grid, scores, strict=True) if score == best)  # ties: more λ
        else:
            best, chosen_l2 = None, grid[0]
        runs.append(
            {
                "seed": seed,
                "l2": chosen_l2,
                "holdout_accuracy": best,
                "accuracy": solver.accuracy(test_features, test_labels, chosen_l2),
            }
        )
    accuracies = [r["accuracy"] for r in runs]
    return {
        "shots": shots,
        "l2": "auto" if l2 == "auto" else grid if select else grid[0],
        "holdout_per_class": holdout if select else 0,
        "runs": runs,
        "accuracy": statistics.fmean(accuracies),
        "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
    }
