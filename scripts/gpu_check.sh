#!/usr/bin/env bash
# The checks that need a GPU, for the lent device machine (see docs/running.md): builds the
# CUDA path (scripts/build_cuda.sh DEPS_DIR), then trains gpt:tiny at world 2 on one GPU
# (ranks share it over gloo; NCCL needs a GPU per rank) with data parallelism, ZeRO-1 and
# ZeRO-3 (fp32, with and without --accum 2, with fp16 reductions, and with h.0 recomputed), and gpt:50m (bf16)
# with DP and ZeRO-3, and prints each run's largest loss difference to DP and its peak memory
# against DP's. Also profiles ZeRO-3 on the GPU (loom profile).
# Usage: bash scripts/gpu_check.sh DEPS_DIR OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
deps="$1"
out="$2"
mkdir -p "$out"
[ -x build-cuda/loom ] || bash scripts/build_cuda.sh "$deps" > "$out/build.log" 2>&1
ninja -C build-cuda loom >> "$out/build.log" 2>&1
export LD_LIBRARY_PATH=/tmp/loom-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
loom=build-cuda/loom
train() {  # name model schedule extra-arguments...
  local name="$1" model="$2" schedule="$3"
  shift 3
  $loom run $schedule --model "$model" --nproc 2 --device cuda --backend gloo --metrics "$out/$name.jsonl" "$@" > "$out/$name.log" 2>&1 \
    || { echo "FAILED: $name"; tail -20 "$out/$name.log"; exit 1; }
}
tiny="--precision fp32 --steps 10"
train tiny-dp gpt:tiny "" $tiny
train tiny-zero1 gpt:tiny stdlib_schedules/zero1.sched $tiny
train tiny-zero3 gpt:tiny stdlib_schedules/zero3.sched $tiny
train tiny-zero3-fp16-reduce gpt:tiny stdlib_schedules/zero3.sched $tiny --reduce-dtype fp16
train tiny-dp-accum gpt:tiny "" $tiny --accum 2
train tiny-zero3-accum gpt:tiny stdlib_schedules/zero3.sched $tiny --accum 2
# A recomputation under ZeRO-3: on CUDA autograd recomputes on its own thread, which must run
# the forward's gathers (activation_checkpoint.cpp's hooks scope).
printf 'import "stdlib/zero3.sched"\nsch["h.0"].checkpoint()\n' > "$out/zero3_ckpt.sched"
train tiny-zero3-ckpt gpt:tiny "$out/zero3_ckpt.sched" $tiny
train 50m-dp gpt:50m "" --steps 6
train 50m-zero3 gpt:50m stdlib_schedules/zero3.sched --steps 6
$loom profile stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --device cuda --backend gloo --cache-dir "$out/cache" \
  --out "$out/profile.json" > "$out/profile.log" 2>&1 || { echo "FAILED: profile"; tail -20 "$out/profile.log"; exit 1; }
grep -E "^  total|^  params" "$out/profile.log"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rows(name): return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
for base, runs in [("tiny-dp", ["tiny-zero1", "tiny-zero3", "tiny-zero3-fp16-reduce", "tiny-zero3-ckpt"]), ("tiny-dp-accum", ["tiny-zero3-accum"]), ("50m-dp", ["50m-zero3"])]:
    b = rows(base)
    for r in runs:
        x = rows(r)
        diff = max(abs(p["loss"] - q["loss"]) for p, q in zip(b, x))
        print(f"{r:24s} vs {base:14s}: max loss difference {diff:.3g}, peak {x[-1]['peak_mem_bytes'] / 2**20:.1f} MiB "
              f"({x[-1]['peak_mem_bytes'] / b[-1]['peak_mem_bytes']:.2f}x), step {x[-1]['step_ms']:.1f} ms ({x[-1]['step_ms'] / b[-1]['step_ms']:.2f}x)")
PY
