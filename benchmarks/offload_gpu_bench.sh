#!/usr/bin/env bash
# GPU benchmark (not a test; needs a CUDA build, see scripts/build_cuda.sh): adaptive
# offloading (offload("optimizer", budget=auto) under --memory-limit; deepcompile.txt §4.4,
# Algorithm 2) against offloading every optimizer state with a host step (budget=0), under a
# limit that ZeRO-3 alone does not fit, in one invocation. World 2 on one GPU: the ranks share
# it over gloo (NCCL needs a GPU per rank). First ZeRO-3 runs without offloading; its peak P
# and the optimizer states' bytes S per rank (from the offload-all run's log) set the limit
# M = P - S/2. Median step of steps 3..STEPS; the loss of every step is compared with ZeRO-3's.
# Usage: bash benchmarks/offload_gpu_bench.sh [path/to/loom] [MODEL] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
loom="${1:-build-cuda/loom}"
model="${2:-gpt:50m}"
steps="${3:-12}"
out=$(mktemp -d)
common="--model $model --nproc 2 --device cuda --backend gloo --data synthetic --steps $steps --seq 256 --micro-batch 16 --replan-at 0"
printf 'sch.zero(stage=3)\n' > "$out/zero3.sched"
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=auto)\n' > "$out/adaptive.sched"
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=0)\n' > "$out/all.sched"
run() {  # name extra-arguments...
  local name="$1"
  shift
  "$loom" run "$out/$name.sched" $common --metrics "$out/$name.jsonl" "$@" > "$out/$name.log" 2>&1 \
    || { echo "FAILED: $name"; tail -20 "$out/$name.log"; exit 1; }
}
run zero3
run all
peak=$(python3 -c "import json,sys; print(max(json.loads(l)['peak_mem_bytes'] for l in open(sys.argv[1])))" "$out/zero3.jsonl")
elements=$(grep -o '([0-9]* elements per rank)' "$out/all.log" | grep -o '[0-9]*')
limit=$((peak - elements * 8 / 2))  # AdamW's two fp32 states per element
LOOM_DEBUG=1 run adaptive --memory-limit "$limit"
grep -E "pass adaptive_offload|offload" "$out/adaptive.log" | head -5 || true
python3 - "$out" "$peak" "$limit" "$elements" <<'PY'
import json, statistics, sys
d, peak, limit, elements = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MiB = 2**20
def rows(name): return [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
def median_ms(r):
    return statistics.median(x["step_ms"] for x in r[2:])
base = rows("zero3")
print(f"ZeRO-3 peak P = {peak / MiB:.0f} MiB, optimizer states S = {elements * 8 / MiB:.0f} MiB per rank, limit M = P - S/2 = {limit / MiB:.0f} MiB")
print(f"{'run':<34}{'step ms':>9}{'peak MiB':>10}{'max |loss - ZeRO-3|':>22}")
for name, label in [("zero3", "ZeRO-3 (no limit)"), ("adaptive", "adaptive offload (budget=auto)"), ("all", "offload every state (budget=0)")]:
    r = rows(name)
    diff = max(abs(p["loss"] - q["loss"]) for p, q in zip(base, r))
    print(f"{label:<34}{median_ms(r):>9.1f}{max(x['peak_mem_bytes'] for x in r) / MiB:>10.0f}{diff:>22.3g}")
print(f"offload every state / adaptive: step {median_ms(rows('all')) / median_ms(rows('adaptive')):.2f}x")
print(f"adaptive / ZeRO-3 without a limit: step {median_ms(rows('adaptive')) / median_ms(base):.2f}x")
PY
rm -rf "$out"
