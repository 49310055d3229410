#!/usr/bin/env bash
# Benchmark (not a test): what DeepCompile's two-level loop buys (issue #17 §2). In one
# invocation, gpt:50m trains STEPS steps (default 16) at world 2 under ZeRO-3 with
# prefetch(budget=auto), unshard(auto) and bucket(size=auto) on every block, --memory-limit
# 600MiB, three ways: on the program planned without times (--replan-at 0: no re-plan), under
# the inner loop (--replan-at 3: after step 3 prefetching and bucketing planned from the
# measurements, after step 6 unsharding too, on the measurements of the program step 3 chose),
# and re-planned every 4 steps after step 3 to the end (--replan-every 4). The table
# gives each run's median step after its last re-plan's round (the last 4 steps of every run, so
# the three are compared on the same steps), its ratio to the run without a re-plan, the peak,
# and when the ranks switched.
# `--link` (as root, with iproute2 and tc) runs everything over a loopback shaped to 1 Gbit/s.
#   bash benchmarks/replan_loop.sh [--link] [--steps 16]
set -euo pipefail
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
link=loopback steps=16
while [ $# -gt 0 ]; do
  case $1 in
    --link) link=1gbit ;;
    --steps) steps=$2; shift ;;
    *) echo "usage: $0 [--link] [--steps N]" >&2; exit 2 ;;
  esac
  shift
done
out=$(mktemp -d)
trap 'ip netns del loom_replan 2>/dev/null || true; rm -rf "$out"' EXIT
LINK=$link NETNS=loom_replan source benchmarks/slow_link.sh
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\nsch["h.*"].unshard(auto)\nsch["h.*"].bucket(size=auto)\n' > "$out/auto.sched"
common=("$out/auto.sched" --model gpt:50m --micro-batch 2 --seq 64 --threads 1 --nproc 2 --steps "$steps" --data synthetic
        --memory-limit 600MiB)
declare -A flags=([none]="--replan-at 0" [rounds]="--replan-at 3" [every4]="--replan-at 3 --replan-every 4")
for way in none rounds every4; do
  echo "replan_loop: $way" >&2
  "${in_net[@]}" "$loom" run "${common[@]}" ${flags[$way]} --metrics "$out/$way.jsonl" > "$out/$way.log"
done
/usr/bin/python3 - "$out" "$link" "$steps" <<'PY'
import json, re, statistics, sys
d, link, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
over = "loopback" if link == "loopback" else "a loopback shaped to 1 Gbit/s"
print(f"gpt:50m at world 2 over {over}, ZeRO-3 + prefetch/unshard/bucket auto, --memory-limit 600MiB, {steps} steps")
median = {}
print(f"{'re-plan':<10}{'step ms':>9}{'x none':>8}{'peak':>9}  each re-plan: predicted step, current -> re-planned, and whether it switched")
for way in ("none", "rounds", "every4"):
    rows = [json.loads(l) for l in open(f"{d}/{way}.jsonl")][-4:]
    median[way] = statistics.median(r["step_ms"] for r in rows)
    peak = max(r["peak_mem_bytes"] for r in rows) / 2**20
    rounds = []
    for block in open(f"{d}/{way}.log").read().split("loom run: re-plan after step ")[1:]:
        step = block.split(" ", 1)[0]
        predicted = re.search(r"predicted \(simulated on the measurements\): step ([\d.]+) -> ([\d.]+) ms", block)
        if predicted:
            rounds.append(f"{step}: {predicted[1]} -> {predicted[2]} ms, " + ("switched" if "every rank follows it" in block else "kept"))
        else:
            rounds.append(f"{step}: same program, kept")
    print(f"{way:<10}{median[way]:>9.0f}{median['none'] / median[way]:>8.2f}{peak:>8.0f}M  " + ("; ".join(rounds) or "-"))
PY
