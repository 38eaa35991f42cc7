"""An independent S-Mixer on CIFAR-10, written from the paper alone (no mixer_lightning code): the
cross-check of docs/reproductions.md ("is a gap between our runs and another implementation
initialisation, seed noise or a defect?").

Hayase & Karakida 2024, App. A.2.2 (S-Mixer), A.2.4 (first block S0 → S with a SkipLayer), C.4
(P = 4, random crop + flip, Nesterov SGD momentum 0.9, batch 128, lr 0.02, cosine). Data in memory as
uint8, augmented per batch. Prints one JSON line with the final test error.

    python docs/reproductions/independent_s_mixer.py --channels 64 --epochs 8 --seed 0 --init torch
"""

import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def load_split(root: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    from datasets import load_dataset

    ds = load_dataset(root, split=split)
    images = np.stack([np.asarray(img.convert("RGB")) for img in ds["img"]])
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds["label"])


class SMixer(nn.Module):
    def __init__(
        self,
        channels: int,
        tokens: int,
        blocks: int = 8,
        patch: int = 4,
        size: int = 32,
        classes: int = 10,
        skip_always: bool = False,
    ):
        super().__init__()
        s0 = (size // patch) ** 2
        self.stem = nn.Conv2d(3, channels, patch, patch)
        self.token_norms = nn.ModuleList(nn.LayerNorm(channels) for _ in range(blocks))
        self.token_fcs = nn.ModuleList(nn.Linear(s0 if i == 0 else tokens, tokens) for i in range(blocks))
        self.channel_norms = nn.ModuleList(nn.LayerNorm(channels) for _ in range(blocks))
        self.channel_fcs = nn.ModuleList(nn.Linear(channels, channels) for _ in range(blocks))
        # A.2.4: U = LN(W̃X) + σ(W LN(X)) in the first block when S ≠ S0.
        self.skip = nn.Linear(s0, tokens) if (tokens != s0 or skip_always) else None
        self.skip_norm = nn.LayerNorm(channels) if self.skip is not None else None
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2)  # (B, C, S0): tokens on the last axis for token mixing
        for i in range(len(self.token_fcs)):
            y = F.gelu(self.token_fcs[i](self.token_norms[i](x.transpose(1, 2)).transpose(1, 2)))
            if i == 0 and self.skip is not None:
                x = self.skip_norm(self.skip(x).transpose(1, 2)).transpose(1, 2) + y
            else:
                x = x + y
            x = x.transpose(1, 2)  # (B, S, C)
            x = x + F.gelu(self.channel_fcs[i](self.channel_norms[i](x)))
            x = x.transpose(1, 2)
        return self.head(self.norm(x.transpose(1, 2)).mean(1))


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crop 32 from the 4-pixel zero-padded image, and a horizontal flip with p = 0.5."""
    n = images.shape[0]
    padded = F.pad(images, (4, 4, 4, 4))
    dx = torch.randint(0, 9, (n,), generator=generator)
    dy = torch.randint(0, 9, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(32))[:, None, :, None].expand(n, 3, 32, 40)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(32))[:, None, None, :].expand(n, 3, 32, 32)
    out = out.gather(3, cols)
    flip = torch.rand(n, generator=generator) < 0.5
    out[flip] = out[flip].flip(3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("MIXER_DATA_ROOT", "../shared/data") + "/cifar10")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--omega", type=float, default=2**18)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--init",
        choices=["torch", "paper"],
        default="torch",
        help="torch: PyTorch's default init (non-zero head); paper: N(0, 1/fan_in) weights, zero biases, zero head",
    )
    parser.add_argument("--skip_always", action="store_true", help="the SkipLayer even when S = S0 (A.2.4's sweeps)")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    c = args.channels
    s = round((math.sqrt(c * c + 8 * args.omega / c) - c) / 2)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1) * 255
    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "test")
    model = SMixer(c, s, skip_always=args.skip_always)
    if args.init == "paper":
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.normal_(module.weight, std=module.weight[0].numel() ** -0.5)
                nn.init.zeros_(module.bias)
        nn.init.zeros_(model.head.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True)
    steps = args.epochs * math.ceil(len(train_x) / 128)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    generator = torch.Generator().manual_seed(args.seed)
    start = time.time()
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=generator)
        for i in range(0, len(order), 128):
            batch = order[i : i + 128]
            x = (augment(train_x[batch], generator).float() - mean) / std
            loss = F.cross_entropy(model(x), train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(test_x), 1000):
            x = (test_x[i : i + 1000].float() - mean) / std
            correct += (model(x).argmax(1) == test_y[i : i + 1000]).sum().item()
    error = 100 * (1 - correct / len(test_x))
    print(
        json.dumps(
            {
                "channels": c,
                "tokens": s,
                "seed": args.seed,
                "init": args.init,
                "epochs": args.epochs,
                "skip_always": args.skip_always,
                "test_error": round(error, 2),
                "seconds": round(time.time() - start),
            }
        )
    )


if __name__ == "__main__":
    main()
