#!/usr/bin/env bash
# Benchmark (not a test): data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3 (base placement, no
# prefetch), and ZeRO-3 with every block bucketed (bucket()) or with TAGC on the feed-forward
# up-projections (compress(ratio=10)), at world 2 on CPU, for gpt:tiny and gpt:50m, in one invocation: median step time
# and peak tensor memory per rank as ratios to data parallelism. First over loopback, then
# (as root, with iproute2) with the two ranks in two network namespaces joined by a veth pair
# shaped to 1 Gbit/s (ENVIRONMENT.md). The executed timeline of each run is saved under
# build/bench-traces/ (open in https://ui.perfetto.dev).
# Usage: bash benchmarks/sharding_bench.sh [--no-link]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${LOOM:-$PWD/build/loom}  # LOOM: another binary (benchmarks/against_commit.sh)
out=$(mktemp -d)
traces=$PWD/build/bench-traces
mkdir -p "$traces"
trap 'ip netns del loom_bench_a 2>/dev/null || true; ip netns del loom_bench_b 2>/dev/null || true; rm -rf "$out"' EXIT
echo 'sch.zero(stage=1)' > "$out/zero1.sched"
echo 'sch.zero(stage=2)' > "$out/zero2.sched"
echo 'sch.zero(stage=3)' > "$out/zero3.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].bucket()\n' > "$out/zero3_bucket.sched"
printf 'sch.zero(stage=3)\nsch["h.*.mlp.c_fc"].compress(ratio=10)\n' > "$out/zero3_tagc.sched"
: > "$out/ddp.sched"

# run NETWORK MODEL STRATEGY ARGS...: one training run, metrics in $out/NETWORK-MODEL-STRATEGY.jsonl
run() {
  local net=$1 model=$2 strategy=$3; shift 3
  local tag="$net-${model/:/_}-$strategy"
  local common=(run "$out/$strategy.sched" --model "$model" --data synthetic --threads 1 "$@")
  if [ "$net" = loopback ]; then
    "$loom" "${common[@]}" --nproc 2 --metrics "$out/$tag.jsonl" --trace "$traces/$tag.json" > /dev/null
  else
    # gloo must use the veth ends: the host name resolves to 127.0.0.1 in both namespaces.
    local link=(--nnodes 2 --nproc 1 --master-addr 10.77.0.1 --master-port 29611 --timeout 120)
    GLOO_SOCKET_IFNAME=loom_vb ip netns exec loom_bench_b "$loom" "${common[@]}" "${link[@]}" --node-rank 1 > /dev/null &
    GLOO_SOCKET_IFNAME=loom_va ip netns exec loom_bench_a "$loom" "${common[@]}" "${link[@]}" --node-rank 0 \
      --metrics "$out/$tag.jsonl" > /dev/null
    wait
  fi
}

sweep() {
  local net=$1
  for s in ddp zero1 zero2 zero3 zero3_bucket zero3_tagc; do
    echo "  $net: gpt:tiny $s" >&2
    run "$net" gpt:tiny "$s" --steps 12 --micro-batch 4 --seq 128
    echo "  $net: gpt:50m $s" >&2
    run "$net" gpt:50m "$s" --steps 3 --micro-batch 2 --seq 64
  done
}

nets=(loopback)
sweep loopback
if [ "${1:-}" != "--no-link" ] && [ "$(id -u)" = 0 ] && command -v ip > /dev/null && command -v tc > /dev/null; then
  ip netns add loom_bench_a; ip netns add loom_bench_b
  ip link add loom_va type veth peer name loom_vb
  ip link set loom_va netns loom_bench_a; ip link set loom_vb netns loom_bench_b
  ip -n loom_bench_a addr add 10.77.0.1/24 dev loom_va; ip -n loom_bench_b addr add 10.77.0.2/24 dev loom_vb
  for ns in a b; do
    dev=loom_v$ns
    ip -n loom_bench_$ns link set $dev up; ip -n loom_bench_$ns link set lo up
    ip netns exec loom_bench_$ns tc qdisc add dev $dev root tbf rate 1gbit burst 1mb latency 50ms
  done
  sweep 1gbit
  nets+=(1gbit)
else
  echo "(skipping the 1 Gbit link: needs root, iproute2 and tc, or --no-link was given)"
fi

/usr/bin/python3 - "$out" "${nets[@]}" <<'PY'
import json, statistics, sys
d, nets = sys.argv[1], sys.argv[2:]
def stats(tag):
    rows = [json.loads(l) for l in open(f"{d}/{tag}.jsonl")][1:]  # step 1 allocates optimizer states
    ms = statistics.median(r["step_ms"] for r in rows)
    return ms, max(r["peak_mem_bytes"] for r in rows)
print("world 2, CPU, 1 thread per rank; step time: median after step 1; memory: peak tensor bytes of rank 0 per step")
for net in nets:
    for model, shape in (("gpt:tiny", "micro-batch 4 x 128 tokens"), ("gpt:50m", "micro-batch 2 x 64 tokens")):
        print(f"\n{model} ({shape}), {'loopback' if net == 'loopback' else 'across an emulated 1 Gbit/s link'}")
        print(f"{'strategy':<14}{'step ms':>10}{'x DP':>8}{'peak MiB':>11}{'x DP':>8}")
        base = stats(f"{net}-{model.replace(':', '_')}-ddp")
        for s in ("ddp", "zero1", "zero2", "zero3", "zero3_bucket", "zero3_tagc"):
            ms, peak = stats(f"{net}-{model.replace(':', '_')}-{s}")
            print(f"{s:<14}{ms:>10.1f}{ms / base[0]:>8.2f}{peak / 2**20:>11.1f}{peak / base[1]:>8.2f}")
PY
echo "traces: $traces"
