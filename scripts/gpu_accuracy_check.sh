#!/usr/bin/env bash
# The GPU checks of issues #15 and #17 in one call of the lent device machine (see
# docs/running.md): builds the CUDA path (scripts/build_cuda.sh DEPS_DIR), checks the memory
# limit a GPU run plans within by default, then runs benchmarks/sim_accuracy.sh --device cuda on
# gpt:50m (8 x 256 tokens; SCHEDULES_50M), on gpt:50m in fp32 (SCHEDULES_50M_FP32, default ddp
# and zero3) and on gpt:tiny (every schedule), as time allows.
# The profiles, simulations and metrics are packed into OUT/gpu_data.tgz, so that `loom
# simulate --profile` can replay them on any machine. Stops its work after SECONDS (default 540).
# Usage: bash scripts/gpu_accuracy_check.sh DEPS_DIR OUT [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
deps="$1" out="$2" budget="${3:-540}"
data=/tmp/gpu_data
mkdir -p "$out" "$data"
left() { local l=$((budget - SECONDS)); echo $((l > 1 ? l : 1)); }
pack() { tar czf "$out/gpu_data.tgz" --exclude=cache -C "$data" . ; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$data/gpu.txt"
if ! bash scripts/build_cuda.sh "$deps" > "$out/build.log" 2>&1; then tail -40 "$out/build.log"; exit 1; fi
echo "built in $SECONDS s"
export LD_LIBRARY_PATH=/tmp/loom-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LOOM=build-cuda/loom
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\nsch.offload("optimizer", budget=auto)\n' > "$data/auto.sched"
timeout 90 build-cuda/loom run "$data/auto.sched" --model gpt:tiny --nproc 2 --device cuda --backend gloo --steps 3 \
  --data synthetic > "$data/default_limit.log" 2>&1
echo "default limit run: exit $?"
grep -E "plan within|warning|loss" "$data/default_limit.log" | head -8
pack
mkdir -p "$data/run_tiny" "$data/run_50m" "$data/run_50m_fp32"
# TMPDIR: a benchmark stopped at the time limit leaves its files where pack() finds them.
SHAPE="--model gpt:50m --micro-batch 8 --seq 256" SCHEDULES="${SCHEDULES_50M:-ddp zero1 zero2 zero3 checkpoint_all zero3_prefetch zero3_bucket tp pp}" \
  KEEP="$data/50m" TMPDIR="$data/run_50m" timeout "$(left)" bash benchmarks/sim_accuracy.sh --device cuda > "$data/50m.txt" 2>&1
echo "gpt:50m: exit $? at $SECONDS s"
cat "$data/50m.txt"
pack
# The same in fp32 (no autocast): whether a schedule's peak error on the GPU is autocast's.
SHAPE="--model gpt:50m --micro-batch 8 --seq 256 --precision fp32" SCHEDULES="${SCHEDULES_50M_FP32:-ddp zero3}" \
  KEEP="$data/50m_fp32" TMPDIR="$data/run_50m_fp32" timeout "$(left)" bash benchmarks/sim_accuracy.sh --device cuda > "$data/50m_fp32.txt" 2>&1
echo "gpt:50m fp32: exit $? at $SECONDS s"
cat "$data/50m_fp32.txt"
pack
KEEP="$data/tiny" TMPDIR="$data/run_tiny" timeout "$(left)" bash benchmarks/sim_accuracy.sh --device cuda > "$data/tiny.txt" 2>&1
echo "gpt:tiny: exit $? at $SECONDS s"
cat "$data/tiny.txt"
pack
