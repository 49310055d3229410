#!/usr/bin/env bash
# Runs every benchmark (after building). Usage: bash benchmarks/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
bench=build/benchmarks/loom_bench_parse_eval
echo "== parse/evaluate, baseline: glibc malloc"
"$bench"
tc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
if [ -n "$tc" ]; then
  echo "== parse/evaluate, tcmalloc (what the loom binary links)"
  LD_PRELOAD="$tc" "$bench"
fi
echo "== training: loom vs PyTorch DDP"
bash benchmarks/train_bench.sh
echo "== sharding strategies: DP, ZeRO-1/2/3 (world 2, loopback and an emulated 1 Gbit link)"
bash benchmarks/sharding_bench.sh
