#!/usr/bin/env bash
# Benchmark (not a test): how far `loom simulate --profile` is from the measured step (issue
# #15 §5). For each schedule, in one invocation: `loom profile` measures gpt:tiny's ops and
# collectives at world 2 on this machine, `loom simulate` replays the step on that profile, and
# `loom run` trains 12 steps; the table gives the simulated and the measured median step (steps
# 3-12) and peak tensor memory, and their ratios. Loopback only so far (the emulated 1 Gbit link
# and tensor/pipeline parallelism, which `loom profile` refuses, are not covered yet).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${LOOM:-build/loom}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
shape="--model gpt:tiny --micro-batch 4 --seq 128"
run="$shape --threads 1 --nproc 2 --steps 12 --data synthetic"
for sched in ddp zero1 zero2 zero3; do
  f=stdlib_schedules/$sched.sched
  "$loom" profile "$f" $shape --threads 1 --nproc 2 --steps 6 --cache-dir "$out/cache" --out "$out/$sched.profile.json" > /dev/null
  "$loom" simulate "$f" $shape --nproc 2 --profile "$out/$sched.profile.json" --json > "$out/$sched.sim.json"
  "$loom" run "$f" $run --metrics "$out/$sched.jsonl" > /dev/null
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
print("gpt:tiny at world 2 over loopback, micro-batch 4 x 128 tokens, 1 thread per rank")
print(f"{'schedule':<10}{'sim ms':>9}{'run ms':>9}{'sim/run':>9}{'sim peak':>11}{'run peak':>11}{'sim/run':>9}")
errors = []
for s in ["ddp", "zero1", "zero2", "zero3"]:
    sim = json.load(open(f"{d}/{s}.sim.json"))
    rows = [json.loads(l) for l in open(f"{d}/{s}.jsonl")][2:]
    ms = sorted(r["step_ms"] for r in rows)[len(rows) // 2]
    peak = max(r["peak_mem_bytes"] for r in rows)
    t, m = sim["step_s"] * 1e3 / ms, sim["peak_bytes"] / peak
    errors.append(abs(t - 1))
    print(f"{s:<10}{sim['step_s'] * 1e3:>9.1f}{ms:>9.1f}{t:>9.2f}{sim['peak_bytes'] / 2**20:>10.1f}M{peak / 2**20:>10.1f}M{m:>9.2f}")
print(f"mean |sim/run - 1| of the step time: {sum(errors) / len(errors):.2f}")
PY
