#!/usr/bin/env bash
# Benchmark (not a test): this checkout against an earlier commit, in one invocation. Builds
# REV into build-rev/REV (a git worktree beside this one, once), then runs
# benchmarks/train_bench.sh and benchmarks/sharding_bench.sh with each binary, one after the
# other, and prints their tables under each name. Used to check that a redesign is no slower
# (issue #14: against 4225791, the commit before it).
# Usage: bash benchmarks/against_commit.sh REV [--link]   (--link: also the emulated 1 Gbit/s link)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bash benchmarks/against_commit.sh REV [--link]}
link=--no-link
[ "${2:-}" = "--link" ] && link=
short=$(git rev-parse --short "$rev")
tree=$PWD/build-rev/$short
if [ ! -x "$tree/build/loom" ]; then
  echo "building $short into $tree (once)" >&2
  [ -d "$tree" ] || git worktree add -f "$tree" "$short" > /dev/null
  bash "$tree/scripts/build.sh" > "$tree.build.log" 2>&1 || { echo "error: building $short failed: $tree.build.log" >&2; exit 1; }
fi
head=$(git rev-parse --short HEAD)
for bench in train_bench sharding_bench; do
  for side in "$head (this checkout):$PWD/build/loom" "$short:$tree/build/loom"; do
    echo "== $bench, ${side%%:*}"
    # The earlier commit's scripts may not know LOOM: this checkout's scripts run both binaries.
    LOOM=${side#*:} bash "benchmarks/$bench.sh" $([ "$bench" = sharding_bench ] && echo $link) 2>/dev/null
  done
done
