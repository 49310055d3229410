#!/usr/bin/env bash
# The main job: installs dependencies, builds, and checks the standard schedules and
# examples against the reference models, printing their directive traces.
# (Until the runtime lands this is `loom check`; it becomes a real training run next.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
loom=build/loom
run() { echo "\$ loom check $*"; "$loom" check "$@" --print; echo; }
run stdlib_schedules/zero3.sched --model gpt:tiny --world 2
run stdlib_schedules/zero1.sched --model gpt2 --world 8
run stdlib_schedules/checkpoint_all.sched --model gpt2
run examples/gpt_tuned.sched --model gpt2 --world 8 --set micro_batch=2 --set ckpt_ratio=0.5
run examples/gpt_tp.sched --model gpt2 --world 4
run examples/llama_lins.sched --model llama-13b --world 1024 --local-world 8
