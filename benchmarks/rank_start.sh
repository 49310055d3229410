#!/usr/bin/env bash
# How long short runs take with the ranks forked from the launcher (the default) against the
# ranks exec'd as new processes (LOOM_NO_FORK=1, as before 2026-12-02), in one invocation:
# `loom run` of gpt:tiny for one step at world 2 and 4, `loom verify` at world 2, and `loom tune`
# of the three ZeRO stages by real runs of 3 steps at world 2 (its trials forked from the tuner
# too since 2026-12-02's second change). Prints the
# median wall seconds of each over REPEAT runs (default 3) and exec / fork.
# Usage: bash benchmarks/rank_start.sh [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=${1:-3}
bash scripts/build.sh >/dev/null
loom=build/loom
small="--model gpt:tiny --seq 32 --micro-batch 2 --threads 1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'sch.zero(stage=3)\nsch.blocks().prefetch()\n' > "$work/zero3.sched"
printf 'let stage = tune("stage", [1, 2, 3])\nsch.zero(stage=stage)\n' > "$work/stages.sched"

# The median wall seconds of `repeat` runs of the command, under LOOM_NO_FORK=$1.
median_seconds() {
  local exec_ranks=$1
  shift
  local times=()
  for _ in $(seq "$repeat"); do
    local start end
    start=$(date +%s.%N)
    LOOM_NO_FORK=$exec_ranks "$@" > "$work/out" 2>&1 || { echo "rank_start.sh: failed: $*" >&2; tail -5 "$work/out" >&2; exit 1; }
    end=$(date +%s.%N)
    times+=("$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

echo "machine: $(nproc) cores; median of $repeat runs each, wall seconds"
printf '%-40s %8s %8s %12s\n' command forked "exec'd" "exec'd/forked"
row() {
  local name=$1
  shift
  local forked execd
  forked=$(median_seconds 0 "$@")
  execd=$(median_seconds 1 "$@")
  printf '%-40s %8.2f %8.2f %12.2f\n' "$name" "$forked" "$execd" "$(awk -v e="$execd" -v f="$forked" 'BEGIN {print e / f}')"
}
row "loom run, 1 step, world 2" "$loom" run "$work/zero3.sched" $small --data synthetic --steps 1 --nproc 2
row "loom run, 1 step, world 4" "$loom" run "$work/zero3.sched" $small --data synthetic --steps 1 --nproc 4
row "loom verify, world 2" "$loom" verify "$work/zero3.sched" $small --nproc 2
row "loom tune, 3 trials of 3 steps, world 2" "$loom" tune "$work/stages.sched" --model gpt:tiny --seq 32 --micro-batch 2 --nproc 2 --evaluator run \
  --strategy exhaustive --steps 3
