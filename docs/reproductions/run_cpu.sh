#!/usr/bin/env bash
# Re-run the reproductions of docs/reproductions.md on real CIFAR-10 at the documented CPU budget
# (configs/budget/cpu.yaml: 10 epochs; everything else is the shipped config), with nothing but the
# project's commands: mixer sweep --emit, mixer sweep point (fit, then test), mixer sweep report, mixer cka.
#
#   docs/reproductions/run_cpu.sh [ITEM ...]      items: fig5 fig7 d5 table1 fig2 budget gap (default: all)
#
# At the paper's schedule (200 epochs, everything as shipped) at a smaller Ω, OMEGA_EXP (default 14, i.e. 2^14;
# configs/budget/omega_2p<EXP>.yaml), items paper_fig5 paper_fig7 paper_fig7_l20 paper_d5 paper_third_seed, and issue 58's
# paper_sec34 paper_s1 paper_fig2d (not in the default set; measured:
# an S-Mixer run 70 min at two lanes on an otherwise idle machine, so paper_fig5 at 2^14 (46 runs) ≈ 24 hours). OMEGA_EXP=12 paper_fig5 is the same grid shape at 2^12, OMEGA_EXP=16 paper_fig5 its three points,
# OMEGA_EXP=18 the paper's own Ω, its App. C.4 grid and S = C. POINTS=C64_ trains only the points whose name starts so.
#
# CIFAR-10 in the Hugging Face layout is read from $MIXER_DATA_ROOT/cifar10 (default: ../shared/data/cifar10,
# relative to the checkout). Runs go to $REPRO_DIR (default runs/repro), $LANES at a time (default 2), each
# on one thread (OMP_NUM_THREADS=1): as fast as one two-thread run at a time on an idle 2-core machine
# (benchmarks/sweep_lanes.sh: 1.02x), and a one-thread run does not stall when other work takes a core. Re-running continues where it stopped: `mixer sweep point` skips finished runs and resumes
# killed ones from their own last.ckpt; the paper_* items also skip the runs that the committed report
# (docs/reproductions/paper/fig5_runs.csv, $RECORDED) holds as finished, so on a new machine the same command
# trains only the runs still missing. EMIT_ONLY=1 writes the sweeps' configs and runs nothing (to run the
# points in another order or on other machines: each sweep's run_all.sh or slurm_array.sh). LIST_ONLY=1 emits
# them and prints the runs it would train ("SWEEP_DIR RUN" lines) instead: several invocations' lists fed to one
# `xargs -P 2 -L 1 mixer sweep point` keep both lanes busy from one item to the next (run one after the other,
# each invocation's last run trains alone while the other lane idles). Afterwards:
# docs/reproductions/report.sh writes the tables and plots.
set -euo pipefail
cd "$(dirname "$0")/../.."
MIXER=${MIXER:-.venv/bin/mixer}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${MIXER_DATA_ROOT:-../shared/data}/cifar10
OUT=${REPRO_DIR:-runs/repro}
LANES=${LANES:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MIXER_ARGS="--data.root $DATA --trainer.enable_progress_bar false ${MIXER_ARGS:-}"
# configs/data/cifar10_hf.yaml names the hub dataset; this overlay puts the local copy into every sweep's
# configs, which `mixer sweep report` reads again (the CKA of fig2), beside MIXER_ARGS for the fits and tests.
DATA_CONFIG=$OUT/data_root.yaml
mkdir -p "$OUT" && printf 'data:\n  init_args:\n    root: %s\n' "$DATA" >"$DATA_CONFIG"
BUDGET=(--config configs/budget/cpu.yaml --config configs/data/cifar10_hf.yaml --config "$DATA_CONFIG")
OMEGA_EXP=${OMEGA_EXP:-14}
NICE=${NICE:-}  # e.g. NICE="nice -n 10": the runs yield the CPU to interactive work
RECORDED=${RECORDED-docs/reproductions/paper/fig5_runs.csv}  # finished runs that `run` skips (paper_schedule.py's)
SEEDS=${SEEDS:-0,1}

emit() {  # emit DIR CONFIG [FLAGS...]: the sweep's configs (kept if they exist: a started sweep is never rewritten)
  local dir=$1 config=$2
  shift 2
  [ -f "$OUT/$dir/sweep.json" ] || "$MIXER" sweep --config "$config" "${BUDGET[@]}" "$@" --emit "$OUT/$dir" >/dev/null
}

run() {  # run DIR[:PREFIX]...: every run of the sweeps (with :PREFIX, of the points whose name starts with it),
  # $LANES at a time (none with EMIT_ONLY set), the first seed of every sweep's points before the second (so a
  # partial queue has whole curves), the sweeps interleaved; not the runs that $RECORDED (the committed report of
  # the paper-schedule sweeps) holds as finished, so that on a new (or renewed) machine the same command trains
  # only what the report lacks (RECORDED= trains them again)
  # LIST_ONLY=1: print the runs ("SWEEP_DIR RUN" lines, in this order) instead of training them
  [ -z "${EMIT_ONLY:-}" ] || return 0
  RECORDED=$RECORDED "$PYTHON" - "${@/#/$OUT/}" <<'PY' | if [ -n "${LIST_ONLY:-}" ]; then cat; else xargs -r -P "$LANES" -L 1 $NICE "$MIXER" sweep point; fi
import csv, json, os, re, sys
recorded, path = set(), os.environ["RECORDED"]
if path and os.path.isfile(path):
    with open(path, newline="") as file:
        rows = csv.DictReader(file)
        missing = {"sweep", "point", "seed", "final"} - set(rows.fieldnames or [])
        if missing:
            sys.exit(f"run_cpu.sh: RECORDED={path}: no column {', '.join(sorted(missing))}; give paper_schedule.py's "
                     "fig5_runs.csv, or RECORDED= to skip nothing")
        recorded = {(r["sweep"], r["point"], r["seed"]) for r in rows if r["final"]}
queue, skipped = [], 0
for order, argument in enumerate(sys.argv[1:]):
    folder, colon, prefix = argument.rpartition(":")
    if not colon or "/" in prefix:  # no :PREFIX (a colon inside the folder's path is not one)
        folder, prefix = argument, ""
    for index, run in enumerate(json.load(open(folder + "/sweep.json"))["runs"]):
        if not str(run.get("point", run["name"])).startswith(prefix):
            continue
        if (os.path.basename(folder), run.get("point"), str(run.get("seed"))) in recorded:
            skipped += 1
            continue
        seed = re.search(r"seed(\d+)$", run["name"])
        queue.append((int(seed.group(1)) if seed else 0, index, order, folder, run["name"]))
if skipped:
    print(f"run_cpu.sh: {skipped} runs finished in {path} are not trained again (RECORDED= to train them)", file=sys.stderr)
for *_, folder, name in sorted(queue):
    print(folder, name)
PY
}

fig5() {  # Fig. 5 (and Fig. 6's claim): S-Mixer and RP S-Mixer over Ω = 2^18's (C, S) pairs with S = C = 64; SW-MLP arm
  emit fig5_s_mixer configs/cifar10_fig5_s_mixer.yaml --omega '2**18' --channels 16,32,48,64,83,113,173 --seeds "$SEEDS"
  emit fig5_rp_s_mixer configs/cifar10_fig5_rp_s_mixer.yaml --omega '2**18' --channels 16,32,48,64,83,113,173 --seeds "$SEEDS"
  # The SW-MLPs as masked dense weights (impl: dense, the same function as sparse): a CPU's sparse kernels
  # run at ~1 GFLOP/s, so the dense GEMM of m² entries beats p·m² sparse ones at every Fig. 5 density.
  emit fig5_sw_mlp configs/cifar10_fig5_sw_mlp.yaml --omega '2**18' --seeds "$SEEDS" --grid model.net.init_args.impl=dense
  run fig5_s_mixer fig5_rp_s_mixer fig5_sw_mlp
}

fig7() {  # Fig. 7 at S = C = 64 (the paper's 128 is 8x the compute): depth 4, 8, 12, normal and RP
  local axes=(--grid model.net.init_args.num_blocks=4,8,12 --grid model.net.init_args.channels=64 --grid model.net.init_args.tokens=64)
  emit fig7_s_mixer configs/cifar10_fig7_s_mixer.yaml "${axes[@]}" --seeds "$SEEDS"
  emit fig7_rp_s_mixer configs/cifar10_fig7_rp_s_mixer.yaml "${axes[@]}" --seeds "$SEEDS"
  run fig7_s_mixer fig7_rp_s_mixer
}

d5() {  # App. D.5: a 4-block S-Mixer (S = C = 64) with one block RP, each position; none and all for reference
  emit d5_s_mixer configs/cifar10_d5_s_mixer.yaml --seeds "$SEEDS" --grid \
    'model.net.init_args.permute=[[true,false,false,false],[false,true,false,false],[false,false,true,false],[false,false,false,true],false,true]'
  run d5_s_mixer
}

table1() {  # Table 1 upper, CIFAR-10: Mixer-SS/8 vs Mixer-SS-W at the same Ω (AdamW, AutoAugment: the PIL path).
  # Each is ~256M multiply-adds per image forward (Table 1's FLOPs column), about 46 minutes per epoch on
  # one thread here, so the CPU budget is $TABLE1_EPOCHS (default 1) epoch(s), one seed; the cosine schedule
  # still runs to its end.
  local epochs=${TABLE1_EPOCHS:-1}
  emit table1_ss8 configs/cifar10_mixer_ss8.yaml --seeds "${TABLE1_SEEDS:-0}" --grid "trainer.max_epochs=$epochs"
  emit table1_ss_w configs/cifar10_mixer_ss_w.yaml --seeds "${TABLE1_SEEDS:-0}" --grid "trainer.max_epochs=$epochs"
  run table1_ss8 table1_ss_w
}

fig2() {  # Fig. 2(b, c) at S = C = 32: CKA between the Mixer and SW-MLPs (m = 1,024) of matching sparsity
  # (p = 2^-5 = 1/C) and 8x denser or sparser; the SW-MLPs as masked dense weights (impl: dense computes the
  # same function as sparse and is faster at this width on a CPU)
  emit fig2_cka configs/cifar10_fig2_sw_mlp.yaml --width 1024 --densities '2**-2,2**-5,2**-8' \
    --grid model.net.init_args.impl=dense --seeds 0 --cka_reference configs/cifar10_fig2_mixer.yaml \
    --cka_reference configs/budget/cpu.yaml --cka_reference configs/data/cifar10_hf.yaml \
    --cka_reference "$DATA_CONFIG" \
    --cka_reference configs/budget/fig2_s32.yaml
  run fig2_cka
}

budget() {  # how Fig. 6's claim moves with the budget: C = 16, 64, 173 at 5 and 20 epochs (10 is fig5's)
  for epochs in 5 20; do
    emit "budget_${epochs}ep" configs/cifar10_fig5_s_mixer.yaml --omega '2**18' --channels 16,64,173 --seeds "$SEEDS" \
      --grid "trainer.max_epochs=$epochs"
  done
  run budget_5ep budget_20ep
}

gap() {  # the independent S-Mixer (docs/reproductions/independent_s_mixer.py) beside ours, 8 epochs, 2 seeds:
  # ours (init normal, the paper's; xavier, the earlier default), the script as the issue ran it (PyTorch's
  # default init, no SkipLayer at S = S0) and as ours is built (N(0, 1/fan_in), zero head, SkipLayer always)
  emit gap_ours configs/cifar10_fig5_s_mixer.yaml --omega '2**18' --channels 64,173 --seeds "$SEEDS" \
    --grid trainer.max_epochs=8 --grid model.net.init_args.init=normal,xavier
  run gap_ours
  [ -z "${EMIT_ONLY:-}${LIST_ONLY:-}" ] || return 0  # the independent script has no sweep to emit or list
  mkdir -p "$OUT/independent"
  for variant in torch paper_skip; do
    local flags="--init torch"
    [ "$variant" = torch ] || flags="--init paper --skip_always"
    for c in 64 173; do
      for seed in ${SEEDS//,/ }; do
        out="$OUT/independent/C${c}_seed${seed}_${variant}.json"
        [ -s "$out" ] || echo "$PYTHON docs/reproductions/independent_s_mixer.py --data $DATA --channels $c --seed $seed --epochs 8 $flags > $out.tmp && mv $out.tmp $out"
      done
    done
  done | xargs -P "$LANES" -I{} sh -c "{}"
}

# At the paper's schedule: the config's 200 epochs, only Ω smaller (configs/budget/omega_2p$OMEGA_EXP.yaml).
SCHEDULE=(--config configs/data/cifar10_hf.yaml --config "$DATA_CONFIG")  # the config's own schedule, as shipped
PAPER=(--config "configs/budget/omega_2p$OMEGA_EXP.yaml" "${SCHEDULE[@]}")

paper_fig5() {  # Fig. 5 / Fig. 6's claim at 200 epochs at Ω = 2^OMEGA_EXP: S-Mixer and RP over C grids bracketing
  # C* = Ω^(1/3) with mirror pairs (S and C swapped) and S ≈ C, and the SW-MLP arm at the same Ω
  local -a BUDGET=("${PAPER[@]}")
  local channels
  case $OMEGA_EXP in
    14) channels=8,12,16,20,25,32,38,47,60 ;;  # S = 60, 47, 38, 32, 26, 20, 16, 12, 8; C* = 25.4
    12) channels=4,6,8,10,16,24,28,34,43 ;;    # S = 43, 34, 28, 24, 16, 10, 8, 6, 4; C* = 16
    16) channels=16,40,83 ;;                   # S = 83, 41, 16 (C = S and the two extremes); C* = 40.3
    18) channels=16,48,64,83,173 ;;            # S = 173, 83, 64, 48, 16: the paper's own Ω and its App. C.4 grid, with S = C; C* = 64
    *) echo "run_cpu.sh: no paper_fig5 grid for OMEGA_EXP=$OMEGA_EXP; choose 12, 14, 16 or 18" >&2; exit 2 ;;
  esac
  local omega="2**$OMEGA_EXP" name="paper_2p${OMEGA_EXP}_fig5"
  emit "${name}_s_mixer" configs/cifar10_fig5_s_mixer.yaml --omega "$omega" --channels "$channels" --seeds "$SEEDS"
  emit "${name}_rp_s_mixer" configs/cifar10_fig5_rp_s_mixer.yaml --omega "$omega" --channels "$channels" --seeds "$SEEDS"
  local sw=()
  if [ "$OMEGA_EXP" -lt 16 ]; then
    emit "${name}_sw_mlp" configs/cifar10_fig5_sw_mlp.yaml --omega "$omega" --seeds "$SEEDS" --grid model.net.init_args.impl=dense
    sw=("${name}_sw_mlp")
  fi
  run "${name}_s_mixer${POINTS:+:$POINTS}" "${name}_rp_s_mixer${POINTS:+:$POINTS}" "${sw[@]/%/${POINTS:+:$POINTS}}"
}

emit_paper_fig7() {  # emit_paper_fig7 [DEPTHS [SUFFIX]]: Fig. 7's sweeps at S = C = round(Ω^(1/3)) (25 at 2^14),
  # normal and RP, at depths DEPTHS (default 4,8,16), named paper_2p<EXP>_fig7_{s_mixer,rp_s_mixer}<SUFFIX>.
  # S and C are given, so not the Ω overlay (omega with tokens is refused): Ω = 25³ = 15625 ≈ 2^14 (0.95×)
  local -a BUDGET=("${SCHEDULE[@]}")
  local width depths=${1:-4,8,16} suffix=${2:-}
  width=$("$PYTHON" -c "print(round(2 ** ($OMEGA_EXP / 3)))")
  local axes=(--grid "model.net.init_args.num_blocks=$depths" --grid "model.net.init_args.channels=$width" --grid "model.net.init_args.tokens=$width")
  emit "paper_2p${OMEGA_EXP}_fig7_s_mixer$suffix" configs/cifar10_fig7_s_mixer.yaml "${axes[@]}" --seeds "$SEEDS"
  emit "paper_2p${OMEGA_EXP}_fig7_rp_s_mixer$suffix" configs/cifar10_fig7_rp_s_mixer.yaml "${axes[@]}" --seeds "$SEEDS"
}

paper_fig7() {  # Fig. 7 at 200 epochs: every depth (the L = 4 runs that paper_d5 trained are skipped as finished)
  emit_paper_fig7
  run "paper_2p${OMEGA_EXP}_fig7_s_mixer" "paper_2p${OMEGA_EXP}_fig7_rp_s_mixer"
}

paper_fig7_l20() {  # Fig. 7's deepest point, L = 20 (the paper's Fig. 7 runs L = 4 … 20; issue 24: "20 if it
  # fits"): two sweeps of their own beside paper_fig7's (a started sweep is never rewritten), which
  # paper_schedule.py reads as one more depth of Fig. 7, shown beside the verdict (its rule reads L = 4, 8, 16)
  emit_paper_fig7 20 _L20
  run "paper_2p${OMEGA_EXP}_fig7_s_mixer_L20" "paper_2p${OMEGA_EXP}_fig7_rp_s_mixer_L20"
}

paper_d5() {  # App. D.5 at 200 epochs: 4 blocks, S = C = round(Ω^(1/3)), one RP block per position; "none" and
  # "all" are paper_fig7's L = 4 runs (the same configs, not trained twice), which this item trains with its own
  # (skipped where paper_fig7 finished them), so that D.5's table is whole without the rest of Fig. 7
  emit_paper_fig7
  local -a BUDGET=("${SCHEDULE[@]}")  # S = C given, as in emit_paper_fig7
  local width
  width=$("$PYTHON" -c "print(round(2 ** ($OMEGA_EXP / 3)))")
  emit "paper_2p${OMEGA_EXP}_d5_s_mixer" configs/cifar10_d5_s_mixer.yaml --seeds "$SEEDS" \
    --grid "model.net.init_args.channels=$width" --grid "model.net.init_args.tokens=$width" --grid \
    'model.net.init_args.permute=[[true,false,false,false],[false,true,false,false],[false,false,true,false],[false,false,false,true]]'
  run "paper_2p${OMEGA_EXP}_fig7_s_mixer:num_blocks4_" "paper_2p${OMEGA_EXP}_fig7_rp_s_mixer:num_blocks4_" \
    "paper_2p${OMEGA_EXP}_d5_s_mixer"
}

paper_third_seed() {  # issue 24's third seed: each point that paper_schedule.py's third_seed_runs.csv names (two
  # points closer than twice their two seeds' spread), at seed $THIRD_SEED (default 2), one sweep per point
  # (paper_2p14_fig5_s_mixer_C25_S26_seed2: the list grows as seeds land, and a started sweep is never
  # rewritten), which paper_schedule.py reads back as one more seed of the family's point
  local list=${THIRD_SEED_RUNS:-docs/reproductions/paper/third_seed_runs.csv} seed=${THIRD_SEED:-2}
  if [ ! -f "$list" ]; then
    echo "run_cpu.sh: paper_third_seed reads $list, which is missing; write it with docs/reproductions/paper_schedule.py --out $(dirname "$list")" >&2
    exit 2
  fi
  local header fix="write it again with docs/reproductions/paper_schedule.py --out $(dirname "$list")"
  header=$(head -n 1 "$list")
  header=${header%$'\r'}  # csv's own line ends (\r\n), as paper_schedule.py writes them
  if [ "$header" != "omega_exp,family,point,C,p" ]; then
    echo "run_cpu.sh: paper_third_seed: $list:1: the header is '$header', not 'omega_exp,family,point,C,p'; $fix" >&2
    exit 2
  fi
  local -a BUDGET dirs=()
  local exponent family point channels density dir line=1
  while IFS=, read -r exponent family point channels density; do  # every row checked before anything is emitted
    line=$((line + 1)) density=${density%$'\r'}
    if [ ! -f "configs/budget/omega_2p$exponent.yaml" ] || [ ! -f "configs/cifar10_fig5_$family.yaml" ] \
      || ! [[ $point =~ ^[A-Za-z0-9_.]+$ ]] || { [ -z "$channels" ] && [ -z "$density" ]; }; then
      echo "run_cpu.sh: paper_third_seed: $list:$line: '$exponent,$family,$point,$channels,$density' is not a point" \
        "of configs/cifar10_fig5_{s_mixer,rp_s_mixer,sw_mlp}.yaml at an Ω of configs/budget/omega_2p*.yaml; $fix" >&2
      exit 2
    fi
  done < <(tail -n +2 "$list")
  while IFS=, read -r exponent family point channels density; do
    density=${density%$'\r'}
    BUDGET=(--config "configs/budget/omega_2p$exponent.yaml" --config configs/data/cifar10_hf.yaml --config "$DATA_CONFIG")
    dir="paper_2p${exponent}_fig5_${family}_${point}_seed${seed}"
    if [ -n "$channels" ]; then
      emit "$dir" "configs/cifar10_fig5_$family.yaml" --omega "2**$exponent" --channels "$channels" --seeds "$seed"
    else
      emit "$dir" "configs/cifar10_fig5_$family.yaml" --omega "2**$exponent" --densities "$density" --seeds "$seed" \
        --grid model.net.init_args.impl=dense
    fi
    dirs+=("$dir")
  done < <(tail -n +2 "$list")
  [ ${#dirs[@]} -eq 0 ] || run "${dirs[@]}"
}

paper_rp_regimes() {  # issue 61: does the RP S-Mixer's deficit hold in the paper's other regimes? At Ω = 2^14,
  # S ≈ C = (25, 26), 8 blocks, paired by seed with section 0's S-Mixer (or with each other), in this order:
  # (a) the output-only RP S-Mixer (J1 the normal grouping, J2 random: App. A.2.3 read literally), C.4's recipe;
  # (b) App. D.7 / Fig. S.6's recipe, Nesterov SGD at lr 0.1, 600 epochs, both families (the d7 configs at 2^14);
  # (c) below; each arm's seed 0 before its seed 1. Then the paper's own Fig. 5/6 grid: OMEGA_EXP=18 run_cpu.sh paper_fig5
  local -a BUDGET=("${PAPER[@]}")
  [ "$OMEGA_EXP" = 14 ] || { echo "run_cpu.sh: paper_rp_regimes is at OMEGA_EXP=14 (issue 61); got $OMEGA_EXP" >&2; exit 2; }
  emit rp_regime_lr0p1_s_mixer configs/cifar10_d7_s_mixer.yaml --omega '2**14' --channels 25 --seeds "$SEEDS"
  emit rp_regime_lr0p1_rp_s_mixer configs/cifar10_d7_rp_s_mixer.yaml --omega '2**14' --channels 25 --seeds "$SEEDS"
  local output=()
  # arm (a) is recorded (rp_regimes.py's runs.csv: a final error at each seed): a new machine does not train it again
  local finals
  finals=$(awk -F, -v seeds=",$SEEDS," '$1 == "output" && $6 != "" && index(seeds, "," $3 ",") {n++} END {print n + 0}' \
    docs/reproductions/rp_regimes/runs.csv 2>/dev/null || echo 0)
  if [ -f configs/cifar10_fig5_rp_s_mixer_output.yaml ] && [ "$finals" -lt "$(tr , '\n' <<<"$SEEDS" | wc -l)" ]; then
    emit rp_regime_output_rp_s_mixer configs/cifar10_fig5_rp_s_mixer_output.yaml --omega '2**14' --channels 25 --seeds "$SEEDS"
    output=(rp_regime_output_rp_s_mixer)
  fi
  # (c) Fig. S.8's recipe (AdamW lr 0.01 + AutoAugment, batch 256) on its model (MLP-Mixer, γ = 4, RP in both mixing
  # MLPs) at S = C = 32 (Ω = γ(C²S + CS²)/2 = 2^17) and 200 epochs: measured on one core on 2026-12-07, a 256-image
  # step costs 0.24 s of CPU at S = C = 16 and 0.36 s at 32 (AutoAugment's PIL path 0.19 s of it), so 600 epochs at
  # 16 would be ~8 hours and 200 at 32 ~4: the largest S = C near 4 hours, at 200 epochs (issue 61's rule).
  # Not the Ω overlay (S is given through Ω = 2^17 here); the config's own data, batch and optimiser. num_workers 0:
  # the images are augmented in the lane's own process (one core, as measured), and the augmentation's random
  # stream does not depend on the machine's core count (the default is one worker per core).
  printf 'data:\n  init_args:\n    num_workers: 0\n' >"$OUT/one_process.yaml"
  BUDGET=("${SCHEDULE[@]}" --config "$OUT/one_process.yaml")
  local aa=(--omega '2**17' --channels 32 --seeds "$SEEDS" --grid trainer.max_epochs=200)
  emit rp_regime_adamw_aa_mlp_mixer configs/cifar10_d7_mlp_mixer_adamw.yaml "${aa[@]}"
  emit rp_regime_adamw_aa_rp_mlp_mixer configs/cifar10_d7_rp_mlp_mixer_adamw.yaml "${aa[@]}"
  run "${output[@]}" rp_regime_lr0p1_s_mixer rp_regime_lr0p1_rp_s_mixer rp_regime_adamw_aa_mlp_mixer rp_regime_adamw_aa_rp_mlp_mixer
}

paper_sec34() {  # issue 58: Tolstikhin Sec. 3.4 on CIFAR-10 at the paper schedule: section 0's S-Mixer at Ω = 2^14,
  # (25, 26), on images whose 4×4 patches are shuffled and the pixels inside every patch permuted by one shared
  # permutation (patch_pixel), or whose pixels are permuted over the whole image (global), one permutation for every
  # image; the unshuffled arm is paper_2p14_fig5_s_mixer's C25_S26 (the same config), paired with it by seed, at
  # its three seeds (SEC34_SEEDS, default 0,1,2: an invariance needs the third to be read)
  local -a BUDGET=("${PAPER[@]}" --config docs/reproductions/sec34_permutation.yaml)
  [ "$OMEGA_EXP" = 14 ] || { echo "run_cpu.sh: paper_sec34 is at OMEGA_EXP=14 (issue 58); got $OMEGA_EXP" >&2; exit 2; }
  emit paper_2p14_sec34_s_mixer configs/cifar10_fig5_s_mixer.yaml --omega '2**14' --channels 25 --seeds "${SEC34_SEEDS:-0,1,2}" \
    --grid data.init_args.input_permutation=patch_pixel,global
  run paper_2p14_sec34_s_mixer
}

paper_s1() {  # issue 58: H&K D.1 / Fig. S.1 (left) at a reduced Ω = 2^12 (the paper: 2^16): the Fig. 5 SW-MLP
  # (8 blocks, γ = 1, masked dense weights) at p = 1, 1/4, 1/16, 1/64 (m = √(Ω/p) = 64 … 512), the paper schedule
  local -a BUDGET=("${SCHEDULE[@]}")
  emit paper_2p12_s1_sw_mlp configs/cifar10_s1_sw_mlp.yaml --omega '2**12' --densities 1,0.25,0.0625,0.015625 \
    --seeds "$SEEDS" --grid model.net.init_args.impl=dense
  run paper_2p12_s1_sw_mlp
}

paper_fig2d() {  # issue 58: H&K Fig. 2(d) on the embedded 8×8 digits (the stand-in for MNIST, which this machine
  # lacks): the shallow MLP with Kronecker and with Monarch weights, five seeds each (a minute a run)
  local -a BUDGET=()
  emit paper_fig2d_kron configs/digits_kron_mlp.yaml --seeds 0,1,2,3,4
  emit paper_fig2d_monarch configs/digits_monarch_mlp.yaml --seeds 0,1,2,3,4
  run paper_fig2d_kron paper_fig2d_monarch
}

items=("$@")
[ ${#items[@]} -gt 0 ] || items=(fig5 fig7 d5 gap budget fig2 table1)
for item in "${items[@]}"; do
  case "$item" in
    fig5 | fig7 | d5 | table1 | fig2 | budget | gap | paper_fig5 | paper_fig7 | paper_fig7_l20 | paper_d5 | paper_third_seed | paper_rp_regimes | paper_sec34 | paper_s1 | paper_fig2d) "$item" ;;
    *) echo "run_cpu.sh: unknown item '$item'; choose from fig5 fig7 d5 table1 fig2 budget gap paper_fig5 paper_fig7 paper_fig7_l20 paper_d5 paper_third_seed paper_rp_regimes paper_sec34 paper_s1 paper_fig2d" >&2; exit 2 ;;
  esac
done
