#!/usr/bin/env bash
# Benchmark (not a test): how far `loom simulate --profile` is from the measured step (issue
# #15 §5). For each schedule, in one invocation: `loom profile` measures gpt:tiny's ops and
# collectives at world N (default 2; `bash benchmarks/sim_accuracy.sh 4` for 4) on this machine,
# `loom simulate` replays the step on that profile, and `loom run` trains 32 steps (12 on a GPU;
# `--profile-steps N`, `--run-steps N` to choose); the table
# gives the simulated and the measured median step (steps 3 on) and peak tensor memory, their
# ratios (and `rep`: the same profile simulated with `--representative`, one rank per stage at
# each op's slowest rank's time, where `sim` replays each rank at its own), and whether the
# simulator ranks the schedules in the measured order (each pair out of it, and whether the runs'
# steps tell the two apart: a two-sided Mann-Whitney U test at 5%). With `--link` (as root, with iproute2
# and tc) every command runs in a network namespace whose loopback is shaped to 1 Gbit/s (TBF),
# which both directions share. `tp` splits every block's four
# Linears over 2 ranks (Megatron-LM's pairs), `pp` runs the blocks in two pipeline stages.
# With `--device cuda` (a CUDA build: LOOM=build-cuda/loom) the ranks share one GPU over gloo
# (NCCL needs a GPU per rank) and train in the CUDA default, bf16 autocast; SHAPE replaces
# the model and shape (default "--model gpt:tiny --micro-batch 4 --seq 128"), SCHEDULES the
# schedules (default all nine). KEEP=DIR keeps the profiles, simulations and metrics there.
# `here`: this machine as a cluster (`loom simulate --save-cluster`), derived once from the
# first schedule's profile (data parallelism by default), as `loom plan --cluster` would price
# every schedule for it: each schedule simulated on it, within the limit its run planned within
# (the profile's memory_limit_bytes: none on a CPU, 90% of a GPU).
# `prof/run`: what the profiled steps took (the profile's measured_step_ms, the profiler's own
# work in them included) over the run's median; `sim/prof`: the simulated step over that, how
# closely the simulator replays the step it was given, apart from what profiling costs the step
# and from the profile's and the run's differences.
# `--repeat N` runs the whole invocation (profile, simulate, run) N times, a table each, then
# the spread: each invocation's mean error and each schedule's sim/run in every one, since on
# this 2-core machine one invocation's profile and runs can sit 10-20% from the next one's.
#   bash benchmarks/sim_accuracy.sh [WORLD] [--link] [--device cuda] [--repeat N] [--profile-steps N] [--run-steps N]
set -euo pipefail
[ -z "${KEEP:-}" ] || KEEP=$(realpath -m "$KEEP")
cd "$(dirname "$0")/.."
loom=$PWD/${LOOM:-build/loom}
world=2 link=loopback device=cpu repeat=1 run_steps="" profile_steps=""
while [ $# -gt 0 ]; do
  case "$1" in
    --link) link=1gbit ;;
    --run-steps) run_steps=${2:?--run-steps takes how many steps each run trains}; shift ;;
    --profile-steps) profile_steps=${2:?--profile-steps takes how many steps each profile measures}; shift ;;
    --device) device=${2:?--device takes cpu or cuda}; shift ;;
    --repeat) repeat=${2:?--repeat takes how many invocations}; shift ;;
    *) world=$1 ;;
  esac
  shift
done
# On this 2-core machine one step of gpt:tiny varies by 20-30% within a run, so a median of 10
# steps moves by about 8% from one process to the next: the CPU default measures 16 profiled
# steps (each op's mean over them) and runs 32 (the median of 30). A GPU shared by two ranks
# over gloo measures 12 and runs 12, which its device time allows.
on_device="--device $device" default_profile_steps=16 default_run_steps=32
[ "$device" = cpu ] || on_device="$on_device --backend gloo" default_profile_steps=12 default_run_steps=12
: "${profile_steps:=$default_profile_steps}" "${run_steps:=$default_run_steps}"
# The medians are of the run's steps 3 on: two warm-up steps, then at least one.
[ "$run_steps" -ge 3 ] || { echo "sim_accuracy.sh: --run-steps must be 3 or more (steps 1-2 are warm-up)" >&2; exit 2; }

python3=/usr/bin/python3
[ -x $python3 ] || python3=python3
out=$(mktemp -d)
trap 'ip netns del loom_sim 2>/dev/null || true; [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp -r "$out"/r* "$KEEP"/; }; rm -rf "$out"' EXIT
LINK=$link NETNS=loom_sim source benchmarks/slow_link.sh
printf 'sch.zero(stage=3)\nsch["h.*"].prefetch(budget=auto)\n' > "$out/zero3_prefetch.sched"
printf 'sch.zero(stage=3)\nsch["h.*"].bucket()\n' > "$out/zero3_bucket.sched"
cp examples/gpt_tp2.sched "$out/tp.sched"
printf 'sch.mesh(pp=2)\nsch["h.1"].pipeline_split()\n' > "$out/pp.sched"
schedules="${SCHEDULES:-ddp zero1 zero2 zero3 checkpoint_all zero3_prefetch zero3_bucket tp pp}"
shape="${SHAPE:---model gpt:tiny --micro-batch 4 --seq 128}"
# --replan-at 0: the run keeps the program that was profiled and simulated (no two-level loop).
run="$shape $on_device --threads 1 --nproc $world --steps $run_steps --data synthetic --replan-at 0"
for rep in $(seq 1 "$repeat"); do
  r=$out/r$rep
  mkdir -p "$r"
  for sched in $schedules; do
    f=stdlib_schedules/$sched.sched
    [ -f "$f" ] || f=$out/$sched.sched
    "${in_net[@]}" "$loom" profile "$f" $shape $on_device --threads 1 --nproc "$world" --steps "$profile_steps" --cache-dir "$r/cache" --out "$r/$sched.profile.json" > /dev/null
    "${in_net[@]}" "$loom" simulate "$f" $shape --nproc "$world" --profile "$r/$sched.profile.json" --json > "$r/$sched.sim.json"
    "${in_net[@]}" "$loom" simulate "$f" $shape --nproc "$world" --profile "$r/$sched.profile.json" --json --representative \
      > "$r/$sched.rep.json"
    # The first schedule's profile is this machine; each schedule is priced on it.
    [ -f "$r/here.json" ] || "$loom" simulate "$f" $shape --nproc "$world" --profile "$r/$sched.profile.json" --save-cluster "$r/here.json" > /dev/null
    # Within the limit the run planned within (the profile's: none on a CPU, 90% of a GPU), so the
    # program priced is the one run.
    limit=$($python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["memory_limit_bytes"])' "$r/$sched.profile.json")
    "$loom" simulate "$f" $shape --nproc "$world" --cluster "$r/here.json" --memory-limit "$limit" --json > "$r/$sched.here.json"
    "${in_net[@]}" "$loom" run "$f" $run --metrics "$r/$sched.jsonl" > /dev/null
    echo "invocation $rep of $repeat, $sched: profiled, simulated and run" >&2
  done
done
$python3 - "$out" "$repeat" "$world" "$link" "$device" "$shape" "$profile_steps" "$run_steps" $schedules <<'PY'
import itertools, json, math, statistics, sys

def measured_apart(a, b):
    """Whether two runs' step times differ beyond their own spread: a two-sided Mann-Whitney U
    test at 5% (normal approximation with the tie correction), on the steps the medians use."""
    n, m = len(a), len(b)
    ranked = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks, ties, i = [0.0] * len(ranked), 0.0, 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]: j += 1
        for k in range(i, j + 1): ranks[k] = (i + j) / 2 + 1
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    u = sum(r for r, (_, side) in zip(ranks, ranked) if side == 0) - n * (n + 1) / 2
    var = n * m / 12 * ((n + m + 1) - ties / ((n + m) * (n + m - 1)))
    return var > 0 and abs(u - n * m / 2) / math.sqrt(var) > 1.96

out, repeat, world, link, device, shape, profile_steps, run_steps = sys.argv[1:9]
repeat, schedules = int(repeat), sys.argv[9:]
over = "loopback" if link == "loopback" else "a loopback shaped to 1 Gbit/s"
on = "" if device == "cpu" else f" on {device} (ranks share it over gloo)"


def report(d):
    """One invocation's table and ranking; returns its mean step and peak errors and each schedule's sim/run."""
    print(f"{'schedule':<16}{'sim ms':>9}{'run ms':>9}{'sim/run':>9}{'rep/run':>9}{'here/run':>9}{'prof/run':>9}{'sim/prof':>9}"
          f"{'sim peak':>11}{'run peak':>11}{'sim/run':>9}")
    errors, rep_errors, here_errors, memory_errors, replay_errors, sim, run, steps, ratio = [], [], [], [], [], {}, {}, {}, {}
    for s in schedules:
        r = json.load(open(f"{d}/{s}.sim.json"))
        rep = json.load(open(f"{d}/{s}.rep.json"))["step_s"]
        here = json.load(open(f"{d}/{s}.here.json"))["step_s"]
        rows = [json.loads(l) for l in open(f"{d}/{s}.jsonl")][2:]
        steps[s] = [x["step_ms"] for x in rows]
        ms = statistics.median(steps[s])
        peak = max(x["peak_mem_bytes"] for x in rows)  # rank 0's, so the first stage's simulated peak
        sim_peak = r["stage_peak_bytes"][0]
        t, m = r["step_s"] * 1e3 / ms, sim_peak / peak
        errors.append(abs(t - 1))
        rep_errors.append(abs(rep * 1e3 / ms - 1))
        here_errors.append(abs(here * 1e3 / ms - 1))
        memory_errors.append(abs(m - 1))
        sim[s], run[s], ratio[s] = r["step_s"], ms, t
        # The profiled steps themselves (the profiler's work in them included): the step the simulator replays.
        profiled = r.get("profiled_step_s", -1)
        prof, replay = ("-", "-") if profiled <= 0 else (f"{profiled * 1e3 / ms:.2f}", f"{r['step_s'] / profiled:.2f}")
        if profiled > 0: replay_errors.append(abs(r["step_s"] / profiled - 1))
        print(f"{s:<16}{r['step_s'] * 1e3:>9.1f}{ms:>9.1f}{t:>9.2f}{rep * 1e3 / ms:>9.2f}{here * 1e3 / ms:>9.2f}{prof:>9}{replay:>9}"
              f"{sim_peak / 2**20:>10.1f}M{peak / 2**20:>10.1f}M{m:>9.2f}")
    step_error, memory_error = sum(errors) / len(errors), sum(memory_errors) / len(memory_errors)
    print(f"mean |sim/run - 1|: step time {step_error:.2f}, peak memory {memory_error:.2f}")
    print(f"rep: the same profile simulated by one rank per stage at each op's slowest rank's time (--representative): "
          f"mean {sum(rep_errors) / len(rep_errors):.2f}")
    print(f"here: each schedule priced on this machine as a cluster, derived from {schedules[0]}'s profile (--save-cluster): "
          f"mean {sum(here_errors) / len(here_errors):.2f}")
    if replay_errors:
        print(f"prof: the profiled steps' median (the profiler's work in them included) over the run's; sim/prof: the simulated step "
              f"over the profiled one it replays, mean |sim/prof - 1| {sum(replay_errors) / len(replay_errors):.2f}")
    print("fastest first, simulated:", " ".join(sorted(schedules, key=sim.get)))
    print("fastest first, measured: ", " ".join(sorted(schedules, key=run.get)))
    # A pair out of the measured order counts against the ranking where the measurement tells the two
    # apart; where their steps' spreads overlap, the measured order is itself a coin toss.
    swapped = [(a, b) for a, b in itertools.combinations(schedules, 2) if (sim[a] - sim[b]) * (run[a] - run[b]) < 0]
    apart = [(a, b) for a, b in swapped if measured_apart(steps[a], steps[b])]
    print(f"ranking: {len(swapped)} of {len(schedules) * (len(schedules) - 1) // 2} pairs out of the measured order, "
          f"{len(apart)} of them measured apart (Mann-Whitney U on steps 3 on, 5%)")
    for a, b in swapped:
        gap = abs(run[a] - run[b]) / min(run[a], run[b])
        print(f"  {a} / {b}: measured {run[a]:.1f} / {run[b]:.1f} ms ({gap:.0%} apart), simulated {sim[a] * 1e3:.1f} / {sim[b] * 1e3:.1f}: "
              + ("measured apart" if (a, b) in apart else "within the runs' spread"))
    return step_error, memory_error, len(apart), ratio


results = []
for k in range(1, repeat + 1):
    print(f"{shape} at world {world} over {over}{on}, 1 thread per rank, {profile_steps} profiled steps, {run_steps} run "
          f"(medians of steps 3-{run_steps})" + (f": invocation {k} of {repeat}" if repeat > 1 else ""))
    results.append(report(f"{out}/r{k}"))
if repeat > 1:
    steps_err = [r[0] for r in results]
    print(f"over {repeat} invocations: mean |sim/run - 1| of the step {sum(steps_err) / repeat:.2f} "
          f"(each: {', '.join(f'{e:.2f}' for e in steps_err)}), of the peak {sum(r[1] for r in results) / repeat:.2f}; "
          f"pairs out of the measured order and measured apart: {', '.join(str(r[2]) for r in results)}")
    print(f"{'schedule':<16}" + "".join(f"{'sim/run ' + str(k):>11}" for k in range(1, repeat + 1)))
    for s in schedules:
        print(f"{s:<16}" + "".join(f"{r[3][s]:>11.2f}" for r in results))
PY
