"""The datasets that need no layout of their own: scikit-learn's embedded digits, and the torchvision
on-disk formats (CIFAR-10, CIFAR-100, STL-10, MNIST)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from mixer_lightning.data.sources.base import DatasetInfo, DatasetSource
from mixer_lightning.errors import ConfigError


class Digits(DatasetSource):
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes, grey levels 0-16): no
    download, the quickstart's dataset. A fixed permutation (seed 0, not the training seed) puts 20% in
    the test split."""

    name = "digits"
    info = DatasetInfo(num_classes=10, image_size=8, in_chans=1, mean=(0.3053,), std=(0.3760,), natural=False)
    in_memory = True
    test_fraction = 0.2

    def load(self, split: str) -> Dataset:
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.from_numpy(np.random.default_rng(0).permutation(len(labels)))
        num_test = round(self.test_fraction * len(labels))
        index = order[:num_test] if split == "test" else order[num_test:]
        return TensorDataset(images[index], labels[index])


class TorchvisionSource(DatasetSource):
    """A dataset in torchvision's on-disk format under `root` (downloaded there when `download`)."""

    how_to_get: ClassVar[str] = ""

    def _open(self, split: str) -> Dataset:
        raise NotImplementedError

    def load(self, split: str) -> Dataset:
        try:
            return self._open(split)
        except (RuntimeError, OSError) as error:  # torchvision's "Dataset not found or corrupted", or no network
            fix = self.how_to_get if self.download else f"set data.download: true, or {self.how_to_get}"
            raise ConfigError("data.root", f"no {self.name} data under {self.root!r} ({error})", fix) from None


class CIFAR10(TorchvisionSource):
    name = "cifar10"
    # The class names in label order (torchvision's batches.meta; uoft-cs/cifar10's ClassLabel): how a
    # copy in the hub's layout is recognised (`huggingface.hub_statistics`).
    known_classes: ClassVar[tuple[str, ...]] = (
        "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
    )  # fmt: skip
    info = DatasetInfo(
        num_classes=10, image_size=32, in_chans=3, mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616)
    )
    how_to_get = (
        "put torchvision's cifar-10-batches-py under data.root, or read a Hugging Face copy: "
        "--config configs/data/cifar10_hf.yaml --data.root PATH"
    )

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import CIFAR10 as TV

        return TV(self.root, train=split == "train", download=self.download)


class CIFAR100(TorchvisionSource):
    """CIFAR-100 with its 100 fine labels (the papers' CIFAR-100)."""

    name = "cifar100"
    # The 100 fine class names in label order (meta's fine_label_names; uoft-cs/cifar100's `fine_label`).
    known_classes: ClassVar[tuple[str, ...]] = tuple(
        """apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel
        can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur
        dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion
        lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree
        pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea
        seal shark shrew skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table
        tank telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf woman
        worm""".split()
    )
    info = DatasetInfo(
        num_classes=100, image_size=32, in_chans=3, mean=(0.5071, 0.4865, 0.4409), std=(0.2673, 0.2564, 0.2762)
    )
    how_to_get = (
        "put torchvision's cifar-100-python under data.root, or read a Hugging Face copy: "
        "--data.dataset hf --data.root PATH"
    )

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import CIFAR100 as TV

        return TV(self.root, train=split == "train", download=self.download)


class STL10(TorchvisionSource):
    """STL-10's labelled splits: 5,000 training and 8,000 test images of 96×96 (the unlabelled 100,000
    are not used; Hayase & Karakida resize to 32, or 90 in App. D.6: ``data.image_size``)."""

    name = "stl10"
    info = DatasetInfo(
        num_classes=10, image_size=96, in_chans=3, mean=(0.4467, 0.4398, 0.4066), std=(0.2603, 0.2566, 0.2713)
    )
    how_to_get = "put torchvision's stl10_binary under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import STL10 as TV

        return TV(self.root, split="train" if split == "train" else "test", download=self.download)


class MNIST(TorchvisionSource):
    """MNIST, 28×28 grey digits (Hayase & Karakida Fig. 2d's shallow Kronecker/Monarch MLPs)."""

    name = "mnist"
    info = DatasetInfo(num_classes=10, image_size=28, in_chans=1, mean=(0.1307,), std=(0.3081,), natural=False)
    how_to_get = "put torchvision's MNIST/raw under data.root"

    def _open(self, split: str) -> Dataset:
        from torchvision.datasets import MNIST as TV

        return TV(self.root, train=split == "train", download=self.download)
