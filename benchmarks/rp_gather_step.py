"""The RP S-Mixer's training step with its permutations J1, J2 as shipped (`index_select` on the last axis,
`mixer_lightning.models.pk`) against `torch.gather` with the index broadcast over the batch (the code
before 2026-11-30), beside the normal S-Mixer, in one process, interleaved
(`mixer_lightning.benchmarks.models.benchmark`). The two RP models hold the same weights and permutations;
their logits and every gradient are checked bit-identical first. Prints train img/s, the RP overhead of
each and the speed-up. Defaults: the Ω runs' 2^18 point (C = S = 64, 8 blocks, batch 128, one thread).
    PYTHONPATH=. python benchmarks/rp_gather_step.py [CHANNELS] [TOKENS] [OMEGA_LOG2] [REPEATS]
"""

from __future__ import annotations

import copy
import sys

import torch

from mixer_lightning.benchmarks.models import benchmark
from mixer_lightning.models import Permutation, SMixer


class _BroadcastGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, inverse):
        ctx.save_for_backward(inverse)
        return torch.gather(x, -1, index.expand(x.shape))

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return torch.gather(grad, -1, inverse.expand(grad.shape)), None, None


class BroadcastGatherPermutation(Permutation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BroadcastGather.apply(x, self.index, self.inverse)


def main(channels: int = 64, tokens: int = 64, omega_log2: int = 18, repeats: int = 15) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    kwargs = dict(num_classes=10, image_size=32, in_chans=3, patch_size=4, tokens=tokens, channels=channels,
                  omega=2**omega_log2, num_blocks=8, skip_layer=True, norm_eps=1e-5)  # fmt: skip
    rp = SMixer(permute=True, **kwargs)
    rp_gather = copy.deepcopy(rp)
    for module in rp_gather.modules():
        if isinstance(module, Permutation):
            module.__class__ = BroadcastGatherPermutation
    x = torch.randn(128, 3, 32, 32)
    grads = []
    for model in (rp, rp_gather):
        model.zero_grad()
        logits = model(x)
        logits.square().sum().backward()
        grads.append([logits.detach()] + [p.grad for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True)), "the two RP models differ"
    models = {"normal": SMixer(**kwargs), "rp_gather": rp_gather, "rp_shipped": rp}
    results = benchmark(models, batch_size=128, image_size=32, num_classes=10, repeats=repeats, count_flops=False)
    img_s = {name: r["train_img_s"] for name, r in results.items()}
    report = {
        "train_img_s": img_s,
        "rp_overhead_gather": img_s["normal"] / img_s["rp_gather"] - 1,
        "rp_overhead_shipped": img_s["normal"] / img_s["rp_shipped"] - 1,
        "shipped_over_gather": img_s["rp_shipped"] / img_s["rp_gather"],
    }
    print({k: round(v, 3) if isinstance(v, float) else {n: round(i) for n, i in v.items()} for k, v in report.items()})
    return report


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
