#!/usr/bin/env bash
# loom verify end to end (issue #5): every stdlib schedule verifies at world 1, 2 and 4 (and on
# every model family at world 2); the examples verify (compression against its own bound);
# tensor and pipeline parallelism verify,
# and a missing sync is caught by the numbers; deliberately broken schedules (the test-only fault
# primitives) are caught and the report names the right module and the right directive;
# verify() makes `loom run` verify before training.
set -uo pipefail
source "$(dirname "$0")/../lib/expect.sh" "$@"
small="--model gpt:tiny --seq 32 --micro-batch 2 --threads 1"

for world in 1 2 4; do
  for f in stdlib_schedules/*.sched; do
    expect "verify $f at world $world" 0 "equivalent (" "parameters after the step:" -- "$loom" verify "$f" $small --nproc $world
  done
done
# Every standard schedule on every other model family (blocks() finds their repeated blocks).
for model in llama:tiny mixtral:tiny bert:tiny; do
  for f in stdlib_schedules/*.sched; do
    expect "verify $f on $model" 0 "equivalent (" -- "$loom" verify "$f" --model $model --seq 32 --micro-batch 2 --threads 1 --nproc 2
  done
done
# --nproc defaults to 2; at 1 rank the report says how little that proves.
expect "verify defaults to 2 ranks" 0 "on gpt:tiny, 2 ranks, one step" "equivalent (" -- "$loom" verify stdlib_schedules/zero3.sched $small
expect "verify at 1 rank says nothing was sharded" 0 "note: at 1 rank nothing is sharded, split or reduced" "equivalent (" \
  -- "$loom" verify stdlib_schedules/zero3.sched $small --nproc 1
expect "fp16 reductions: fp16 tolerance" 0 "tolerance (fp16)" "equivalent (" -- "$loom" verify stdlib_schedules/zero3.sched $small --nproc 2 --reduce-dtype fp16

# The examples: gpt_tuned (ZeRO-3, checkpoint, TAGC, unshard, offload) verifies, its compression
# against the compression's own bound; llama_lins (Lins (4,4,8), prefetch, bucket) at world 8;
# gpt_tp (tensor parallelism x 2 and two pipeline stages) on gpt:50m, which has the h.5 it splits after.
for world in 2 4; do
  expect "example gpt_tuned at world $world" 0 "compressed (lossy by design):" "equivalent (" \
    -- "$loom" verify examples/gpt_tuned.sched --model gpt:tiny --seq 32 --micro-batch $((4 / world)) --threads 1 --nproc $world --set micro_batch=2 --set ckpt_ratio=0.5
done
expect "example llama_lins at world 8" 0 "equivalent (" "parameters after the step:" -- "$loom" verify examples/llama_lins.sched --model llama:tiny --seq 32 --micro-batch 1 --threads 1 --nproc 8
expect "example gpt_tp at world 4" 0 "tensor/pipeline parallel (tp x pp = 4): the plain model runs at 1 rank(s)" "equivalent (" \
  -- "$loom" verify examples/gpt_tp.sched --model gpt:50m --seq 32 --micro-batch 2 --threads 1 --nproc 4

# Tensor and pipeline parallelism alone, and beside data parallelism (world 4: dp = 2).
for world in 2 4; do
  for f in tensor_parallel pipeline pipeline_balanced; do
    expect "$f at world $world" 0 "the plain model runs at $((world / 2)) rank(s)" "equivalent (" \
      -- "$loom" verify tests/verify/$f.sched $small --nproc $world
  done
done
expect "llama_tensor_parallel at world 2" 0 "equivalent (" \
  -- "$loom" verify tests/verify/llama_tensor_parallel.sched --model llama:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 2
# A weight used inside and outside a checkpointed module (gpt's tied embedding) is reduced
# once both of its gradients are in, under data parallelism and ZeRO-3.
for f in tied_checkpoint tied_checkpoint_zero3; do
  expect "$f at world 2" 0 "equivalent (" -- "$loom" verify tests/verify/$f.sched $small --nproc 2
done
# replace(): the memory-efficient attention computes what the eager one does, beside ZeRO-3,
# prefetch and a checkpointed block (gpt), tensor parallelism (llama, grouped-query) and ZeRO-2
# on an encoder (bert, not causal).
expect "memory_efficient_attention under ZeRO-3 at world 2" 0 "equivalent (" -- "$loom" verify tests/verify/memory_efficient_attention.sched $small --nproc 2
expect "memory_efficient_attention under tp 2 at world 4" 0 "equivalent (" \
  -- "$loom" verify tests/verify/llama_tp_memory_efficient_attention.sched --model llama:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 4
expect "memory_efficient_attention on bert under ZeRO-2" 0 "equivalent (" \
  -- "$loom" verify tests/verify/bert_memory_efficient_attention.sched --model bert:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 2
# Meshes composed with the runtime primitives (issue #14, section 4): checkpoint(), bucket(),
# ZeRO inside the data-parallel group with prefetch, unshard, offload and TAGC.
for world in 2 4; do
  expect "pipeline_checkpoint at world $world" 0 "equivalent (" -- "$loom" verify tests/verify/pipeline_checkpoint.sched $small --nproc $world
done
expect "llama_tp_checkpoint_bucket at world 4" 0 "equivalent (" \
  -- "$loom" verify tests/verify/llama_tp_checkpoint_bucket.sched --model llama:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 4
expect "llama_tp_zero3 (tp 2, ZeRO-3, prefetch, a layer checkpointed) at world 4" 0 "equivalent (" \
  -- "$loom" verify tests/verify/llama_tp_zero3.sched --model llama:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 4
expect "tp_zero3_tuned (tp 2, ZeRO-3, TAGC, unshard, offload) at world 4" 0 "compressed (lossy by design):" "equivalent (" \
  -- "$loom" verify tests/verify/tp_zero3_tuned.sched $small --nproc 4
expect "pipeline_zero1_checkpoint (pp 2, ZeRO-1, every block checkpointed) at world 4" 0 "equivalent (" \
  -- "$loom" verify tests/verify/pipeline_zero1_checkpoint.sched $small --nproc 4
expect "tp_pp_zero3 (tp 2 x pp 2 x dp 2, ZeRO-3, prefetch, a block checkpointed) at world 8" 0 "equivalent (" \
  -- "$loom" verify tests/verify/tp_pp_zero3.sched --model gpt:tiny --seq 32 --micro-batch 1 --threads 1 --nproc 8
# The memory-aware passes (docs/passes.md) under limits where they choose part of what they may:
# alone and together, at world 2 and 4, with and without accumulation.
printf 'sch.zero(stage=3)\nsch.blocks().prefetch()\n' > "$tmp/prefetch_auto.sched"
printf 'sch.zero(stage=3)\nsch["h.*.mlp"].unshard()\n' > "$tmp/unshard_auto.sched"
printf 'sch.zero(stage=3)\nsch.blocks().bucket(size=auto)\n' > "$tmp/bucket_auto.sched"
printf 'sch.zero(stage=3)\nsch.blocks().bucket(size=64KiB)\n' > "$tmp/bucket_64k.sched"
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=auto)\n' > "$tmp/offload_auto.sched"
expect "bucket(size=auto) at world 2" 0 "equivalent (" -- "$loom" verify "$tmp/bucket_auto.sched" $small --nproc 2 --memory-limit 9.2MiB
expect "bucket(size=64KiB) at world 2, accum 2" 0 "equivalent (" -- "$loom" verify "$tmp/bucket_64k.sched" $small --nproc 2 --accum 2
expect "prefetch(budget=auto) under a 9.2 MiB limit at world 2" 0 "equivalent (" \
  -- "$loom" verify "$tmp/prefetch_auto.sched" $small --nproc 2 --memory-limit 9.2MiB
expect "unshard(auto) under a 9.2 MiB limit at world 2" 0 "equivalent (" \
  -- "$loom" verify "$tmp/unshard_auto.sched" $small --nproc 2 --memory-limit 9.2MiB
# Each alone with accumulation, and at world 4 with and without, under limits where it changes
# the program (as `loom explain` shows): 9.2 MiB at world 2, 6.5 MiB at world 4.
for pass in prefetch_auto:proactive_prefetch unshard_auto:selective_unshard bucket_auto:auto_bucket; do
  sched=${pass%%:*} name=${pass#*:}
  for at in "2 9.2MiB 2" "4 6.5MiB 2" "4 6.5MiB 1"; do
    read -r world limit accum <<< "$at"
    expect "$sched changes the program under $limit at world $world, accum $accum" 0 "#   $name: changed" \
      -- "$loom" explain "$tmp/$sched.sched" ${small% --threads 1} --nproc "$world" --accum "$accum" --memory-limit "$limit"
    expect "$sched under $limit at world $world, accum $accum" 0 "equivalent (" \
      -- "$loom" verify "$tmp/$sched.sched" $small --nproc "$world" --accum "$accum" --memory-limit "$limit"
  done
done
# With room, unshard(auto) keeps parameters gathered across the micro-batches as well
# (deepcompile.txt §4.3): gathered in the first, released in the last.
for at in "2 12MiB" "4 9.2MiB"; do
  read -r world limit <<< "$at"
  expect "unshard_auto keeps parameters across micro-batches under $limit at world $world, accum 2" 0 "[first micro-batch]" \
    "bwd  release         h.0.mlp.c_fc.weight                      256.0 KiB    [last micro-batch]" \
    -- "$loom" explain "$tmp/unshard_auto.sched" ${small% --threads 1} --nproc "$world" --accum 2 --memory-limit "$limit"
  expect "unshard_auto across micro-batches under $limit at world $world, accum 2" 0 "equivalent (" \
    -- "$loom" verify "$tmp/unshard_auto.sched" $small --nproc "$world" --accum 2 --memory-limit "$limit"
done
expect "memory_auto keeps some parameters across micro-batches under 10 MiB at world 2, accum 2" 0 "[first micro-batch]" \
  -- "$loom" explain tests/verify/memory_auto.sched ${small% --threads 1} --nproc 2 --accum 2 --memory-limit 10MiB
expect "memory_auto under 10 MiB at world 2, accum 2" 0 "equivalent (" \
  -- "$loom" verify tests/verify/memory_auto.sched $small --nproc 2 --accum 2 --memory-limit 10MiB
for accum in 1 2; do
  expect "offload(budget=auto) under 8 MiB at world 2, accum $accum" 0 "equivalent (" \
    -- "$loom" verify "$tmp/offload_auto.sched" $small --nproc 2 --accum $accum --memory-limit 8MiB
  expect "offload(budget=auto) under 5 MiB at world 4, accum $accum" 0 "equivalent (" \
    -- "$loom" verify "$tmp/offload_auto.sched" $small --nproc 4 --accum $accum --memory-limit 5MiB
  expect "memory_auto under 8.4 MiB at world 2, accum $accum" 0 "equivalent (" \
    -- "$loom" verify tests/verify/memory_auto.sched $small --nproc 2 --accum $accum --memory-limit 8.4MiB
  expect "memory_auto under 5.6 MiB at world 4, accum $accum" 0 "equivalent (" \
    -- "$loom" verify tests/verify/memory_auto.sched $small --nproc 4 --accum $accum --memory-limit 5.6MiB
done
expect "verify --keep says where it kept the runs" 0 "records, metrics and logs kept in /tmp/loom-verify-" \
  -- bash -c "out=\$('$loom' verify stdlib_schedules/zero3.sched $small --nproc 2 --keep); echo \"\$out\";
              rm -rf \"\$(echo \"\$out\" | sed -n 's/.*kept in //p')\""
# ... and the scheduled run verify starts plans within the limit (its log, kept, shows the passes act).
expect "verify passes --memory-limit to the scheduled run" 0 "the passes acted" -- bash -c "
  kept=\$(LOOM_DEBUG=1 '$loom' verify tests/verify/memory_auto.sched $small --nproc 2 --memory-limit 8.4MiB --keep --json |
         python3 -c 'import json, sys; print(json.load(sys.stdin)[\"kept\"])')
  grep -q 'pass proactive_prefetch: changed' \"\$kept/scheduled.log\" && grep -q 'pass selective_unshard: changed' \"\$kept/scheduled.log\" &&
    grep -q 'pass adaptive_offload: changed' \"\$kept/scheduled.log\" && echo 'the passes acted'; rm -rf \"\$kept\""
# A sync that is missing is no rule's business: verify catches it by the numbers.
expect "tp: missing forward sync" 1 "first divergence: the output of h.0.mlp.c_proj on rank 0" "diverging module: h.0.mlp.c_proj" \
  'sch["h.0.mlp.c_proj"].shard(params="weight", axis=1) at tests/verify/tp_missing_sync.sched:6:1' \
  -- "$loom" verify tests/verify/tp_missing_sync.sched $small --nproc 2
expect "tp: missing backward sync" 1 "first divergence: the gradient h.0.mlp.c_fc passes to its input 0 on rank 0" \
  "diverging module: h.0.mlp.c_fc" 'sch["h.0.mlp.c_fc"].shard(params=["weight", "bias"], axis=0) at tests/verify/tp_missing_backward_sync.sched:5:1' \
  -- "$loom" verify tests/verify/tp_missing_backward_sync.sched $small --nproc 2

# Compression: within its bound at Table 1's sparsity; beyond it when too dense, named; refused unsharded.
expect "compress under ZeRO-3" 0 "compressed (lossy by design): 24 gradients and parameters" "equivalent (" -- "$loom" verify tests/verify/compress_zero3.sched $small --nproc 2
expect "compress too dense" 1 "but peeling left" "diverging module: h.0.mlp.c_fc" \
  'breaking directive: sch["h.0.mlp.c_fc"].compress(ratio=10.0, index_bits=1, sparsity=0.5) at tests/verify/compress_too_dense.sched:5:1' \
  -- "$loom" verify tests/verify/compress_too_dense.sched $small --nproc 2
expect "compress without sharded parameters" 1 "compress_unsharded.sched:4:1: error: compress is not yet supported at runtime: TAGC replaces the reduce-scatter of sharded parameters" \
  -- "$loom" verify tests/verify/compress_unsharded.sched $small --nproc 2

# Exact comparison: rounding differences count.
expect "tolerance 0" 1 "NOT equivalent" "first divergence:" -- "$loom" verify stdlib_schedules/zero3.sched $small --nproc 2 --atol 0 --rtol 0 --no-bisect
expect "schedule error" 1 "shard_states on sch: params = 3 is outside 1..2 (dp)" -- "$loom" verify tests/error/shard_states_divide.sched $small --nproc 2
expect "test primitives are gated" 1 "test_corrupt_shard is a test-only primitive" -- "$loom" verify tests/verify/corrupt_shard.sched $small --nproc 2

# Deliberately wrong schedules: the report names the module that diverged first and the directive.
export LOOM_TEST_PRIMITIVES=1
expect "corrupted shard" 1 "first divergence: the output of h.0.mlp.c_fc on rank 0" "diverging module: h.0.mlp.c_fc" \
  'breaking directive: sch["h.0.mlp.c_fc"].test_corrupt_shard(param="weight", rank=1) at tests/verify/corrupt_shard.sched:4:1' \
  -- "$loom" verify tests/verify/corrupt_shard.sched $small --nproc 2
expect "skipped reduction" 1 "first divergence: the reduced gradient of h.1.attn.c_proj.weight" "diverging module: h.1.attn.c_proj" \
  'breaking directive: sch["h.1.attn.c_proj"].test_skip_reduction(param="weight") at tests/verify/skip_reduction.sched:4:1' \
  -- "$loom" verify tests/verify/skip_reduction.sched $small --nproc 2
expect "released too early" 1 "first divergence: the gradient h.0.mlp.c_proj passes to its input 0" "diverging module: h.0.mlp.c_proj" \
  'breaking directive: sch["h.0.mlp.c_proj"].test_release_early() at tests/verify/release_early.sched:4:1' \
  -- "$loom" verify tests/verify/release_early.sched $small --nproc 2
expect "bisection past the end" 1 'test_corrupt_shard(param="weight", rank=0) at tests/verify/corrupt_then_shard.sched:3:1' \
  "the first 0 of 6 directives verify, the first 1 do not" \
  -- "$loom" verify tests/verify/corrupt_then_shard.sched $small --nproc 2
expect "bisection with a prefix that cannot run" 1 "breaking directive: one of these 2" \
  "test_release_early() at tests/verify/release_before_sharding.sched:3:1" \
  "sch.shard_states(params=2, grads=2, optim=2) at tests/verify/release_before_sharding.sched:4:1" \
  -- "$loom" verify tests/verify/release_before_sharding.sched $small --nproc 2
expect "json report" 1 '"equivalent": false' '"module": "h.1.mlp.c_proj"' '"location": "tests/verify/corrupt_then_shard.sched:3:1"' \
  -- "$loom" verify tests/verify/corrupt_then_shard.sched $small --nproc 2 --json

# verify(): loom run verifies first, then trains; a broken schedule does not train.
expect "run with verify()" 0 "verify() asks for a differential test first" "equivalent (" "step 2/2" \
  -- "$loom" run tests/verify/zero3_verified.sched $small --nproc 2 --steps 2
expect "run with verify(), broken" 1 "diverging module: h.0.mlp.c_fc" "not training" \
  -- "$loom" run tests/verify/corrupt_verified.sched $small --nproc 2 --steps 2

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
