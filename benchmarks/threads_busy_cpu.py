"""Training steps on a busy CPU: torch's default thread count against the one `mixer fit` now chooses
(`mixer_lightning.hardware.default_threads`: the usable CPUs less the cores other work keeps busy), in one
process, interleaved (`benchmarks.timing.compare`), the same model, weights and batches for both. Two models:
the quickstart's MLP-Mixer on 8×8 digits (batch 64) and Fig. 5's S-Mixer at Ω = 2^14, C = 25 (batch 128).
Prints img/s of each and the ratio; run it while other work runs (on an idle machine both are the same).
    PYTHONPATH=. python benchmarks/threads_busy_cpu.py [STEPS_PER_REPEAT] [REPEATS]
"""

from __future__ import annotations

import os
import sys

os.environ.pop("OMP_NUM_THREADS", None)  # torch's own default, as a user without the variable gets it

import torch  # noqa: E402

from mixer_lightning import hardware  # noqa: E402
from mixer_lightning.benchmarks.timing import compare  # noqa: E402
from mixer_lightning.models import MLPMixer, SMixer  # noqa: E402

MODELS = {
    "quickstart MLP-Mixer (digits 8×8, batch 64)": (
        lambda: MLPMixer(num_classes=10, image_size=8, in_chans=1, patch_size=2, tokens=16, channels=64, gamma=4,
                         num_blocks=4),  # fmt: skip
        (64, 1, 8, 8),
    ),
    "Fig. 5 S-Mixer, Ω = 2^14, C = 25 (CIFAR 32×32, batch 128)": (
        lambda: SMixer(num_classes=10, image_size=32, in_chans=3, patch_size=4, omega=2**14, channels=25,
                       num_blocks=8, skip_layer=True),  # fmt: skip
        (128, 3, 32, 32),
    ),
}


def main(steps: int = 5, repeats: int = 6) -> None:
    default = torch.get_num_threads()
    busy = hardware.busy_cores()
    ours = hardware.default_threads(1, busy)
    print(f"usable CPUs {hardware.usable_cpus()}, load {os.getloadavg()[0]:.1f}, busy at start {busy:.1f} cores")
    print(f"torch's default: {default} thread(s); ours: {ours}")
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        net = make()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, nesterov=True)
        x, y = torch.randn(shape), torch.randint(0, 10, (shape[0],))

        def train(threads: int):
            def run() -> None:
                torch.set_num_threads(threads)
                for _ in range(steps):
                    optimizer.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(net(x), y).backward()
                    optimizer.step()

            return run

        seconds = compare({"default": train(default), "ours": train(ours)}, repeats=repeats, warmup=1)
        rate = {arm: steps * shape[0] / s for arm, s in seconds.items()}
        print(f"{name}: torch default ({default} threads) {rate['default']:,.0f} img/s, "
              f"{1000 * seconds['default'] / steps:,.0f} ms/step; ours ({ours}) {rate['ours']:,.0f} img/s, "
              f"{1000 * seconds['ours'] / steps:,.0f} ms/step; ours/default {rate['ours'] / rate['default']:.1f}×")  # fmt: skip


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
