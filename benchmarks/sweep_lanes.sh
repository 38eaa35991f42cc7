#!/usr/bin/env bash
# Sweep points side by side or one after the other, on real CIFAR-10: `mixer sweep --run DIR --parallel 2`
# (two processes, one thread each) against `mixer sweep --run DIR` (one process at a time, two threads),
# the same two points of the Fig. 5 S-Mixer (Ω = 2^18, C = 48 and 83: mirror points, the same FLOPs),
# each trained for $BATCHES batches (default 300), evaluated on 4. Prints the wall time of each
# (process start, data, training, test, report: what a user waits for) and the ratio.
#   MIXER_DATA_ROOT=../shared/data benchmarks/sweep_lanes.sh          (run it on an otherwise idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
MIXER=${MIXER:-.venv/bin/mixer}
DATA=${MIXER_DATA_ROOT:-../shared/data}/cifar10
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export MIXER_ARGS="--data.root $DATA --trainer.max_epochs 1 --trainer.limit_train_batches ${BATCHES:-300} \
--trainer.limit_val_batches 0 --trainer.limit_test_batches 4 --trainer.enable_progress_bar false"
sweep=(sweep --config configs/cifar10_fig5_s_mixer.yaml --config configs/data/cifar10_hf.yaml --omega '2**18'
  --channels 48,83)
unset OMP_NUM_THREADS
"$MIXER" "${sweep[@]}" --run "$OUT/warmup" --parallel 2 >/dev/null 2>&1  # the decoded-tensor cache, page cache
start=$(date +%s.%N)
OMP_NUM_THREADS=$(nproc) "$MIXER" "${sweep[@]}" --run "$OUT/one_by_one" >"$OUT/one_by_one.log" 2>&1
middle=$(date +%s.%N)
"$MIXER" "${sweep[@]}" --run "$OUT/side_by_side" --parallel 2 >"$OUT/side_by_side.log" 2>&1
end=$(date +%s.%N)
python3 - "$start" "$middle" "$end" "$(nproc)" <<'PY'
import sys
start, middle, end, cpus = map(float, sys.argv[1:])
one, two = middle - start, end - middle
print(f"one after the other ({int(cpus)} threads each): {one:.1f} s")
print(f"side by side (--parallel 2, {max(1, int(cpus) // 2)} thread(s) each): {two:.1f} s")
print(f"speedup of side by side: {one / two:.2f}x")
PY
