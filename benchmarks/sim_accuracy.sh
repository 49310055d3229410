#!/usr/bin/env bash
# Benchmark (not a test): how far `loom simulate --profile` is from the measured step (issue
# #15 §5). For each schedule, in one invocation: `loom profile` measures gpt:tiny's ops and
# collectives at world N (default 2; `bash benchmarks/sim_accuracy.sh 4` for 4) on this machine,
# `loom simulate` replays the step on that profile, and `loom run` trains 12 steps; the table
# gives the simulated and the measured median step (steps 3-12) and peak tensor memory, their
# ratios (and `rep`: the same profile simulated with `--representative`, one rank per stage at
# each op's slowest rank's time, where `sim` replays each rank at its own), and whether the
# simulator ranks the schedules in the measured order. With `--link` (as root, with iproute2
# and tc) every command runs in a network namespace whose loopback is shaped to 1 Gbit/s (TBF),
# which both directions share. `tp` splits every block's four
# Linears over 2 ranks (Megatron-LM's pairs), `pp` runs the blocks in two pipeline stages.
# With `--device cuda` (a CUDA build: LOOM=build-cuda/loom) the ranks share one GPU over gloo
# (NCCL needs a GPU per rank) and train in the CUDA default, bf16 autocast; SHAPE replaces
# the model and shape (default "--model gpt:tiny --micro-batch 4 --seq 128"), SCHEDULES the
# schedules (default all nine). KEEP=DIR keeps the profiles, simulations and metrics there.
set -euo pipefail
[ -z "${KEEP:-}" ] || KEEP=$(realpath -m "$KEEP")
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
world=2 link=loopback device=cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --link) link=1gbit ;;
    --device) device=${2:?--device takes cpu or cuda}; shift ;;
    *) world=$1 ;;
  esac
  shift
done
on_device="--device $device" profile_steps=6
# A GPU shared by two ranks over gloo varies more between steps: more of them measured.
[ "$device" = cpu ] || on_device="$on_device --backend gloo" profile_steps=12

out=$(mktemp -d)
trap 'ip netns del loom_sim 2>/dev/null || true; [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out"/*.json* "$KEEP"/; }; rm -rf "$out"' EXIT
LINK=$link NETNS=loom_sim source benchmarks/slow_link.sh
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\n' > "$out/zero3_prefetch.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].bucket()\n' > "$out/zero3_bucket.sched"
cat > "$out/tp.sched" <<'SCHED'
sch.mesh(tp=2)
for b in sch["h.*"] {
    b["attn.c_attn"].shard(["weight", "bias"], axis=0).sync(mode="bwd_post", op="all_reduce")
    b["attn.c_proj"].shard("weight", axis=1).sync(mode="fwd_post", op="all_reduce")
    b["mlp.c_fc"].shard(["weight", "bias"], axis=0).sync(mode="bwd_post", op="all_reduce")
    b["mlp.c_proj"].shard("weight", axis=1).sync(mode="fwd_post", op="all_reduce")
}
SCHED
printf 'sch.mesh(pp=2)\nsch["h.1"].pipeline_split()\n' > "$out/pp.sched"
schedules="${SCHEDULES:-ddp zero1 zero2 zero3 checkpoint_all zero3_prefetch zero3_bucket tp pp}"
shape="${SHAPE:---model gpt:tiny --micro-batch 4 --seq 128}"
run="$shape $on_device --threads 1 --nproc $world --steps 12 --data synthetic"
for sched in $schedules; do
  f=stdlib_schedules/$sched.sched
  [ -f "$f" ] || f=$out/$sched.sched
  "${in_net[@]}" "$loom" profile "$f" $shape $on_device --threads 1 --nproc "$world" --steps "$profile_steps" --cache-dir "$out/cache" --out "$out/$sched.profile.json" > /dev/null
  "${in_net[@]}" "$loom" simulate "$f" $shape --nproc "$world" --profile "$out/$sched.profile.json" --json > "$out/$sched.sim.json"
  "${in_net[@]}" "$loom" simulate "$f" $shape --nproc "$world" --profile "$out/$sched.profile.json" --json --representative \
    > "$out/$sched.rep.json"
  "${in_net[@]}" "$loom" run "$f" $run --metrics "$out/$sched.jsonl" > /dev/null
  echo "$sched: profiled, simulated and run" >&2
done
python3=/usr/bin/python3
[ -x $python3 ] || python3=python3
$python3 - "$out" "$world" "$link" "$device" "$shape" $schedules <<'PY'
import json, sys
d, world, link, device, shape, schedules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
over = "loopback" if link == "loopback" else "a loopback shaped to 1 Gbit/s"
on = "" if device == "cpu" else f" on {device} (ranks share it over gloo)"
print(f"{shape} at world {world} over {over}{on}, 1 thread per rank")
print(f"{'schedule':<16}{'sim ms':>9}{'run ms':>9}{'sim/run':>9}{'rep/run':>9}{'sim peak':>11}{'run peak':>11}{'sim/run':>9}")
errors, rep_errors, memory_errors, sim, run = [], [], [], {}, {}
for s in schedules:
    r = json.load(open(f"{d}/{s}.sim.json"))
    rep = json.load(open(f"{d}/{s}.rep.json"))["step_s"]
    rows = [json.loads(l) for l in open(f"{d}/{s}.jsonl")][2:]
    ms = sorted(x["step_ms"] for x in rows)[len(rows) // 2]
    peak = max(x["peak_mem_bytes"] for x in rows)  # rank 0's, so the first stage's simulated peak
    sim_peak = r["stage_peak_bytes"][0]
    t, m = r["step_s"] * 1e3 / ms, sim_peak / peak
    errors.append(abs(t - 1))
    rep_errors.append(abs(rep * 1e3 / ms - 1))
    memory_errors.append(abs(m - 1))
    sim[s], run[s] = r["step_s"], ms
    print(f"{s:<16}{r['step_s'] * 1e3:>9.1f}{ms:>9.1f}{t:>9.2f}{rep * 1e3 / ms:>9.2f}{sim_peak / 2**20:>10.1f}M{peak / 2**20:>10.1f}M{m:>9.2f}")
print(f"mean |sim/run - 1|: step time {sum(errors) / len(errors):.2f}, peak memory {sum(memory_errors) / len(memory_errors):.2f}")
print(f"rep: the same profile simulated by one rank per stage at each op's slowest rank's time (--representative): "
      f"mean {sum(rep_errors) / len(rep_errors):.2f}")
print("fastest first, simulated:", " ".join(sorted(schedules, key=sim.get)))
print("fastest first, measured: ", " ".join(sorted(schedules, key=run.get)))
PY
