#!/usr/bin/env bash
# Benchmark (issue #16 §4): the simulator's choice against real runs on this machine. Profiles
# gpt:tiny at 2 ranks (ZeRO-3, seq 64, micro-batch 2), then `loom tune --evaluator sim+run` on
# examples/gpt_tuned.sched's 18 points: the simulator (on the profile) ranks them, real runs
# measure the best CONFIRM of them (default all 18, 8 steps each). Prints the regret (how much
# slower the simulator's choice ran than the measured best) and how well the two orders agree.
#   bash benchmarks/tune_sim_run.sh [CONFIRM]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(--model gpt:tiny --nproc 2 --seq 64 --micro-batch 2)
"$loom" profile stdlib_schedules/zero3.sched "${shape[@]}" --threads 1 --out "$tmp/profile.json" > /dev/null 2>&1
"$loom" tune examples/gpt_tuned.sched "${shape[@]}" --profile "$tmp/profile.json" --evaluator sim+run \
  --strategy exhaustive --confirm "${1:-18}" --steps 8 --json 2> "$tmp/log" > "$tmp/tune.json"
/usr/bin/python3 - "$tmp/tune.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = [t for t in d["confirmed"] if t["status"] == "ok"]
print(f"{len(d['confirmed'])} points run, {len(c)} ok; regret {100 * d['regret']:.1f}% "
      f"(the simulator's choice {d['confirmed'][0]['knobs']}, the measured best {d['best']['knobs']})")
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: -xs[i])
    r = [0] * len(xs)
    for k, i in enumerate(order): r[i] = k
    return r
p, m = ranks([t["predicted_objective"] for t in c]), ranks([t["objective"] for t in c])
n = len(c)
rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(p, m)) / (n * (n * n - 1)) if n > 1 else 1
print(f"Spearman rank correlation of predicted and measured tokens/s: {rho:.2f}")
for t in c:
    print(f"  {json.dumps(t['knobs'])}: predicted {t['predicted_objective']:.0f}, measured {t['objective']:.0f} tok/s/rank "
          f"({t['objective'] / t['predicted_objective']:.2f})")
PY
