#!/usr/bin/env bash
# The IR is the step: for each schedule, the collectives rank 0 issues in step 2 (from the
# --trace timeline), as (op name, group size) in the order they start, equal the collective
# instructions of `loom explain --json --rank 0` in the order a step runs them (the body once per
# micro-batch, each instruction in the micro-batches it runs in, then the step's tail). Under a mesh each rank has its own program: ranks of the first and the last
# stage are checked.
set -uo pipefail
source "$(dirname "$0")/../lib/expect.sh" "$@"

cat > "$tmp/compare.py" <<'PY'
import collections, json, sys
trace, program = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
world, accum, rank = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
mine = [e for e in events if e.get("pid") == rank and e.get("ph") == "X"]
forwards = sorted(e["ts"] for e in mine if e.get("cat") == "phase" and e["name"] == "forward")
def group_size(name):  # "world", or a subgroup named "group<K>_<rank>_<rank>..."
    return world if name == "world" else len(name.split("_")) - 1
launched = sorted((e for e in mine if e.get("cat") == "collective" and e["ts"] >= forwards[accum]), key=lambda e: e["ts"])
issued = [(e["name"].split(" ")[0], group_size(e["name"].split(" ")[2])) for e in launched]
# The program's collectives in the order a step runs them: the body once per micro-batch (each
# instruction in the micro-batches it runs in), then the step's tail once.
runs = {"all": lambda m: True, "first": lambda m: m == 0, "last": lambda m: m == accum - 1,
        "all_but_last": lambda m: m < accum - 1}
body = [i for i in program["instructions"] if "collective" in i and i["phase"] != "step"]
tail = [i for i in program["instructions"] if "collective" in i and i["phase"] == "step"]
planned = [(i["collective"], i["group"]["size"]) for m in range(accum) for i in body if runs[i.get("runs_in", "all")](m)]
planned += [(i["collective"], i["group"]["size"]) for i in tail]
print("step 2 on rank", rank, "issued", dict(sorted(collections.Counter(issued).items())), "; the IR holds",
      dict(sorted(collections.Counter(planned).items())))
if collections.Counter(issued) != collections.Counter(planned): sys.exit(1)
# The same collectives, and in the program's order.
for k, (a, b) in enumerate(zip(issued, planned)):
    if a != b:
        print(f"collective {k} of the step: issued {a}, the IR's is {b}")
        sys.exit(1)
print("in the program's order")
PY

# same_collectives NAME NPROC MICRO_BATCH FILE ARGS...: runs two steps with a trace, explains
# (ARGS: what both take, --model, --set and --accum; --rank R, explain's only, picks the rank
# compared), compares.
same_collectives() {
  local name="$1" nproc="$2" micro_batch="$3" file="$4" accum=1 rank=0 run_args=()
  shift 4
  while [ $# -gt 0 ]; do
    case "$1" in
      --rank) rank="$2"; shift 2; continue ;;
      --accum) accum="$2" ;;
    esac
    run_args+=("$1")
    shift
  done
  rm -f "$tmp/trace.json" "$tmp/program.json"
  "$loom" run "$file" "${run_args[@]}" --nproc "$nproc" --micro-batch "$micro_batch" --steps 2 --seq 32 --threads 1 --trace "$tmp/trace.json" \
    > "$tmp/run.log" 2>&1
  "$loom" explain "$file" "${run_args[@]}" --nproc "$nproc" --rank "$rank" --json > "$tmp/program.json" 2>> "$tmp/run.log"
  expect "the IR is the step: $name" 0 "in the program's order" -- python3 "$tmp/compare.py" "$tmp/trace.json" "$tmp/program.json" "$nproc" "$accum" "$rank"
  [ -s "$tmp/program.json" ] && [ -s "$tmp/trace.json" ] || sed 's/^/    /' "$tmp/run.log"
}

for f in stdlib_schedules/*.sched; do
  same_collectives "$f on gpt:tiny at 2 ranks" 2 2 "$f" --model gpt:tiny
done
same_collectives "zero3 on llama:tiny at 4 ranks" 4 1 stdlib_schedules/zero3.sched --model llama:tiny
# Gradient accumulation: data-parallel reductions in the last micro-batch only; with s_g > s_p
# (ZeRO-2) the gradient peers all-reduce and select & drop in the others.
for f in ddp zero2 zero3; do
  same_collectives "$f on gpt:tiny at 2 ranks, 3 micro-batches a step" 2 1 "stdlib_schedules/$f.sched" --model gpt:tiny --accum 3
done
same_collectives "examples/gpt_tuned.sched (checkpoint, TAGC, unshard, offload)" 2 2 examples/gpt_tuned.sched \
  --model gpt:tiny --set micro_batch=2 --set ckpt_ratio=0.5
same_collectives "examples/llama_lins.sched (Lins (4,4,8), bucket, prefetch)" 8 1 examples/llama_lins.sched --model llama:tiny
same_collectives "tests/verify/compress_zero3.sched" 2 2 tests/verify/compress_zero3.sched --model gpt:tiny
# TAGC inside a bucket, each shard on two replicas: the compressed parameter's replica sum is its own.
same_collectives "tests/verify/hybrid_tagc_bucket.sched" 4 1 tests/verify/hybrid_tagc_bucket.sched --model gpt:tiny
# A tied weight checkpointed on one side: reduced once, after both of its gradients.
same_collectives "tests/verify/tied_checkpoint.sched, 2 micro-batches" 2 1 tests/verify/tied_checkpoint.sched --model gpt:tiny --accum 2
same_collectives "tests/verify/tied_checkpoint_zero3.sched" 2 2 tests/verify/tied_checkpoint_zero3.sched --model gpt:tiny
# Meshes: tensor-parallel syncs, pipeline sends and receives, the pipeline's shared gradients.
same_collectives "tensor parallelism on gpt:tiny at 2 ranks" 2 2 tests/verify/tensor_parallel.sched --model gpt:tiny
same_collectives "a pipeline of 2 stages on gpt:tiny, stage 0" 2 2 tests/verify/pipeline.sched --model gpt:tiny
same_collectives "a pipeline of 2 stages on gpt:tiny, stage 1, 2 micro-batches" 2 1 tests/verify/pipeline.sched \
  --model gpt:tiny --accum 2 --rank 1
same_collectives "examples/gpt_tp.sched (tp 2 x pp 2), stage 1, tp rank 1" 4 1 examples/gpt_tp.sched --model gpt:50m --rank 3
# Meshes beside data parallelism: the data-parallel buckets are the program's.
same_collectives "a pipeline of 2 stages x dp 2 on gpt:tiny, stage 1" 4 1 tests/verify/pipeline.sched --model gpt:tiny --rank 2
same_collectives "a pipeline of 2 stages x dp 2 on gpt:tiny, stage 1, 2 micro-batches" 4 1 tests/verify/pipeline.sched \
  --model gpt:tiny --rank 2 --accum 2
# Composition: each stage recomputes its own checkpointed blocks; a recomputation under tensor
# parallelism issues its forward's all-reduces again; bucket() under a mesh.
same_collectives "pipeline with every block checkpointed, stage 1" 2 2 tests/verify/pipeline_checkpoint.sched --model gpt:tiny --rank 1
same_collectives "tp 2 x dp 2 on llama:tiny, a layer checkpointed, a layer bucketed, tp rank 1" 4 1 \
  tests/verify/llama_tp_checkpoint_bucket.sched --model llama:tiny --rank 1
# ZeRO inside a tensor-parallel mesh's data-parallel groups, with prefetch, checkpoint(), TAGC,
# unshard and offload; two micro-batches a step.
same_collectives "tp 2 x ZeRO-3 on llama:tiny, prefetch, a layer checkpointed, tp rank 1" 4 1 tests/verify/llama_tp_zero3.sched \
  --model llama:tiny --rank 1
same_collectives "tp 2 x ZeRO-3 with TAGC, unshard and offload, 2 micro-batches" 4 1 tests/verify/tp_zero3_tuned.sched \
  --model gpt:tiny --accum 2
# ZeRO inside a pipeline stage's data-parallel group: the stage's program holds only its
# parameters; the shared gradients' slices are summed over the pipeline.
same_collectives "pp 2 x ZeRO-1, every block checkpointed, stage 1, 2 micro-batches" 4 1 tests/verify/pipeline_zero1_checkpoint.sched \
  --model gpt:tiny --rank 2 --accum 2
for rank in 0 7; do
  same_collectives "tp 2 x pp 2 x dp 2 with ZeRO-3, prefetch and a checkpointed block, rank $rank, 2 micro-batches" 8 1 \
    tests/verify/tp_pp_zero3.sched --model gpt:tiny --rank "$rank" --accum 2
done

# Where the step waits is the program's too: ZeRO-1/2 (s_p = 1) launch every gradient's
# all-reduce over the replicas in backward and wait for them after the last (the IR's pending
# waits), so in rank 0's last backward every wait for an all-reduce starts after the last
# all-reduce was launched (an executor that waited at each launch fails this).
cat > "$tmp/waits.py" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
mine = [e for e in events if e.get("pid") == 0 and e.get("ph") == "X"]
backward = max((e for e in mine if e.get("cat") == "phase" and e["name"] == "backward"), key=lambda e: e["ts"])
inside = [e for e in mine if backward["ts"] <= e["ts"] <= backward["ts"] + backward["dur"]]
launches = [e["ts"] for e in inside if e.get("cat") == "collective" and e["name"].startswith("all_reduce")]
waits = [e["ts"] for e in inside if e.get("cat") == "wait" and e["name"].startswith("wait for all_reduce")]
print(f"{len(launches)} all-reduces launched in backward, the last at {max(launches) - backward['ts']:.0f} us;",
      f"{len(waits)} waited for, the first at {min(waits) - backward['ts']:.0f} us")
sys.exit(0 if launches and len(waits) == len(launches) and max(launches) <= min(waits) else 1)
PY
for f in zero1 zero2; do
  "$loom" run "stdlib_schedules/$f.sched" --model gpt:tiny --nproc 2 --micro-batch 4 --steps 2 --seq 64 --threads 1 \
    --trace "$tmp/waits.json" > "$tmp/run.log" 2>&1
  expect "the step waits where the IR waits: $f's all-reduces over the replicas" 0 "waited for, the first at" -- \
    python3 "$tmp/waits.py" "$tmp/waits.json"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
