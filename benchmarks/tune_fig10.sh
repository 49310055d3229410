#!/usr/bin/env bash
# Benchmark (issue #16 §4): randomized coordinate descent against exhaustive search, each point
# evaluated by the simulator (gpt2 at 8 ranks of dgx-a100, seq 1024), on a space shaped like
# Slapo's Fig. 10 (tests/tune/slapo_fig10.sched: batch size x checkpoint ratio, 91 points) and on
# larger ones (tests/tune/fig10_zero.sched adds the ZeRO stage, 273 points;
# fig10_zero_prefetch.sched also prefetching, 546). Prints, per space and seed, the evaluations
# and whether the exhaustive optimum was found.
#   bash benchmarks/tune_fig10.sh [MEMORY_LIMIT] [SCHEDULE...]   (default: 10GiB, the three spaces)
set -euo pipefail
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
limit=${1:-10GiB}
shift || true
schedules=("$@")
[ ${#schedules[@]} -gt 0 ] || schedules=(tests/tune/slapo_fig10.sched tests/tune/fig10_zero.sched tests/tune/fig10_zero_prefetch.sched)
for schedule in "${schedules[@]}"; do
  args=("$schedule" --model gpt2 --nproc 8 --seq 1024 --cluster dgx-a100 --memory-limit "$limit" --json)
  best=$("$loom" tune "${args[@]}" --strategy exhaustive 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['best']['objective'])")
  echo "$schedule at $limit per rank: the exhaustive optimum is $best tok/s/rank"
  for seed in 0 1 2 3 4; do
    "$loom" tune "${args[@]}" --strategy coordinate-descent --seed "$seed" 2>/dev/null |
      /usr/bin/python3 -c "
import json, sys
d = json.load(sys.stdin)
found = abs(d['best']['objective'] - $best) < 1e-6 * $best
print(f\"  seed $seed: {d['evaluations']} of {d['space_size']} points evaluated ({100 * d['evaluations'] / d['space_size']:.1f}%), \"
      f\"best {d['best']['objective']:.0f} tok/s/rank at {d['best']['knobs']}: \"
      f\"{'the optimum' if found else 'not the optimum (%.2f%% below)' % (100 * (1 - d['best']['objective'] / $best))}\")"
  done
done
