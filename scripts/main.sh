#!/usr/bin/env bash
# The main job: installs dependencies, builds, turns the project's own docs into a
# token file, and trains gpt:tiny under a standard schedule (every block checkpointed)
# on 2 local ranks, printing progress; then reports how far the loss fell and plots the run
# (loom report: loss, tokens/s, peak memory and each rank's step-time shares, as SVG).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
loom=build/loom
"$loom" data prepare docs/*.md README.md --out build/corpus.bin
"$loom" run stdlib_schedules/checkpoint_all.sched --model gpt:tiny --nproc 2 --data build/corpus.bin \
  --steps 400 --seq 128 --micro-batch 8 --lr 3e-3 --warmup 20 \
  --metrics build/main_metrics.jsonl --trace build/main_trace.json --save build/main_checkpoint
python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("build/main_metrics.jsonl")]
first = sum(r["loss"] for r in rows[:10]) / 10
last = sum(r["loss"] for r in rows[-10:]) / 10
print(f"loss: {first:.3f} (mean of the first 10 steps) -> {last:.3f} (mean of the last 10); checkpoint in build/main_checkpoint")
PY
"$loom" report build/main_metrics.jsonl --trace build/main_trace.json --out build/main_report
echo "plots of the run: build/main_report/*.svg (rsvg-convert FILE.svg -o FILE.png for a PNG)"
