#!/usr/bin/env bash
# Benchmark (not a test yet; issue #16 §4): coordinate descent against exhaustive search on a
# space shaped like Slapo's Fig. 10 (tests/tune/slapo_fig10.sched: batch size x checkpoint
# ratio, 91 points), each point evaluated by the simulator (gpt2 at 8 ranks of dgx-a100, seq
# 1024, a memory limit of 10 GiB per rank, or the first argument). Prints, per seed, the
# evaluations and whether the exhaustive optimum was found.
set -euo pipefail
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
args=(tests/tune/slapo_fig10.sched --model gpt2 --nproc 8 --seq 1024 --cluster dgx-a100 --memory-limit "${1:-10GiB}" --json)
best=$("$loom" tune "${args[@]}" --strategy exhaustive 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['best']['objective'])")
for seed in 0 1 2 3 4; do
  "$loom" tune "${args[@]}" --strategy coordinate-descent --seed "$seed" 2>/dev/null |
    /usr/bin/python3 -c "
import json, sys
d = json.load(sys.stdin)
found = abs(d['best']['objective'] - $best) < 1e-6 * $best
print(f\"seed $seed: {d['evaluations']} of {d['space_size']} points evaluated ({100 * d['evaluations'] / d['space_size']:.0f}%), \"
      f\"best {d['best']['objective']:.0f} tok/s/rank at {d['best']['knobs']}: {'the optimum' if found else 'not the optimum ($best)'}\")"
done
