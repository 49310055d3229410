#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS: the parser and interpreter,
# seeded from every .sched in the repository, and the cluster and profile loaders, seeded from
# clusters/*.json and a profile (tests/fuzz/seeds/). Undefined behaviour stops the run as a crash
# does. Usage: bash scripts/fuzz.sh [SECONDS] (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_FUZZ=ON -DLOOM_WITH_TORCH=OFF -DLOOM_BUILD_TESTS=OFF >/dev/null
ninja -C build-fuzz loom_fuzz_parse_eval loom_fuzz_cost_files
mkdir -p fuzz-corpus
find examples stdlib_schedules tests -name '*.sched' -exec cp {} fuzz-corpus/ \;
build-fuzz/loom_fuzz_parse_eval fuzz-corpus -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=4096 -print_final_stats=1
mkdir -p fuzz-corpus-cost
cp clusters/*.json tests/fuzz/seeds/*.json fuzz-corpus-cost/
build-fuzz/loom_fuzz_cost_files fuzz-corpus-cost -max_total_time="$seconds" -max_len=8192 -timeout=10 \
  -rss_limit_mb=4096 -print_final_stats=1
