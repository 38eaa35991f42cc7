#!/usr/bin/env bash
# Start-up time of the `mixer` command (issue 26), side by side with `python -c "import lightning.pytorch"`.
#
#   benchmarks/startup.sh [ROUNDS] [BEFORE]
#
# ROUNDS (default 5) rounds; in each, every command runs once, in an order rotated by one each round
# (so that no command always follows the same one), timed by /usr/bin/time: wall seconds and CPU
# seconds (user + sys). The 1-minute load average is read before each command. BEFORE, if given, is a
# folder holding another copy of the package (e.g. the code before a change:
#   mkdir -p /tmp/before && git archive <commit> mixer_lightning | tar -x -C /tmp/before
# ) whose commands run in the same rounds, interleaved with ours.
#
# Commands: `mixer fit --help`, a misspelt flag (`--trainer.max_epoch 3`), `--print_config` of
# configs/quickstart.yaml, run as the console script does (`python -m mixer_lightning.cli`).
#
# Prints one line per run (CSV) and a table: medians of wall and CPU over the rounds, and the median
# over rounds of each command's wall time divided by `import lightning.pytorch`'s in the same round
# (the ratio moves less with the machine's load than the seconds do).
set -euo pipefail

ROUNDS=${1:-5}
BEFORE=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
CONFIG=$ROOT/configs/quickstart.yaml
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

NAMES=(import_lightning fit_help misspelt_flag print_config)
COMMANDS=(
  "$PYTHON -c 'import lightning.pytorch'"
  "$PYTHON -m mixer_lightning.cli fit --help"
  "$PYTHON -m mixer_lightning.cli fit --config $CONFIG --trainer.max_epoch 3"
  "$PYTHON -m mixer_lightning.cli fit --config $CONFIG --print_config"
)
if [ -n "$BEFORE" ]; then
  for i in 1 2 3; do
    NAMES+=("before_${NAMES[$i]}")
    COMMANDS+=("PYTHONPATH=$BEFORE ${COMMANDS[$i]}")
  done
fi

# Warm the page cache once: these runs are not counted.
for i in 1 2 3; do eval "${COMMANDS[$i]}" >/dev/null 2>&1 || true; done

RESULTS=$WORK/runs.csv
echo "round,command,wall_s,cpu_s,load1" | tee "$RESULTS"
count=${#NAMES[@]}
for ((round = 0; round < ROUNDS; round++)); do
  for ((k = 0; k < count; k++)); do
    i=$(((k + round) % count))
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%e %U %S" -o "$WORK/time" bash -c "${COMMANDS[$i]}" >/dev/null 2>&1 || true
    read -r wall user sys < <(tail -n 1 "$WORK/time")  # (a failing command's status line comes first)
    echo "$round,${NAMES[$i]},$wall,$(awk "BEGIN {print $user + $sys}"),$load" | tee -a "$RESULTS"
  done
done

"$PYTHON" - "$RESULTS" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = list(dict.fromkeys(r["command"] for r in rows))
reference = {r["round"]: float(r["wall_s"]) for r in rows if r["command"] == "import_lightning"}
loads = [float(r["load1"]) for r in rows]
print(f"\n{len(reference)} rounds, load average (1 min) {min(loads):.1f}-{max(loads):.1f}, median {statistics.median(loads):.1f}")
print(f"{'command':<28} {'wall (median)':>14} {'CPU (median)':>13} {'wall / import lightning':>24}")
for name in names:
    mine = [r for r in rows if r["command"] == name]
    wall = statistics.median(float(r["wall_s"]) for r in mine)
    cpu = statistics.median(float(r["cpu_s"]) for r in mine)
    ratio = statistics.median(float(r["wall_s"]) / reference[r["round"]] for r in mine)
    print(f"{name:<28} {wall:>12.2f} s {cpu:>11.2f} s {ratio:>24.2f}")
EOF
