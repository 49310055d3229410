#!/usr/bin/env bash
# Benchmark (not a test): what the memory-aware passes buy (issue #17 §5). In one invocation,
# gpt:50m trains 8 steps at world N (default 2) under data parallelism, ZeRO-3's base placement,
# ZeRO-3 with prefetch(budget=auto), with unshard(auto) too, and with bucket(size=auto) as well,
# each on the program planned from sizes (--replan-at 0, no re-plan), and
# the last also under the two-level loop (zero3_all_auto_replan: --replan-at 3, 12 steps, the
# passes planned again on the run's own measurements after steps 3 and 6, one group of passes
# more each round; its row is the median of steps 8-12, after the last round's warm-up, and
# `loom simulate --replanned` on zero3_all_auto's profile where it switched programs),
# every run under --memory-limit (default 600MiB); `loom simulate` prices each on a profile
# measured in the same invocation.
# The table gives the median step (steps 3-8), its ratio to ZeRO-3's and to data parallelism's,
# the measured peak against the limit, and the simulated step and peak against the measured.
# `--link` (as root, with iproute2 and tc) runs everything in a network namespace whose loopback
# is shaped to 1 Gbit/s, as benchmarks/sim_accuracy.sh does.
# KEEP=DIR keeps the profiles, simulations and metrics. `--accum N` accumulates N micro-batches a
# step (unshard(auto) then keeps what fits gathered across them); SCHEDULES="..." runs a subset
# (ddp and zero3 among them).
#   bash benchmarks/memory_passes.sh [WORLD] [--link] [--limit 600MiB] [--accum N]
set -euo pipefail
[ -z "${KEEP:-}" ] || KEEP=$(realpath -m "$KEEP")
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
world=2 link=loopback limit=600MiB accum=1
while [ $# -gt 0 ]; do
  case "$1" in
    --link) link=1gbit ;;
    --limit) limit=$2; shift ;;
    --accum) accum=$2; shift ;;
    *) world=$1 ;;
  esac
  shift
done
out=$(mktemp -d)
trap 'ip netns del loom_mem 2>/dev/null || true; [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out"/*.json* "$out"/*.sched "$out"/*.log "$KEEP"/; }; rm -rf "$out"' EXIT
LINK=$link NETNS=loom_mem source benchmarks/slow_link.sh
: > "$out/ddp.sched"
printf 'sch.zero(stage=3)\n' > "$out/zero3.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\n' > "$out/zero3_prefetch.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\nsch["h.*"].unshard(auto)\n' > "$out/zero3_prefetch_unshard.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\nsch["h.*"].unshard(auto)\nsch["h.*"].bucket(size=auto)\n' \
  > "$out/zero3_all_auto.sched"
schedules="${SCHEDULES:-ddp zero3 zero3_prefetch zero3_prefetch_unshard zero3_all_auto zero3_all_auto_replan}"
shape="--model gpt:50m --micro-batch 2 --seq 64 --accum $accum"
for needed in ddp zero3; do  # the baselines every row is compared with
  [[ " $schedules " == *" $needed "* ]] || { echo "error: SCHEDULES must include $needed (the table's baselines)" >&2; exit 1; }
done
[[ " $schedules " != *" zero3_all_auto_replan "* || " $schedules " == *" zero3_all_auto "* ]] ||
  { echo "error: SCHEDULES with zero3_all_auto_replan needs zero3_all_auto (its profile)" >&2; exit 1; }
for row in $schedules; do
  echo "memory_passes: $row" >&2
  sched=${row%_replan} run_flags="--steps 8 --replan-at 0" sim_flags=""  # the program planned from sizes throughout
  [ "$row" = "$sched" ] || { run_flags="--steps 12 --replan-at 3"; sim_flags="--replanned"; }
  [ "$row" != "$sched" ] || "${in_net[@]}" "$loom" profile "$out/$sched.sched" $shape --threads 1 --nproc "$world" --steps 4 \
    --memory-limit "$limit" --cache-dir "$out/cache" --out "$out/$sched.profile.json" > /dev/null
  "${in_net[@]}" "$loom" simulate "$out/$sched.sched" $shape --nproc "$world" --profile "$out/$sched.profile.json" \
    --memory-limit "$limit" $sim_flags --json > "$out/$row.sim.json"
  "${in_net[@]}" "$loom" run "$out/$sched.sched" $shape --threads 1 --nproc "$world" $run_flags --data synthetic \
    --memory-limit "$limit" --metrics "$out/$row.jsonl" > "$out/$row.log"
done
/usr/bin/python3 - "$out" "$world" "$link" "$limit" "$accum" $schedules <<'PY'
import json, statistics, sys
d, world, link, limit, accum, schedules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]
over = "loopback" if link == "loopback" else "a loopback shaped to 1 Gbit/s"
steps = f", {accum} micro-batches a step" if accum > 1 else ""
print(f"gpt:50m at world {world} over {over}, micro-batch 2 x 64 tokens{steps}, 1 thread per rank, --memory-limit {limit}")
step, peak, sim = {}, {}, {}
for s in schedules:
    rows = [json.loads(l) for l in open(f"{d}/{s}.jsonl")][7 if s.endswith("_replan") else 2:]
    step[s] = statistics.median(x["step_ms"] for x in rows)
    peak[s] = max(x["peak_mem_bytes"] for x in rows)
    sim[s] = json.load(open(f"{d}/{s}.sim.json"))
replan = "zero3_all_auto_replan"
switched = replan in schedules and any("every rank follows it" in l for l in open(f"{d}/{replan}.log"))
if replan in schedules and not switched:
    sim[replan] = sim["zero3_all_auto"]  # it ran the program it started with
units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
limit_bytes = next((float(limit[:-3]) * v for u, v in units.items() if limit.endswith(u)), None) or float(limit)
print(f"{'schedule':<24}{'step ms':>9}{'x zero3':>9}{'x ddp':>8}{'peak':>10}{'/limit':>8}{'sim ms':>9}{'sim/run':>9}{'sim peak':>10}{'sim/run':>9}")
for s in schedules:
    r = sim[s]
    print(f"{s:<24}{step[s]:>9.0f}{step['zero3'] / step[s]:>9.2f}{step['ddp'] / step[s]:>8.2f}{peak[s] / 2**20:>9.0f}M"
          f"{peak[s] / limit_bytes:>8.2f}{r['step_s'] * 1e3:>9.0f}{r['step_s'] * 1e3 / step[s]:>9.2f}"
          f"{r['peak_bytes'] / 2**20:>9.0f}M{r['peak_bytes'] / peak[s]:>9.2f}")
print("x zero3, x ddp: that schedule's speed-up over ZeRO-3's base placement and over data parallelism (above 1: faster)")
if replan in schedules:
    blocks = open(f"{d}/{replan}.log").read().split("loom run: re-plan after step ")[1:]
    at = [b.split(" ", 1)[0] for b in blocks]
    after = [b.split(" ", 1)[0] for b in blocks if "every rank follows it" in b]
    print(f"{replan}: " + (f"switched programs (re-planned after step{'s' if len(at) > 1 else ''} {' and '.join(at)}; every rank switched at the re-plan{'s' if len(after) > 1 else ''} after "
                            f"step{'s' if len(after) > 1 else ''} {' and '.join(after)}); its sim columns price the program the passes plan on zero3_all_auto's profile, every group timed (loom simulate --replanned)"
                           if switched else "kept its program (each re-plan was predicted no faster): its sim columns are zero3_all_auto's"))
PY
