#!/usr/bin/env bash
# The same model trained through the PIL and the tensor data path reaches the same accuracy (issue 18):
# the Fig. 5 config (S-Mixer, Ω = 2^18, C = S = 64) on real CIFAR-10, a short budget (a fixed 10,000-image
# training subset, 5 epochs, validation on the 10,000 test images), seeds 0 and 1 through each path.
# Usage: benchmarks/pipeline_equivalence.sh [OUT_DIR]   (CIFAR-10 from $MIXER_DATA_ROOT/cifar10; ~30 min on 2 CPU cores)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
data="${MIXER_DATA_ROOT:-$here/../shared/data}/cifar10"
out="${1:-runs/pipeline_equivalence}"
mixer="${MIXER:-$here/.venv/bin/mixer}"
for seed in 0 1; do
  for pipeline in tensor pil; do
    start=$(date +%s)
    "$mixer" fit --config "$here/configs/cifar10_fig5_s_mixer.yaml" --model.net.channels 64 \
      --data.dataset hf --data.root "$data" --data.train_subset 10000 --data.pipeline "$pipeline" \
      --seed_everything "$seed" --trainer.max_epochs 5 --trainer.enable_progress_bar false \
      --trainer.logger.init_args.save_dir "$out" --trainer.logger.init_args.name "${pipeline}_seed${seed}" \
      > "$out.${pipeline}_seed${seed}.log" 2>&1 || { echo "failed: see $out.${pipeline}_seed${seed}.log"; exit 1; }
    echo "${pipeline} seed ${seed}: $(( $(date +%s) - start )) s"
  done
done
"$here/.venv/bin/python" - "$out" <<'PY'
import json, sys, torch
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for run in sorted(out.glob("*_seed*/version_*")):
    summary = json.loads((run / "fit_summary.json").read_text())
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    rows[run.parent.name] = (summary["val/acc1"], summary["val/loss"], {k: v for k, v in state.items() if k.startswith("net.")})
print("| run | test acc1 | test loss | weights equal to the other path's, same seed |")
print("|---|---|---|---|")
for name, (acc, loss, net) in rows.items():
    pipeline, seed = name.split("_")
    other = rows.get(f"{'pil' if pipeline == 'tensor' else 'tensor'}_{seed}")
    same = other is not None and all(torch.equal(net[k], other[2][k]) for k in net)
    print(f"| {pipeline}, {seed} | {acc:.4f} | {loss:.4f} | {same} |")
PY
