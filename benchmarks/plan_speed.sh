#!/usr/bin/env bash
# How fast `loom plan` evaluates configurations (issue #15 asks 10,000 in under 10 s): llama-13b
# on lins-a800 grown to 8,192 and 12,288 ranks (`--nodes`: more nodes of its kind),
# every core, recomputation searched. Prints plans evaluated (simulated), seconds and
# milliseconds a plan; then how long `loom simulate` takes a llama3-70b step at 1,024 ranks (the
# issue asks under 1 s) beside `loom --version` alone (starting the process, loading LibTorch).
# `--memory-passes auto` times the plans whose sharded points plan DeepCompile's passes too.
# Usage: bash benchmarks/plan_speed.sh [--threads N] [--memory-passes auto]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
options=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads | --memory-passes) options+=("$1" "${2:?$1 takes a value}"); shift 2 ;;
    *) echo "plan_speed.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores; loom plan ${options[*]} $([[ " ${options[*]} " == *" --threads "* ]] || echo '(every core)')"
printf '%-8s %-8s %10s %10s %10s\n' ranks nodes plans seconds "ms/plan"
for nodes in 128 1024 1536; do
  ranks=$((nodes * 8))
  start=$(date +%s.%N)
  build/loom plan --model llama-13b --world "$ranks" --local-world 8 --seq 4096 --micro-batch 1 \
    --cluster lins-a800 --nodes "$nodes" --checkpoint auto --memory-limit 80GiB --json "${options[@]}" >"$work/plans.json" 2>/dev/null
  end=$(date +%s.%N)
  /usr/bin/python3 - "$ranks" "$nodes" "$start" "$end" "$work/plans.json" <<'PY'
import json, sys
ranks, nodes, start, end, path = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
plans = json.load(open(path))["evaluated"]
seconds = end - start
print(f"{ranks:<8} {nodes:<8} {plans:>10} {seconds:>10.2f} {1000 * seconds / plans:>10.3f}")
PY
done
timed() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo "plan_speed.sh: failed: $*" >&2; exit 1; }
  end=$(date +%s.%N)
  /usr/bin/python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$end"
}
for _ in 1 2 3; do
  simulated=$(timed build/loom simulate stdlib_schedules/zero3.sched --model llama3-70b --nproc 1024 --local-world 8 --seq 1024 \
    --cluster lins-a800)
  started=$(timed build/loom --version)
  echo "llama3-70b ZeRO-3 at 1,024 ranks simulated in $simulated s; loom --version alone $started s"
done
