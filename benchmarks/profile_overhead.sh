#!/usr/bin/env bash
# How much longer a profiled step is than a run's (docs/performance.md, issue #15 §5's `prof/run`):
# gpt:tiny under data parallelism at world 1 (no collectives, so only profiling can differ),
# PAIRS alternating pairs (default 8) of `loom profile` (16 steps, each its own cache) and `loom
# run` (32 steps). Prints each pair's profiled step (`measured_step_ms`) and run median (steps
# 3-32), then the mean difference with its standard error.
# Usage: bash benchmarks/profile_overhead.sh [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-8}
[ "$pairs" -ge 2 ] || { echo "profile_overhead.sh: PAIRS must be 2 or more (a standard error needs two)" >&2; exit 2; }
bash scripts/build.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape="--model gpt:tiny --micro-batch 4 --seq 128 --threads 1 --nproc 1"
for i in $(seq "$pairs"); do
  build/loom profile stdlib_schedules/ddp.sched $shape --steps 16 --cache-dir "$work/cache$i" --out "$work/p$i.json" \
    > "$work/log" 2>&1 || { tail -5 "$work/log" >&2; exit 1; }
  build/loom run stdlib_schedules/ddp.sched $shape --steps 32 --data synthetic --replan-at 0 --metrics "$work/m$i.jsonl" \
    > "$work/log" 2>&1 || { tail -5 "$work/log" >&2; exit 1; }
done
/usr/bin/python3 - "$work" "$pairs" <<'PY'
import json, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
print(f"{'pair':<6}{'profiled ms':>12}{'run ms':>10}")
differences, runs = [], []
for i in range(1, pairs + 1):
    profiled = json.load(open(f"{work}/p{i}.json"))["measured_step_ms"]
    run = statistics.median(json.loads(line)["step_ms"] for line in open(f"{work}/m{i}.jsonl") if json.loads(line)["step"] >= 3)
    print(f"{i:<6}{profiled:>12.2f}{run:>10.2f}")
    differences.append(profiled - run)
    runs.append(run)
mean, error = statistics.mean(differences), statistics.stdev(differences) / len(differences) ** 0.5
print(f"profiled - run: {mean:+.2f} +- {error:.2f} ms (standard error), {100 * mean / statistics.mean(runs):+.1f}% of the run's step")
PY
