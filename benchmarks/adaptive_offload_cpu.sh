#!/usr/bin/env bash
# Benchmark (not a test): adaptive offloading on a CPU (issue #17), the table of docs/passes.md.
# gpt:tiny at world 2, ZeRO-3 without prefetch, micro-batch 2 x 32 tokens: for each
# --memory-limit, the fragments and bytes adaptive_offload moves (loom explain), the simulated
# peak (dgx-a100's cost model), and 8 real steps' peak and median tokens/s (steps 3-8), against
# ZeRO-3 alone and against every state on the host with a host step (budget=auto, no limit).
#   bash benchmarks/adaptive_offload_cpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"
printf 'sch.zero(stage=3)\n' > z3.sched
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=auto)\n' > ad.sched
shape="--model gpt:tiny --nproc 2 --micro-batch 2 --seq 32"
row() {  # NAME SCHED LIMIT-ARGS...
  local name=$1 sched=$2; shift 2
  local frag bytes sim
  frag=$($loom explain $sched $shape "$@" 2>/dev/null | grep -c " offload_states ")
  bytes=$($loom explain $sched $shape "$@" 2>/dev/null | grep " offload_states " | python3 -c "
import sys
u={'B':1,'KiB':2**10,'MiB':2**20}
t=0
for l in sys.stdin:
    w=l.split(); i=w.index('->'); t+=float(w[i-2])*u[w[i-1]]
print('%.2f MiB'%(t/2**20))")
  sim=$($loom simulate $sched $shape "$@" --cluster dgx-a100 --json 2>/dev/null | python3 -c "import json,sys; print('%.1f MiB'%(json.load(sys.stdin)['peak_bytes']/2**20))")
  # Every state on the host (offload_optimizer, a host step): not fragments; and a cluster plans
  # within its device's memory, so the simulator would price another program.
  if [ "$($loom explain $sched $shape "$@" 2>/dev/null | grep -c "offload_optimizer: changed")" -gt 0 ]; then frag=all bytes=all sim=; fi
  rm -f m.jsonl
  $loom run $sched $shape "$@" --steps 8 --replan-at 0 --threads 1 --data synthetic --metrics m.jsonl > /dev/null 2>&1
  python3 - "$name" "$frag" "$bytes" "$sim" <<'PY'
import json, sys, statistics
rows=[json.loads(l) for l in open('m.jsonl')]
peak=max(r['peak_mem_bytes'] for r in rows)/2**20
tok=statistics.median(r['tokens_per_s'] for r in rows[2:])
print(f"| {sys.argv[1]} | {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {peak:.1f} MiB | {tok:.0f} |")
PY
}
echo "| --memory-limit | fragments offloaded | bytes offloaded | simulated peak | measured peak | tokens/s |"
echo "| --- | --- | --- | --- | --- | --- |"
row "none (ZeRO-3 alone)" z3.sched
row "8 MiB" ad.sched --memory-limit 8MiB
row "7 MiB" ad.sched --memory-limit 7MiB
row "6 MiB" ad.sched --memory-limit 6MiB
row "none, budget=auto (every state on the host, host step)" ad.sched
