#!/usr/bin/env bash
# The tables and plots of docs/reproductions/appendix.md (sections 1–7), from the runs of docs/reproductions/run_cpu.sh, with
# `mixer sweep report` (summary.csv, report.csv, PNGs) and `mixer cka`, into docs/reproductions/<item>/.
#   docs/reproductions/report.sh [ITEM ...]      items: fig5 fig7 d5 budget gap fig2 table1 fig2d (default: those with runs)
# fig2d: issue 58's Fig. 2(d) runs (run_cpu.sh paper_fig2d), whose report.csv findings.py grades by QUEUED["fig2d"]
set -euo pipefail
cd "$(dirname "$0")/../.."
MIXER=${MIXER:-.venv/bin/mixer}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${MIXER_DATA_ROOT:-../shared/data}/cifar10
OUT=${REPRO_DIR:-runs/repro}
DOCS=docs/reproductions

report() {  # report ITEM DIR...: the sweeps that exist, as one report
  local item=$1 dirs=()
  shift
  for dir in "$@"; do [ -f "$OUT/$dir/sweep.json" ] && dirs+=("$OUT/$dir"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  mkdir -p "$DOCS/$item"
  "$MIXER" sweep report "${dirs[@]}" --out "$DOCS/$item" >"$DOCS/$item/report.txt"
  echo "$DOCS/$item: $(ls "$DOCS/$item" | tr '\n' ' ')"
}

cka_pair() {  # cka_pair NAME SW_MLP_POINT: the CKA matrix of the Mixer (reference) and one SW-MLP run, seed 0
  local name=$1 point=$2 sweep="$OUT/fig2_cka"
  local mixer="$sweep/runs/reference/seed0/checkpoints/last.ckpt" sw="$sweep/runs/$point/seed0/checkpoints/last.ckpt"
  [ -f "$mixer" ] && [ -f "$sw" ] || return 0
  mkdir -p "$DOCS/fig2" && printf 'data:\n  init_args:\n    root: %s\n' "$DATA" >"$OUT/data_root.yaml"
  "$MIXER" cka --ckpt "$mixer" --ckpt "$sw" --config configs/cifar10_fig2_mixer.yaml --config configs/data/cifar10_hf.yaml \
    --config "$OUT/data_root.yaml" --plot "$DOCS/fig2/cka_${name}.png" --overwrite --json >"$DOCS/fig2/cka_${name}.json"
}

items=("$@")
[ ${#items[@]} -gt 0 ] || items=(fig5 fig7 d5 budget gap fig2 table1 fig2d)
for item in "${items[@]}"; do
  case "$item" in
    fig5) report fig5 fig5_s_mixer fig5_rp_s_mixer fig5_sw_mlp ;;
    fig7) report fig7 fig7_s_mixer fig7_rp_s_mixer ;;
    d5) report d5 d5_s_mixer ;;
    budget) report budget budget_5ep fig5_s_mixer budget_20ep ;;
    gap)
      report gap gap_ours
      if ls "$OUT"/independent/*.json >/dev/null 2>&1; then
        mkdir -p "$DOCS/gap" && cat "$OUT"/independent/*.json >"$DOCS/gap/independent.jsonl"
      fi
      ;;
    fig2)
      report fig2 fig2_cka
      for point in $(ls "$OUT/fig2_cka/runs" 2>/dev/null | grep -v reference); do cka_pair "$point" "$point"; done
      ;;
    table1) report table1 table1_ss8 table1_ss_w ;;
    fig2d) report fig2d paper_fig2d_kron paper_fig2d_monarch ;;
    *) echo "report.sh: unknown item '$item'" >&2; exit 2 ;;
  esac
done
