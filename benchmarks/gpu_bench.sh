#!/usr/bin/env bash
# GPU benchmark (not a test; needs a CUDA build, see scripts/build_cuda.sh): gpt2 (124M),
# 1 rank, 1024-token sequences, micro-batch 8: bf16 autocast against fp32 as the baseline,
# and checkpoint() of every block against none, in one invocation. Median of steps 6-30.
# Usage: bash benchmarks/gpu_bench.sh path/to/loom
set -euo pipefail
cd "$(dirname "$0")/.."
loom="${1:-build-cuda/loom}"
out=$(mktemp -d)
common="--model gpt2 --device cuda --data synthetic --steps 30 --seq 1024 --micro-batch 8 --warmup 5"
"$loom" run $common --precision fp32 --metrics "$out/fp32.jsonl" > /dev/null
"$loom" run $common --precision bf16 --metrics "$out/bf16.jsonl" > /dev/null
"$loom" run stdlib_schedules/checkpoint_all.sched $common --precision bf16 --metrics "$out/bf16_ckpt.jsonl" > /dev/null
python3 - "$out" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def summary(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")][5:]
    ms = statistics.median(r["step_ms"] for r in rows)
    tokens = 8 * 1024
    return {"ms": ms, "tps": tokens / (ms / 1000), "peak": max(r["peak_mem_bytes"] for r in rows)}
runs = {n: summary(n) for n in ("fp32", "bf16", "bf16_ckpt")}
n_params = 124_439_808
print("gpt2 (124M), 1 rank, micro-batch 8 x 1024 tokens (median of steps 6-30)")
print(f"{'run':<22}{'tokens/s':>11}{'step ms':>10}{'peak GPU mem':>14}{'model TFLOP/s':>15}")
for name, r in runs.items():
    tflops = 6 * n_params * r["tps"] / 1e12  # 6N per token, attention not counted
    print(f"{name:<22}{r['tps']:>11.0f}{r['ms']:>10.1f}{r['peak'] / 2**30:>12.2f} GiB{tflops:>15.1f}")
print(f"bf16 / fp32: tokens/s {runs['bf16']['tps'] / runs['fp32']['tps']:.2f}x, peak memory {runs['bf16']['peak'] / runs['fp32']['peak']:.2f}x")
print(f"checkpoint all / none (bf16): tokens/s {runs['bf16_ckpt']['tps'] / runs['bf16']['tps']:.2f}x, peak memory {runs['bf16_ckpt']['peak'] / runs['bf16']['peak']:.2f}x")
PY
rm -rf "$out"
