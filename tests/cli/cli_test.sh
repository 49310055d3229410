#!/usr/bin/env bash
# The loom command line as a user meets it: exit codes (0 ok, 1 schedule error,
# 2 usage error), rendered diagnostics, --json, --print, --set and fmt.
set -uo pipefail
source "$(dirname "$0")/../lib/expect.sh" "$@"

expect "check ok" 0 "ok (5 directives, 0 warnings)" -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2
expect "check --print" 0 'sch["h.3"].prefetch(budget=auto)' -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --print
expect "check --set" 0 "# knobs: micro_batch=2, ckpt_ratio=0.5" -- "$loom" check examples/gpt_tuned.sched --model gpt2 --world 8 --set micro_batch=2 --set ckpt_ratio=0.5 --print
expect "error location" 1 "tests/error/no_match.sched:4:5: error: no module matches \"h.40.mlp\" in model gpt2" -- "$loom" check tests/error/no_match.sched --model gpt2
expect "error underline" 1 "    ^~~~~~~~~~" -- "$loom" check tests/error/no_match.sched --model gpt2
expect "error hint" 1 "hint: did you mean" -- "$loom" check tests/error/no_match.sched --model gpt2
expect "json diagnostics" 1 '"range":{"end":{"column":15,"line":4},"start":{"column":5,"line":4}},"severity":"error"' -- "$loom" check tests/error/no_match.sched --model gpt2 --json
expect "json warnings" 0 '"severity":"warning"' -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --json
expect "unknown knob in --set" 1 "--set names knob 'micro_bach'" -- "$loom" check examples/gpt_tuned.sched --model gpt2 --world 8 --set micro_bach=2
expect "bad --set" 2 "--set expects name=value" -- "$loom" check examples/gpt_tuned.sched --model gpt2 --set micro_batch
expect "unknown model" 2 "did you mean 'gpt2'?" -- "$loom" check examples/gpt_tp.sched --model gpt3
expect "missing --model" 2 "--model is required" -- "$loom" check examples/gpt_tp.sched
expect "local world must divide" 1 "local_world 3 does not divide world 8" -- "$loom" check examples/gpt_tp.sched --model gpt2 --world 8 --local-world 3
expect "missing file" 1 "cannot read schedule file 'nope.sched'" -- "$loom" check nope.sched --model gpt2
expect "a directory for the schedule" 1 "error: 'examples' is a directory, not a schedule file" "hint: give the .sched file's path" \
  -- "$loom" check examples --model gpt2
expect "no subcommand" 2 "A subcommand is required" -- "$loom"
expect "unknown subcommand" 2 "error: unknown command 'chekc'" "hint: did you mean 'check'? \`loom --help\` lists the commands" -- "$loom" chekc x.sched
expect "unknown subcommand, nothing close" 2 "error: unknown command 'xyzzy'" "hint: \`loom --help\` lists the commands" -- "$loom" xyzzy
expect "version" 0 "loom 0.1.0 (LibTorch 1." -- "$loom" --version
expect "run help shows defaults" 0 "--micro-batch INT=4" "--seq INT=128" "--steps INT=50" "--lr FLOAT=0.003" "--memory-limit SIZE" \
  -- "$loom" run --help
# Every command types a size alike, whatever it holds it in.
expect "sizes typed SIZE" 0 "SIZE in each" -- bash -c "
  for c in check explain simulate plan tune; do \"$loom\" \$c --help | grep -q -- '--memory-limit SIZE ' || { echo \"\$c differs\"; exit 1; }; done
  echo SIZE in each"
expect "nproc 0" 2 "--nproc: must be at least 1, got 0" -- "$loom" run --model gpt:tiny --nproc 0
expect "world 0" 2 "--world: must be at least 1, got 0" -- "$loom" check examples/gpt_tp.sched --model gpt2 --world 0
expect "help" 0 "check" -- "$loom" --help
expect "check help" 0 "--local-world" -- "$loom" check --help
expect "fmt" 0 "let x = (1 + 2) * 3  # trailing comment" -- "$loom" fmt tests/golden/fmt/messy.sched
expect "fmt --check canonical" 0 "" -- "$loom" fmt --check examples/gpt_tp.sched
expect "fmt --check not canonical" 1 "" -- "$loom" fmt --check tests/golden/fmt/messy.sched
expect "fmt of a missing file" 2 "error: cannot read 'nope.sched'" -- "$loom" fmt nope.sched
expect "fmt of a directory" 2 "error: 'examples' is a directory, not a schedule file" -- "$loom" fmt -i examples
expect "tune of a directory" 1 "error: 'examples' is a directory, not a schedule file" \
  -- "$loom" tune examples --model gpt:tiny --nproc 2 --cluster dgx-a100
expect "fmt syntax error" 1 "unterminated string literal" -- "$loom" fmt tests/error/syntax_unterminated_string.sched
expect "tree" 0 "h.0.attn.c_attn  Linear  weight[384,128]  bias[384]" -- "$loom" tree --model gpt:tiny
expect "models" 0 "llama3-70b" -- "$loom" models
expect "pipeline boundaries in two lists" 1 \
  'pipeline_two_lists.sched:5:1: error: pipeline_split on `layers.0.block_sparse_moe.experts.1` is in another list than the one on `layers.0`' \
  "hint: split one ModuleList" -- "$loom" check tests/cli/pipeline_two_lists.sched --model mixtral:tiny --world 3

expect "explain zero3" 0 "reduce_scatter  h.3.mlp.c_proj.weight" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain pass log" 0 "#   prefetch: changed" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain ddp" 0 "all_reduce      lm_head" -- "$loom" explain --model llama:tiny --nproc 2
expect "explain --rank" 0 "# the program of rank 1 (every rank runs the same one)" "loss_reduce" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --rank 1
expect "explain --rank out of range" 2 "error: --rank 2 is not below --nproc 2" -- "$loom" explain --model gpt:tiny --nproc 2 --rank 2
expect "explain json names each collective's operation" 0 '"collective": "reduce_scatter"' '"rank": 0' -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --json
expect "explain json" 0 '"gathers_placed": true' -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --json
expect "explain LOOM_DEBUG" 0 "[loom] pass insert_gather_release: changed" -- env LOOM_DEBUG=1 "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain schedule error" 1 "error: shard_states on sch: params = 3 does not divide dp = 8" -- "$loom" explain tests/error/shard_states_divide.sched --model gpt2 --nproc 8

# The standard library fits every family, and so does docs/language.md's first example (taken
# from the doc itself); at the default world 1 the warnings say so, once per call.
sed -n '/^```$/,/^```$/p' docs/language.md | sed '1d' | sed '/^```$/,$d' > "$tmp/first_example.sched"
for model in gpt:tiny llama:tiny bert:tiny mixtral:tiny; do
  expect "stdlib on $model" 0 "ok (" -- "$loom" check tests/cli/stdlib_import.sched --model $model --world 2
  expect "docs/language.md's first example on $model" 0 "ok (" -- "$loom" check "$tmp/first_example.sched" --model $model --world 2
done
expect "world 1 warns that nothing is sharded" 0 "warning: prefetch on \`layers.0\`: at dp = 1 (world 1) nothing is sharded" \
  "hint: give the world size you will train with: \`loom check --world N\` (it defaults to 1)" \
  "note: the same warning for 3 more modules of this selection" -- "$loom" check tests/cli/stdlib_import.sched --model llama:tiny

# What `loom run` cannot honour yet, `loom check` refuses with run's message; the hints are true.
expect "check refuses a test-only fault under a mesh" 1 \
  "mesh_fault.sched:4:1: error: test_skip_reduction is not yet supported at runtime: with tensor or pipeline parallelism (mesh tp = 2, pp = 1) the runtime does not run test_skip_reduction yet" \
  "hint: remove it to train with the mesh's tensor parallelism, or remove the mesh (and its shard, sync and pipeline_split) to keep it" \
  -- env LOOM_TEST_PRIMITIVES=1 "$loom" check tests/cli/mesh_fault.sched --model gpt:tiny --world 4
expect "run refuses it the same way" 1 \
  "mesh_fault.sched:4:1: error: test_skip_reduction is not yet supported at runtime: with tensor or pipeline parallelism (mesh tp = 2, pp = 1)" \
  -- env LOOM_TEST_PRIMITIVES=1 "$loom" run tests/cli/mesh_fault.sched --model gpt:tiny --nproc 4 --steps 1
expect "a pipeline with ZeRO-3 inside its data-parallel groups checks" 0 "ok (" -- "$loom" check tests/cli/pipeline_zero3.sched --model gpt:tiny --world 4
expect "check accepts replace" 0 "ok (2 directives" -- "$loom" check tests/cli/replace.sched --model gpt:tiny --world 2
expect "explain says which modules another implementation runs" 0 "# h.0.attn runs gpt2_attention_chunked (replace)" \
  "# h.1.attn runs memory_efficient_attention (replace)" -- "$loom" explain tests/cli/replace.sched --model gpt:tiny --nproc 2
# The memory-efficient kernel keeps less for backward (at 128 tokens, 1.3 MiB of the eager 2.0), the same FLOPs.
expect "the replaced attention's compute instruction saves less" 0 "h.1.attn.c_attn                          83.9 MFLOP  saves 1.3 MiB" \
  "h.2.attn.c_attn                          83.9 MFLOP  saves 2.0 MiB" -- "$loom" explain tests/cli/replace.sched --model gpt:tiny --nproc 2 --seq 128
expect "zero(stage=3) at dp 1 beside a pipeline is plain data parallelism" 0 "ok (" -- "$loom" check tests/cli/pipeline_zero3.sched --model gpt:tiny --world 2
expect "shard_states(1, 1, 1) beside a mesh" 0 "ok (" -- "$loom" check tests/cli/mesh_plain_dp.sched --model gpt:tiny --world 2
expect "check accepts unshard(auto)" 0 "ok (" -- "$loom" check tests/cli/unshard_auto.sched --model gpt2 --world 2
expect "the auto passes act under --memory-limit" 0 "#   proactive_prefetch: changed" "#   selective_unshard: changed" \
  -- "$loom" explain tests/cli/unshard_auto.sched --model gpt:tiny --nproc 2 --memory-limit 1GiB
expect "without a limit they leave the program to prefetch's one block ahead" 0 "#   proactive_prefetch: unchanged" \
  "#   selective_unshard: unchanged" "#   prefetch: changed" -- "$loom" explain tests/cli/unshard_auto.sched --model gpt:tiny --nproc 2
# offload(budget=0) keeps every optimizer state on the host, whatever the limit: not adaptive.
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=0)\n' > "$tmp/offload_all.sched"
expect "offload(budget=0) under a limit offloads every state" 0 "#   adaptive_offload: unchanged" "#   offload_optimizer: changed" \
  -- "$loom" explain "$tmp/offload_all.sched" --model gpt:tiny --nproc 2 --memory-limit 7MiB
expect "a memory limit that is not a size" 2 "--memory-limit: expects a size such as 600MiB, 2GiB or a number of bytes (0: none), got 'lots'" \
  -- "$loom" explain tests/cli/unshard_auto.sched --model gpt:tiny --nproc 2 --memory-limit lots
expect "the auto passes keep the simulated peak within each limit, unsharding more as it grows" 0 "within" \
  -- python3 -c "
import json, subprocess
def run(*extra):
    out = subprocess.run(['$loom', 'simulate', 'tests/cli/unshard_auto.sched', '--model', 'gpt:tiny', '--nproc', '2', '--cluster',
                          'dgx-a100', '--json', *extra], capture_output=True, text=True, check=True).stdout
    return json.loads(out)
def backward_gathers(*extra):
    out = subprocess.run(['$loom', 'explain', 'tests/cli/unshard_auto.sched', '--model', 'gpt:tiny', '--nproc', '2', *extra],
                         capture_output=True, text=True, check=True).stdout
    return out.count('bwd  all_gather')
base = run('--memory-limit', '1')['peak_bytes']  # room for nothing: the base placement
kept = []
for mib in (26.5, 27, 28, 30):
    limit = int(mib * 2**20)
    assert base < limit, (base, limit)
    assert run('--memory-limit', str(limit))['peak_bytes'] <= limit, mib
    kept.append(backward_gathers('--memory-limit', str(limit)))
assert kept == sorted(kept, reverse=True) and kept[0] > kept[-1], kept
print('within')"
expect "a limit the base placement exceeds is said with the numbers" 0 "warning: the simulated peak 26.1 MiB is above --memory-limit 20.0 MiB" \
  -- "$loom" simulate tests/cli/unshard_auto.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --memory-limit 20MiB
# On a cluster the auto passes plan within 90% of its device by default; --memory-limit 0 is none,
# as on a run without a limit: prefetch(budget=auto) gathers one block ahead, not every block
# (the default) and not none (a limit of 1 byte: the base placement).
expect "simulate --memory-limit 0 on a cluster is no limit" 0 "one block ahead: between the two" -- bash -c "
  peak() { \"$loom\" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --json \"\$@\" 2> /dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[\"peak_bytes\"])'; }
  [ \$(peak --memory-limit 1) -lt \$(peak --memory-limit 0) ] && [ \$(peak --memory-limit 0) -lt \$(peak) ] && echo 'one block ahead: between the two'"
expect "run warns when the base placement is over the limit, with the numbers" 0 "loom run: warning: the step's predicted peak" \
  "is above the memory limit 1.0 MiB: its base placement" -- "$loom" run tests/cli/unshard_auto.sched --model gpt:tiny --nproc 2 \
  --seq 32 --micro-batch 2 --steps 1 --threads 1 --memory-limit 1MiB
# --replan-at (the two-level loop, docs/passes.md): its bounds, and what it does not combine with.
expect "a re-plan at step 1 has no measured step" 1 "error: --replan-at 1: the re-plan needs a measured step after the first and a step after it to run on (--steps 4)" \
  "hint: give --replan-at between 2 and --steps - 1, e.g. --replan-at 3" -- "$loom" run --model gpt:tiny --steps 4 --replan-at 1
expect "a re-plan at the last step has no step to run on" 1 "error: --replan-at 4: the re-plan needs a measured step after the first" \
  -- "$loom" run --model gpt:tiny --steps 4 --replan-at 4
expect "--replan-every needs a first re-plan" 1 "error: --replan-every 3 without --replan-at: it says how often to re-plan again after the first re-plan" \
  "hint: add --replan-at K for the first, e.g. --replan-at 3 --replan-every 3" -- "$loom" run --model gpt:tiny --steps 4 --replan-every 3
expect "a round of one step has nothing measured" 1 "error: --replan-every 1: a round runs the new program's first step unmeasured (warm-up) and measures the steps after it" \
  "hint: give at least 2, e.g. --replan-every 3" -- "$loom" run --model gpt:tiny --steps 8 --replan-at 2 --replan-every 1
expect "a resumed run does not re-plan" 1 "error: --replan-at with --resume: a resumed run does not re-plan yet" \
  "hint: drop --replan-at, or start the run afresh" -- "$loom" run --model gpt:tiny --steps 4 --replan-at 2 --resume "$tmp"
expect "verify does not re-plan (it compares one step)" 2 "The following arguments were not expected: 2 --replan-at" \
  -- "$loom" verify stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --replan-at 2
expect "verify with a NaN tolerance" 1 "error: --atol must be a finite number of at least 0, got nan" \
  "hint: give --atol (in Python: atol=) such as 1e-5" -- "$loom" verify stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --atol nan
expect "data parallelism has nothing to re-plan, and says so" 0 "loom run: --replan-at: nothing to re-plan: the memory-aware passes act on sharded runs only" \
  -- "$loom" run --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --steps 3 --threads 1 --replan-at 2
expect "a mesh has nothing to re-plan yet, and says so" 0 "loom run: --replan-at: nothing to re-plan: meshes are not re-planned yet; the run keeps its program" \
  -- "$loom" run tests/verify/tensor_parallel.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --steps 3 --threads 1 --replan-at 2
cp "$tmp/out" "$tmp/mesh_replan.out"  # expect writes the next command's output over $tmp/out
expect "... and its header promises no re-plan (it did until 2026-11-28)" 1 "" -- grep -q "re-plan: after step" "$tmp/mesh_replan.out"
expect "... where it says what it runs" 0 "" -- grep -q "mesh tp 2" "$tmp/mesh_replan.out"
expect "run takes the limit too" 2 "expects a size such as 600MiB" -- "$loom" run --model gpt:tiny --memory-limit 6XB
expect "unknown knob lists the declared ones" 1 "--set names knob 'nosuch', which the schedule never declares" \
  'hint: declared knobs: ["micro_batch", "ckpt_ratio"]' -- "$loom" run tests/cli/knobs.sched --model gpt:tiny --set nosuch=1 --steps 1
expect "a knob set for a schedule without knobs" 1 "hint: the schedule declares no knobs; remove --set bs" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --set bs=1

# batch(): the schedule sets the micro-batch and accumulation that run, simulate and explain use.
printf 'sch.batch(micro=3, accum=2)\n' > "$tmp/batch.sched"
expect "run trains the schedule's batch and says so" 0 "batch: micro-batch 3 (the schedule's batch()) x seq 16 x accum 2 (the schedule's batch())" \
  -- "$loom" run "$tmp/batch.sched" --model gpt:tiny --seq 16 --micro-batch 5 --steps 1 --threads 1
# A batch() larger than --micro-batch: the token buffer is the schedule's size (it was the flag's,
# and the ranks wrote past it and crashed at exit).
printf 'sch.batch(micro=8)\n' > "$tmp/batch_large.sched"
expect "run trains a batch() larger than --micro-batch" 0 "loom run: done: 3 steps" \
  -- "$loom" run "$tmp/batch_large.sched" --model gpt:tiny --nproc 2 --seq 64 --micro-batch 1 --steps 3 --threads 1 --data synthetic
expect "explain with batch() = explain with the flags" 0 "same" -- bash -c "cmp <(\"$loom\" explain \"$tmp/batch.sched\" \
  --model gpt:tiny --seq 16 --micro-batch 5) <(\"$loom\" explain --model gpt:tiny --seq 16 --micro-batch 3 --accum 2) && echo same"
expect "simulate with batch() = simulate with the flags" 0 "same" -- bash -c "cmp <(\"$loom\" simulate \"$tmp/batch.sched\" \
  --model gpt:tiny --nproc 2 --seq 16 --cluster dgx-a100 --json) <(\"$loom\" simulate --model gpt:tiny --nproc 2 --seq 16 \
  --micro-batch 3 --accum 2 --cluster dgx-a100 --json) && echo same"
expect "a profile of batch() prices it" 0 "2 micro-batch(es) of 3 x 16 tokens per rank" -- bash -c "\"$loom\" profile \"$tmp/batch.sched\" \
  --model gpt:tiny --seq 16 --nproc 1 --steps 1 --threads 1 --cache-dir \"$tmp/batch_cache\" --out \"$tmp/batch.json\" > /dev/null &&
  \"$loom\" simulate \"$tmp/batch.sched\" --model gpt:tiny --seq 16 --nproc 1 --profile \"$tmp/batch.json\""
printf 'sch.batch(micro=-1)\n' > "$tmp/batch_bad.sched"
expect "batch() below zero" 1 "batch_bad.sched:1:17: error: batch on sch: micro must be at least 1, got -1" \
  "hint: leave it out (or 0) to keep the command line's" -- "$loom" check "$tmp/batch_bad.sched" --model gpt:tiny
printf 'sch.batch()\n' > "$tmp/batch_none.sched"
expect "batch() that sets nothing" 0 "warning: batch on sch: batch() sets neither the micro-batch nor the accumulation" \
  -- "$loom" check "$tmp/batch_none.sched" --model gpt:tiny

# Outputs of every command are checked before work is spent.
touch "$tmp/afile"
expect "check --trace-json unwritable" 1 "error: --trace-json $tmp/afile/t.json: cannot create the directory $tmp/afile: '$tmp/afile' is a file, not a directory" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --trace-json "$tmp/afile/t.json"
expect "data prepare --out unwritable" 1 "error: --out /proc/x/c.bin: cannot create the directory /proc/x" -- "$loom" data prepare README.md --out /proc/x/c.bin
expect "data prepare past a file-size limit" 1 "error: --out: cannot write $tmp/big.bin.tmp: File too large" \
  "hint: free space, or choose another --out file" -- bash -c "ulimit -f 1; \"\$0\" data prepare README.md --out \"\$1\"" "$loom" "$tmp/big.bin"
expect "data prepare past a file-size limit left nothing" 0 "none" -- bash -c "ls \"\$0\"* 2>/dev/null || echo none" "$tmp/big.bin"
# An append-only directory (chattr +a) takes the tokens' new file beside --out but refuses to rename it.
mkdir "$tmp/append_only"
if chattr +a "$tmp/append_only" 2>/dev/null; then
  expect "data prepare whose rename fails" 1 \
    "error: --out: cannot rename $tmp/append_only/t.bin.tmp to $tmp/append_only/t.bin: Operation not permitted" \
    "hint: choose another --out file" -- "$loom" data prepare README.md --out "$tmp/append_only/t.bin"
  chattr -a "$tmp/append_only"
else
  echo "skipped: data prepare whose rename fails (chattr +a is not supported under $tmp)"
fi
expect "profile --out unwritable" 1 "error: --out $tmp: cannot write it: it is a directory" \
  -- "$loom" profile --model gpt:tiny --nproc 1 --steps 1 --cache-dir "$tmp/cache2" --out "$tmp"
expect "profile --cache-dir unwritable" 1 "error: --cache-dir /proc/x: cannot create the directory /proc/x" \
  -- "$loom" profile --model gpt:tiny --nproc 1 --steps 1 --cache-dir /proc/x
# A write that fails once the work is done (a full disk: /dev/full takes the open, refuses the
# bytes) names the file and why, and fails the command.
expect "plan --out on a full disk" 1 "loom plan: cannot write /dev/full: No space left on device" \
  -- "$loom" plan --model gpt:tiny --world 2 --local-world 2 --seq 64 --micro-batch 1 --cluster dgx-a100 --out /dev/full
for output in --trace --memory-plot; do
  expect "simulate $output on a full disk" 1 "loom simulate: cannot write /dev/full: No space left on device" \
    -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 "$output" /dev/full
done
# A profile that cannot be written whole leaves nothing in the cache to be read back as if it were
# (its output past a file-size limit; the run's own lines stay under it).
expect "profile past a file-size limit" 1 "could not write the profile: cannot write $tmp/cache5/gpt-tiny-w1-" "File too large" \
  "hint: free space, or give another --cache-dir" -- bash -c "ulimit -f 1; set -o pipefail; \"\$0\" profile --model gpt:tiny --nproc 1 --steps 1 --cache-dir \"\$1\" --out \"\$1.json\" | tail -c 500" \
  "$loom" "$tmp/cache5"
expect "profile past a file-size limit left no file" 0 "0 files" -- bash -c "echo \$(ls -A \"\$0\" | wc -l) files" "$tmp/cache5"
# fmt -i writes a new file beside the schedule and renames it over: a failed write (here past a
# file-size limit) leaves the schedule as it was, and nothing beside it.
for i in $(seq 0 59); do printf 'sch["h.%d"].prefetch(  budget=auto )\n' "$i"; done > "$tmp/long.sched"
cp "$tmp/long.sched" "$tmp/long.orig"
expect "fmt -i past a file-size limit" 1 "error: cannot rewrite $tmp/long.sched: File too large" \
  "hint: free space (or raise the file-size limit); $tmp/long.sched is unchanged" -- bash -c "ulimit -f 1; \"\$0\" fmt -i \"\$1\"" "$loom" "$tmp/long.sched"
expect "fmt -i left the file and nothing beside it" 0 "0 beside" -- bash -c "cmp \"\$0\" \"\$1\" && echo \$(ls -A \"\$2\" | grep -c loom-fmt) beside" \
  "$tmp/long.sched" "$tmp/long.orig" "$tmp"
chmod 640 "$tmp/long.sched"
expect "fmt -i rewrites, keeping the file's mode" 0 "640" -- bash -c "\"\$0\" fmt -i \"\$1\" && \"\$0\" fmt --check \"\$1\" && stat -c %a \"\$1\"" "$loom" "$tmp/long.sched"
# Through a symbolic link, the file it names is rewritten and the link stays.
cp "$tmp/long.orig" "$tmp/linked.sched"
ln -s "$tmp/linked.sched" "$tmp/link.sched"
expect "fmt -i through a symbolic link" 0 "a link to a formatted file" -- bash -c "\"\$0\" fmt -i \"\$1\" && [ -L \"\$1\" ] &&
  \"\$0\" fmt --check \"\$2\" && echo a link to a formatted file" "$loom" "$tmp/link.sched" "$tmp/linked.sched"
# A schedule that cannot be changed (chattr +i), or one in a directory that refuses renames (chattr +a).
cp "$tmp/long.orig" "$tmp/fixed.sched"
mkdir "$tmp/no_renames"
cp "$tmp/long.orig" "$tmp/no_renames/s.sched"
if chattr +i "$tmp/fixed.sched" 2>/dev/null && chattr +a "$tmp/no_renames" 2>/dev/null; then
  expect "fmt -i of an immutable schedule" 1 "error: cannot rewrite $tmp/fixed.sched: Operation not permitted" \
    "hint: make it writable, or print it with \`loom fmt $tmp/fixed.sched\`; $tmp/fixed.sched is unchanged" -- "$loom" fmt -i "$tmp/fixed.sched"
  expect "fmt -i where the rename is refused" 1 \
    "error: cannot rewrite $tmp/no_renames/s.sched: cannot rename the new file over it: Operation not permitted" \
    "hint: check that its directory lets files be renamed in it (an append-only one does not); $tmp/no_renames/s.sched is unchanged" \
    -- "$loom" fmt -i "$tmp/no_renames/s.sched"
  expect "fmt -i where the rename is refused left the schedule" 0 "unchanged" -- bash -c "cmp \"\$0\" \"\$1\" && echo unchanged" \
    "$tmp/no_renames/s.sched" "$tmp/long.orig"
  chattr -i "$tmp/fixed.sched"
  chattr -a "$tmp/no_renames"
else
  echo "skipped: fmt -i of an immutable schedule, and where renames are refused (chattr is not supported under $tmp)"
fi
expect "check --trace-json on a full disk" 1 "cannot write /dev/full: No space left on device" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --trace-json /dev/full
expect "profile --out on a full disk" 1 "error: --out: cannot write /dev/full: No space left on device" \
  "hint: free space, or choose another file; the profile stays in $tmp/cache3/gpt-tiny-w1-" \
  -- "$loom" profile --model gpt:tiny --nproc 1 --steps 1 --cache-dir "$tmp/cache3" --out /dev/full

# Whole-schedule rules (verifier/) run in check.
expect "memory limit" 1 "error: model states need" -- "$loom" check stdlib_schedules/zero1.sched --model gpt2 --world 8 --memory-limit 500MB
# The rule counts the states as the runtime keeps them, as the simulator does (lins.txt's 2/2/12
# would put ZeRO-1's 684 MB under 900 MB).
expect "memory limit, as the runtime keeps the states" 1 \
  "error: model states need 1.04 GiB per rank, above --memory-limit 858.3 MiB (4/1 + 4/1 + 8/8 bytes for each of 124439808 parameters: fp32 parameters and gradients, AdamW's two moments)" \
  -- "$loom" check stdlib_schedules/zero1.sched --model gpt2 --world 8 --memory-limit 900MB
expect "memory limit fits" 0 "ok (" -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 80GiB
# Under a mesh the rule's figure is a rank's average share, a bound: tensor parallelism leaves the
# embeddings and norms whole on each rank. The walk that follows counts each rank's own: at a limit
# between the two (the rule's 6.6 MiB, the walk's 7.1 MiB of states) the walk refuses.
expect "memory limit under a mesh: the rule's bound" 1 "error: model states need at least 6.6 MiB per rank" \
  "429440 is a rank's average 1/2 share of the model, which a rank may exceed" -- "$loom" check examples/gpt_tp2.sched --model gpt:tiny --world 2 --memory-limit 6MiB
expect "memory limit under a mesh: the walk counts each rank's own" 1 "error: the step needs " "above --memory-limit 6.8 MiB" \
  "(7.1 MiB of it held all step" -- "$loom" check examples/gpt_tp2.sched --model gpt:tiny --world 2 --memory-limit 6.8MiB
expect "memory limit not a size" 2 "--memory-limit: expects a size such as 600MiB, 2GiB or a number of bytes (0: none), got 'lots'" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit lots
# Every command reads a size alike: decimal digits, a unit, at least a byte, within 64 bits.
expect "a memory limit below a byte" 2 "got '0.3B', which is less than one byte" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 0.3B
expect "a memory limit in hexadecimal" 2 "got '0x10'" -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster dgx-a100 --memory-limit 0x10
expect "a memory limit past 64 bits" 2 "got '99999999TiB', which is too large" \
  -- "$loom" tune examples/gpt_tuned.sched --model gpt:tiny --nproc 2 --memory-limit 99999999TiB
expect "a memory limit with an exponent" 2 "got '1e9'" -- "$loom" plan --model gpt:tiny --world 2 --cluster dgx-a100 --memory-limit 1e9
expect "a memory limit of 0 is none, in check too" 0 "ok (" -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 0
# Beyond the states, check walks the step's memory as `loom simulate` does (backend/sim/memory_walk.h):
# ZeRO-3's states fit 20 MiB at world 2, its step at 4 x 128 tokens does not. The hint leaves out
# what the schedule already does (it shards everything).
expect "check: the step over the limit, by the simulator's walk" 1 \
  "error: the step needs 26.1 MiB per rank at its peak, above --memory-limit 20.0 MiB: instruction 182 (fwd compute lm_head), at 1 micro-batch(es) of 4 x 128 tokens" \
  "hint: checkpoint() the blocks, offload(\"optimizer\", budget=auto), or a smaller --micro-batch or --seq; \`loom simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --micro-batch 4 --seq 128 --accum 1 --cluster NAME --memory-limit 20971520 --memory-plot memory.svg\` draws where the memory goes" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 20MiB
expect "check: the step error as JSON" 1 '"message":"the step needs 26.1 MiB per rank at its peak' \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 20MiB --json
expect "check: the step at a smaller micro-batch fits" 0 \
  "ok (5 directives, 0 warnings) for gpt:tiny at world 2, the step's peak 9.9 MiB within --memory-limit 20.0 MiB at 1 micro-batch(es) of 1 x 16 tokens" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 20MiB --micro-batch 1 --seq 16
expect "check: accumulation is in the step checked" 1 "at 2 micro-batch(es) of 4 x 128 tokens" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 20MiB --accum 2
expect "check: a step longer than the model's context" 1 "error: --seq 100000 is longer than model gpt:tiny's context of 256 tokens" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 20MiB --seq 100000
expect "check: the step's shape without a limit is noted" 0 "note: --micro-batch, --seq and --accum shape the step --memory-limit checks; without a limit they are not used" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --seq 16
# A schedule's batch() sets the micro-batch: the hint says so, and --micro-batch does not change it.
printf 'sch.batch(micro=4)\n' > "$tmp/batch4.sched"
expect "check: the micro-batch of the schedule's batch()" 1 "at 1 micro-batch(es) of 4 x 128 tokens" \
  "hint: shard more (sch.zero(stage=3), or shard_states), checkpoint() the blocks, or a smaller micro-batch in the schedule's batch(), or a smaller --seq" \
  -- "$loom" check "$tmp/batch4.sched" --model gpt:tiny --world 2 --memory-limit 20MiB --micro-batch 1
printf 'sch.mesh(pp=2)\nsch["h.1"].pipeline_split()\n' > "$tmp/pp.sched"
expect "check: a pipeline's highest stage is named" 1 "error: the step needs 18.1 MiB per rank at its peak, above --memory-limit 12.0 MiB: stage 1, instruction 17 (fwd compute lm_head)" \
  -- "$loom" check "$tmp/pp.sched" --model gpt:tiny --world 2 --memory-limit 12MiB
# With optimizer states offloaded the walk counts them off the device: adaptive offloading moves
# what does not fit to the host.
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=auto)\n' > "$tmp/zero3_offload.sched"
expect "check: states offloaded to the host are not counted on the device" 0 "ok (" "within --memory-limit 7.0 MiB" \
  -- "$loom" check "$tmp/zero3_offload.sched" --model gpt:tiny --world 2 --memory-limit 7MiB --micro-batch 1 --seq 16
expect "check: ... where the same step keeping them is over it (the drawing command draws that step)" 1 \
  "error: the step needs 8.1 MiB per rank at its peak, above --memory-limit 7.0 MiB" \
  "--nproc 2 --micro-batch 1 --seq 16 --accum 1 --cluster NAME --memory-limit 7340032 --memory-plot memory.svg" \
  -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 7MiB --micro-batch 1 --seq 16
# Every state on the host (budget=0): the states rule counts 3.3 MiB of them off the device (the
# states 6.6 MiB, 3.3 MiB then), and the step is within 6 MiB.
printf 'sch.zero(stage=3)\nsch.offload("optimizer", budget=0)\n' > "$tmp/zero3_offload_all.sched"
expect "check: states on the host are not counted by the rule either" 0 "the step's peak 4.8 MiB within --memory-limit 6.0 MiB" \
  -- "$loom" check "$tmp/zero3_offload_all.sched" --model gpt:tiny --world 2 --memory-limit 6MiB --micro-batch 1 --seq 8


# A measured profile prices the IR; one of another model is refused, naming both ops.
prof="profile --model gpt:tiny --nproc 2 --steps 1 --seq 32 --micro-batch 2 --threads 1 --cache-dir $tmp/cache"
expect "profile" 0 "collectives (alpha-beta fit" "(from 1 measured step: one in which a rank waited for a late peer would set it; --steps 3 or more take the median)" \
  "step tail: optimizer step " "(429440 elements on the rank updating most)" "gradient norm's own work " \
  "unpacking at waits (members copied out of a collective's buffer): none" \
  "each (the slowest rank's median, this profiler's work included); the passes planned within no memory limit" \
  -- "$loom" $prof stdlib_schedules/zero3.sched --out "$tmp/profile.json"
# Each rank updates half of gpt:tiny's 858,880 parameters: what "this machine" prices the optimizer's memory rate by.
expect "profile records the elements the update changed" 0 '"optimizer_elements": 429440' -- cat "$tmp/profile.json"
expect "profile cached" 0 "loom profile: reusing $tmp/cache/gpt-tiny-w2-" -- "$loom" $prof stdlib_schedules/zero3.sched
# On a CPU no limit given is none, as 0 is: the same profile.
expect "profile cached under --memory-limit 0" 0 "loom profile: reusing $tmp/cache/gpt-tiny-w2-" \
  -- "$loom" $prof stdlib_schedules/zero3.sched --memory-limit 0
# A profile keeps the limit its run's passes planned within (another limit is another profile, not
# the cached one); simulate and explain on it plan within that limit, so they lower the program
# measured (zero3's prefetch(budget=auto) gathers further ahead under 1 GiB than without a limit).
expect "profile records its memory limit" 0 '"memory_limit_bytes": 1073741824' "the passes planned within 1.00 GiB" \
  -- bash -c "\"$loom\" $prof stdlib_schedules/zero3.sched --memory-limit 1GiB --out \"$tmp/profile_1g.json\" && cat \"$tmp/profile_1g.json\""
expect "simulate --profile plans within the profiled run's limit" 0 "the program measured" -- bash -c "
  s() { \"$loom\" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile \"$tmp/profile_1g.json\" \
    --json \"\$@\" | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d[\"peak_bytes\"], d[\"peak_instruction\"], d[\"step_s\"])'; }
  [ \"\$(s)\" = \"\$(s --memory-limit 1GiB)\" ] && [ \"\$(s)\" != \"\$(s --memory-limit 0)\" ] && echo the program measured"
expect "explain --profile plans within the profiled run's limit" 0 "the program measured" -- bash -c "
  e() { \"$loom\" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile \"$tmp/profile_1g.json\" \"\$@\" | md5sum; }
  [ \"\$(e)\" = \"\$(e --memory-limit 1GiB)\" ] && [ \"\$(e)\" != \"\$(e --memory-limit 0)\" ] && echo the program measured"
expect "simulate over the profiled run's limit says whose it is" 0 \
  "is above 976.6 KiB, the limit the profiled run planned within (--memory-limit sets another limit)" -- bash -c "
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); j[\"memory_limit_bytes\"] = 1000000; json.dump(j, open(sys.argv[2], \"w\"))' \
    \"$tmp/profile_1g.json\" \"$tmp/profile_1m.json\"
  \"$loom\" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile \"$tmp/profile_1m.json\" 2>&1"
# The measured step's collectives set one in-step scale (a measurement: positive, never exactly the default 1).
expect "profile measures its collectives in the step" 0 "one in-step scale" -- python3 -c "
import json, sys
scales = {c['in_step_scale'] for c in json.load(open(sys.argv[1]))['collectives']}
print('one in-step scale' if len(scales) == 1 and min(scales) > 0 and scales != {1.0} else 'scales: %s' % scales)" "$tmp/profile.json"
expect "explain --profile" 0 "# estimate from $tmp/profile.json (serial sums" "ms, gradient norm " "ms, unpacking at waits none" \
  -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
expect "explain --profile of another run" 2 "error: $tmp/profile.json was measured for another run: micro_batch 2 (this run: 4), seq 32 (this run: 128)" \
  "hint: measure this run with \`loom profile\`" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --profile "$tmp/profile.json"
# ... and the passes plan with its times: bucket(size=auto) sizes buckets for overlap (the program
# a run's --replan-at settles on) where without times it buckets each block whole. The profile's
# times are set, not measured: every op (each rank's too) a nanosecond, every collective 10 ms
# and 1 ms a KB, so that no gather hides behind compute and each is a bucket of its own whatever
# load this machine measured under (scaling the measured times instead landed, once in many
# runs, on as many buckets as blocks).
printf 'import "stdlib/zero3.sched"\nsch.blocks().bucket(size=auto)\n' > "$tmp/bucket_auto.sched"
/usr/bin/python3 -c "import json, sys; p = json.load(open(sys.argv[1]))
for op in p['ops']:
    for key in ('forward_ms', 'backward_ms', 'forward_host_ms', 'backward_host_ms'):
        if key in op: op[key] = 1e-6
    for key in ('forward_ms_by_rank', 'backward_ms_by_rank'):
        if key in op: op[key] = [1e-6] * len(op[key])
for c in p['collectives']:
    c['alpha_ms'], c['beta_ms_per_byte'], c['in_step_scale'] = 10.0, 1e-3, 1.0
    c['samples_bytes_ms'] = [[b, 10.0 + 1e-3 * b] for b, ms in c['samples_bytes_ms']]
json.dump(p, open(sys.argv[2], 'w'))" "$tmp/profile.json" "$tmp/fast_compute.json"
expect "explain --profile plans with the measured times" 0 "the buckets differ" -- bash -c "
  \"$loom\" explain \"$tmp/bucket_auto.sched\" --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --memory-limit 1GiB > \"$tmp/untimed.txt\" || exit 1
  \"$loom\" explain \"$tmp/bucket_auto.sched\" --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --memory-limit 1GiB \\
    --profile \"$tmp/fast_compute.json\" > \"$tmp/timed.txt\" || exit 1
  a=\$(grep -c all_gather \"$tmp/untimed.txt\"); b=\$(grep -c all_gather \"$tmp/timed.txt\")
  echo \"all_gathers without times \$a, with \$b\"; [ \"\$a\" -lt \"\$b\" ] && echo 'the buckets differ'"
# loom simulate --replanned prices that program: the step differs from the one a run starts with.
expect "simulate --replanned plans with the profile's times" 0 "the steps differ" -- python3 -c "
import json, subprocess
def step(*extra):
    out = subprocess.run(['$loom', 'simulate', '$tmp/bucket_auto.sched', '--model', 'gpt:tiny', '--nproc', '2', '--seq', '32',
                          '--micro-batch', '2', '--memory-limit', '1GiB', '--profile', '$tmp/fast_compute.json', '--json', *extra],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)['step_s']
start, replanned = step(), step('--replanned')
print('start %.6f s, replanned %.6f s' % (start, replanned)); print('the steps differ' if start != replanned else 'same')"
expect "simulate --replanned on a cluster" 2 "error: --replanned plans with a profile's measured times; this run is priced on a cluster" \
  "hint: give --profile FILE instead of --cluster" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --replanned
expect "explain --profile other model" 2 "error: $tmp/profile.json was measured for another run: model gpt:tiny (this run: llama:tiny)" \
  -- "$loom" explain --model llama:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
expect "explain --profile missing" 2 "error: cannot read the profile '$tmp/none.json'" -- "$loom" explain --model gpt:tiny --nproc 2 --profile "$tmp/none.json"
expect "explain --profile not a profile" 2 "is not a readable Loom profile" -- "$loom" explain --model gpt:tiny --nproc 2 --profile stdlib_schedules/zero3.sched

# loom simulate (issue #15): the step replayed on a cluster's cost model or a measured profile.
expect "simulate on a cluster" 0 "cluster dgx-a100" "exposed comm" "peak memory" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100
expect "simulate --json" 0 '"step_s"' '"compute_s"' '"exposed_comm_s"' '"peak_bytes"' \
  -- "$loom" simulate examples/gpt_tp.sched --model gpt:50m --nproc 4 --cluster dgx-h100 --json
expect "simulate --json: the step is its compute and exposed communication, the peak above the model states" 0 "sane" \
  -- python3 -c "
import json, subprocess
j = json.loads(subprocess.run(['$loom', 'simulate', 'examples/gpt_tp.sched', '--model', 'gpt:50m', '--nproc', '4', '--cluster',
                               'dgx-h100', '--json'], capture_output=True, text=True, check=True).stdout)
assert j['step_s'] > 0 and j['compute_s'] > 0, j
assert abs(j['compute_s'] + j['exposed_comm_s'] - j['step_s']) < 1e-12, j
assert j['peak_bytes'] > 50e6 * 16 / 4 / 2, j  # gpt:50m's states, 16 bytes an element, over tp 2 x pp 2, at least half
print('sane')"
expect "simulate --profile" 0 "profile $tmp/profile.json" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
expect "simulate --profile replays each rank at its own op times" 0 "each of the 2 ranks simulated at its own measured op times" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
expect "simulate --json: ranks simulated each" 0 '"ranks_simulated": 2' \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json" --json
expect "simulate --profile says what the profiled steps took" 0 "  profiled step " "its profiler's work included" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
expect "simulate --json: the profiled step on a profile, -1 on a cluster" 0 "profiled 1 cluster 1" -- bash -c "
  p=\$(\"$loom\" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile \"$tmp/profile.json\" --json)
  c=\$(\"$loom\" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --json)
  echo profiled \$(echo \"\$p\" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)[\"profiled_step_s\"] > 0))') \
    cluster \$(echo \"\$c\" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)[\"profiled_step_s\"] == -1))')"
expect "simulate --representative: one rank at the slowest rank's times" 0 '"ranks_simulated": 1' \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json" \
  --json --representative
expect "--representative needs a profile" 2 \
  "error: --representative chooses how a profile's ranks are simulated; this run is priced on a cluster" \
  "hint: give --profile FILE, or leave --representative out (a cluster's ranks are always simulated by one per stage)" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --representative
# This machine as a cluster, from the profile: loom plan plans for it.
expect "simulate --save-cluster" 0 "step" "loom simulate: note: $tmp/profile.json was measured under a schedule with collectives on" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 \
  --micro-batch 2 --profile "$tmp/profile.json" --save-cluster "$tmp/here.json"
expect "this machine's cluster: a memory rate for each kind of work, and a link beside compute" 0 "efficiencies within (0, 1], one of them 1" \
  '"intra_node_beside_compute"' -- bash -c "cat '$tmp/here.json'; python3 -c \"import json; e=[x[1] for x in json.load(open('$tmp/here.json'))['device']['memory_efficiency_by_mb']]
print('efficiencies within (0, 1], one of them 1' if all(0 < x <= 1 for x in e) and max(e) == 1 else e)\""
expect "simulate --save-cluster on a full disk" 1 "loom simulate: cannot write /dev/full: No space left on device" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json" \
  --save-cluster /dev/full
expect "plan on this machine, its progress timed" 0 "loom plan: gpt:tiny on 2 ranks of here" "plans simulated" " configurations in " \
  -- "$loom" plan --model gpt:tiny --world 2 --seq 32 --micro-batch 2 --cluster "$tmp/here.json"
expect "--save-cluster needs a profile" 2 "error: --save-cluster derives this machine from a profile; this run is priced on a cluster" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster dgx-a100 --save-cluster "$tmp/there.json"
expect "simulate --trace --memory-plot" 0 "step" \
  -- "$loom" simulate tests/verify/pipeline.sched --model gpt:tiny --nproc 2 --cluster dgx-a100 --trace "$tmp/sim.json" --memory-plot "$tmp/mem.svg"
expect "simulate's trace is a Chrome trace with both stages" 0 "stages 2" \
  -- python3 -c "import json,sys; e=json.load(open('$tmp/sim.json'))['traceEvents']; print('stages', len({x['pid'] for x in e if x['ph']=='X'}))"
expect "simulate's memory plot is an SVG" 0 "<svg" "<polyline" ">peak " -- cat "$tmp/mem.svg"
# loom report: a run's metrics and trace as SVG plots, rendered to PNG as a person would see them.
expect "a run with metrics and a trace" 0 "4 steps" -- "$loom" run stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 \
  --steps 4 --seq 32 --micro-batch 2 --threads 1 --metrics "$tmp/run.jsonl" --trace "$tmp/run_trace.json"
expect "report" 0 "loom report: 4 steps; wrote $tmp/report/loss.svg $tmp/report/throughput.svg $tmp/report/memory.svg $tmp/report/step_time.svg" \
  "rank      step ms    compute exposed comm     idle" -- "$loom" report "$tmp/run.jsonl" --trace "$tmp/run_trace.json" --out "$tmp/report"
# Each rank's shares add up to its step, and compute and communication both take some of it.
expect "report's shares add up" 0 "rank 0 sums to 100" "rank 1 sums to 100" -- bash -c "
  \"$loom\" report \"$tmp/run.jsonl\" --trace \"$tmp/run_trace.json\" --out \"$tmp/report\" | awk '/^[01] /{
    c=\$3+0; x=\$4+0; i=\$5+0; s=c+x+i; if (c > 0 && x > 0 && s > 99.8 && s < 100.2) print \"rank \" \$1 \" sums to 100\" }'"
expect "report's plots render" 0 "4 PNG" -- bash -c "n=0; for f in loss throughput memory step_time; do
  rsvg-convert \"$tmp/report/\$f.svg\" -o \"$tmp/report/\$f.png\" && file \"$tmp/report/\$f.png\" | grep -q 'PNG image data' && n=\$((n + 1)); done; echo \$n PNG"
expect "report draws a line per metric and a bar per rank and step" 0 "3 lines, 8 bars" -- bash -c "
  echo \$(cat \"$tmp/report/\"{loss,throughput,memory}.svg | grep -c 'class=\"series\"') lines, \$(grep -c 'class=\"compute\"' \"$tmp/report/step_time.svg\") bars"
expect "report without metrics" 2 "error: cannot read the metrics file '$tmp/none.jsonl'" "hint: pass the file \`loom run --metrics\` wrote" \
  -- "$loom" report "$tmp/none.jsonl" --out "$tmp/report"
expect "report of a file that is not metrics" 2 "error: $tmp/run_trace.json:1 is not a metrics row" \
  -- "$loom" report "$tmp/run_trace.json" --out "$tmp/report"
expect "report of the simulator's trace" 2 "error: $tmp/sim.json has no steps: its trace has no \"step\" spans" \
  "hint: write the trace with this Loom's \`loom run --trace\`" -- "$loom" report "$tmp/run.jsonl" --trace "$tmp/sim.json" --out "$tmp/report"
expect "report of a missing trace" 2 "error: cannot read the trace '$tmp/none.json'" "hint: pass the file \`loom run --trace\` wrote" \
  -- "$loom" report "$tmp/run.jsonl" --trace "$tmp/none.json" --out "$tmp/report"
expect "report of a trace that is not JSON" 2 "error: README.md is not JSON" -- "$loom" report "$tmp/run.jsonl" --trace README.md --out "$tmp/report"
expect "report past a file-size limit" 2 "error: --out: cannot write $tmp/report_full/loss.svg: File too large" \
  "hint: free space, or choose an --out directory you can write to" \
  -- bash -c "ulimit -f 1; \"\$0\" report \"\$1\" --out \"\$2\"" "$loom" "$tmp/run.jsonl" "$tmp/report_full"
expect "report into a directory it cannot make" 2 "error: cannot create the --out directory '$tmp/run.jsonl/plots'" \
  -- "$loom" report "$tmp/run.jsonl" --out "$tmp/run.jsonl/plots"
expect "simulate without a cost model" 2 "error: loom simulate needs one cost model: --cluster NAME or --profile FILE" \
  -- "$loom" simulate --model gpt:tiny --nproc 2
expect "simulate on a cluster and a profile at once" 2 "error: loom simulate takes one cost model, not both: --cluster dgx-a100 or --profile README.md" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster dgx-a100 --profile README.md
expect "simulate on a profile that is a directory" 2 "error: the profile 'docs' is a directory" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --profile docs
expect "simulate on an unknown cluster" 2 "error: no cluster named 'dgx-z' (known: dgx-a100, dgx-h100, lins-a800)" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster dgx-z
expect "simulate more ranks than the cluster has" 2 "error: --nproc 4096 is more than cluster dgx-a100 has (128 devices)" \
  -- "$loom" simulate --model gpt:tiny --nproc 4096 --cluster dgx-a100
expect "simulate on a profile of another run" 2 "error: $tmp/profile.json was measured for another run: world 2 (this run: 4), micro_batch 2 (this run: 4), seq 32 (this run: 128)" \
  -- "$loom" simulate stdlib_schedules/zero3.sched --model gpt:tiny --nproc 4 --profile "$tmp/profile.json"
expect "simulate with more ranks per node than the cluster's nodes have" 2 "error: --local-world 16 is more than a node of cluster dgx-a100 has (8 devices)" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --local-world 16 --cluster dgx-a100
expect "simulate a pipeline on a profile without its transfers" 2 "error: $tmp/profile.json has no measurement of send on the \`stage_pair\` group (instruction 14)" \
  "hint: measure this schedule with \`loom profile\`" \
  -- "$loom" simulate tests/verify/pipeline.sched --model gpt:tiny --nproc 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
echo '{"name": 3}' > "$tmp/bad_cluster.json"
expect "simulate on a malformed cluster file" 2 "error: $tmp/bad_cluster.json: \`name\` must be a string, not 3" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster "$tmp/bad_cluster.json"

# loom plan (issue #15 §4): the plans searched, simulated and ranked; the best written as a schedule.
expect "plan" 0 "plans simulated" "rank  tp  pp  s_p  s_g  s_os" \
  "memory limit 72.00 GiB per rank, 90% of its devices' 80.00 GiB (--memory-limit sets another)" \
  "  communication (ms each kind kept its stream busy on the stage that ends the step, hidden by compute or not):" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --checkpoint auto
# The breakdown names what each plan moves, and on one stage adds up to at least its exposed
# communication (busy time hidden by compute is in it too; a pipeline's bubble is not).
expect "plan's communication breakdown" 0 "breakdowns hold the exposed time" -- python3 -c "
import json, subprocess
plans = json.loads(subprocess.run(['$loom', 'plan', '--model', 'gpt:tiny', '--world', '4', '--cluster', 'dgx-a100', '--top', '40',
                                   '--json'], capture_output=True, text=True, check=True).stdout)['plans']
for p in plans:
    busy = p['comm_busy_s']
    assert p['pp'] > 1 or sum(busy.values()) >= p['exposed_comm_s'] - 1e-12, p
    assert (p['params'] > 1) == any(k.startswith('all_gather on ') for k in busy), p
    assert (p['tp'] > 1) == ('tp_all_reduce on tp' in busy), p
    assert (p['pp'] > 1) == ('send on stage_pair' in busy), p
print('breakdowns hold the exposed time')"
# Plans are lowered on the model's traced shapes (meta device): planning llama3-70b, 280 GB of
# fp32 weights, stays under 2 GiB of memory in all.
expect "plan allocates no weights" 0 "planned llama3-70b in" -- /usr/bin/python3 -c "
import resource, subprocess
subprocess.run(['$loom', 'plan', '--model', 'llama3-70b', '--world', '64', '--local-world', '8', '--seq', '1024',
                '--micro-batch', '1', '--checkpoint', 'auto', '--cluster', 'lins-a800', '--top', '1'], capture_output=True, check=True)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB
print('planned llama3-70b in %.0f MiB' % (rss / 1024) if rss < 2 * 1024 * 1024 else 'peak RSS %d KiB' % rss)"
expect "plan --memory-limit 0 judges plans by all of the device's memory" 0 "the whole device" -- bash -c \
  "\"$loom\" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 0 2>/dev/null | head -1 | grep -q 'memory limit 80.00 GiB per rank$' && echo the whole device"
expect "plan --json" 0 '"plans"' '"params"' '"grads"' '"optim"' '"tp"' '"pp"' '"step_s"' '"mfu"' '"peak_bytes"' \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --json
# Best first: by tokens per second per rank, and among plans of the same replicas (the same
# tokens per step) by step time; every configuration is accounted for once; each MFU is the
# replicas' model FLOPs over the step at the devices' peak, so MFU x step / replicas is one figure.
expect "plan --json ranks best first and counts every configuration" 0 "ranked, counted" -- python3 -c "
import json, subprocess
r = json.loads(subprocess.run(['$loom', 'plan', '--model', 'gpt:tiny', '--world', '4', '--cluster', 'dgx-a100', '--top', '1000',
                               '--checkpoint', 'auto', '--json'], capture_output=True, text=True, check=True).stdout)
plans = r['plans']
assert len(plans) == r['evaluated'] - (r['over_memory'] - r['over_memory_by_states']) and len(plans) > 10, r
assert r['configurations'] == r['evaluated'] + r['over_memory_by_states'] + r['refused'], r
tps = [p['tokens_per_s_per_rank'] for p in plans]
assert tps == sorted(tps, reverse=True), tps
replicas = lambda p: 4 // (p['tp'] * p['pp'])
for a, b in zip(plans, plans[1:]):
    if replicas(a) == replicas(b): assert a['step_s'] <= b['step_s'], (a, b)
same = [p['mfu'] * p['step_s'] / replicas(p) for p in plans]
assert max(same) - min(same) <= 1e-9 * max(same), same
print('ranked, counted')"
expect "plan --out" 0 "wrote the best plan to $tmp/best.sched" -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --out "$tmp/best.sched"
expect "the written plan says what it is" 0 "# Generated by \`loom plan\` for gpt:tiny on 4 ranks of cluster dgx-a100 (4 per node)" \
  -- cat "$tmp/best.sched"
# ... and what it is predicted to cost: the best plan's own figures, as --json gives them.
expect "the written plan says what it costs" 0 "the header's cost is the best plan's" -- python3 -c "
import json, re, subprocess
best = json.loads(subprocess.run(['$loom', 'plan', '--model', 'gpt:tiny', '--world', '4', '--cluster', 'dgx-a100', '--json'],
                                 capture_output=True, text=True, check=True).stdout)['plans'][0]
header = open('$tmp/best.sched').read()
m = re.search(r'# Predicted by the simulator \(docs/simulate.md\): step ([0-9.]+) ms, MFU ([0-9.]+)%, peak memory ([0-9.]+) (KiB|MiB|GiB) per rank', header)
assert m, header
unit = {'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}[m.group(4)]
assert abs(float(m.group(1)) - best['step_s'] * 1e3) <= 0.05, (m.group(1), best)
assert abs(float(m.group(2)) - best['mfu'] * 100) <= 0.05, (m.group(2), best)
assert abs(float(m.group(3)) * unit - best['peak_bytes']) <= 0.05 * unit, (m.group(3), best)
print(\"the header's cost is the best plan's\")"
expect "the written plan checks" 0 "ok (" -- "$loom" check "$tmp/best.sched" --model gpt:tiny --world 4
expect "the written plan runs the memory-efficient attention" 0 'sch["h.*.attn"].replace("memory_efficient_attention")' -- cat "$tmp/best.sched"
"$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --attention eager --out "$tmp/eager.sched" > /dev/null 2>&1
expect "plan --attention eager keeps the model's own" 1 "" -- grep -q "replace" "$tmp/eager.sched"
# --memory-passes auto: sharded plans gather by DeepCompile's passes within the limit. Under 12 MiB
# the best is a sharded pipeline whose prefetching stays under the limit (a block ahead does not).
expect "plan --memory-passes auto" 0 ", sharded plans gathering by the memory-aware passes within it" \
  "  1      1   2    2    2     2  none" "wrote the best plan to $tmp/aware.sched" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 12MiB --memory-passes auto --out "$tmp/aware.sched"
expect "the written plan gathers by the passes, within its limit" 0 \
  "# Its memory-aware passes were planned within 12.0 MiB per rank: run it with --memory-limit 12MiB (docs/passes.md)." \
  "sch.blocks().prefetch(budget=auto)" "sch.blocks().unshard(auto)" -- cat "$tmp/aware.sched"
expect "gathering a block ahead, that plan is over the limit" 1 "" -- bash -c \
  "\"$loom\" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 12MiB --top 20 2>/dev/null | grep -q ' 1   2    2    2     2  none'"
expect "the memory-aware plan runs" 0 "loom run: done: 2 steps" \
  -- "$loom" run "$tmp/aware.sched" --model gpt:tiny --nproc 4 --memory-limit 12MiB --steps 2 --threads 1
# Without them a sharded plan was priced gathering a block ahead: its header says how to run it so.
"$loom" plan --model llama-7b --world 1024 --local-world 8 --seq 4096 --micro-batch 1 --cluster lins-a800 --top 1 \
  --out "$tmp/lins.sched" > /dev/null 2>&1
expect "a plan gathering a block ahead says to run it without a limit" 0 "sch.shard_states(params=8, grads=8, optim=8)" \
  "# Priced gathering each block one block ahead, as prefetch() does without a memory limit: run it with --memory-limit 0 to run as priced" \
  -- cat "$tmp/lins.sched"
expect "plan --memory-passes takes off or auto" 2 "--memory-passes: sometimes" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-passes sometimes
# A plan with tensor parallelism and sharded states, as the planner writes it, trains what the plain model does.
"$loom" plan --model llama:tiny --world 4 --cluster dgx-a100 --json --top 100 2>/dev/null | python3 -c "
import json, sys
plans = json.load(sys.stdin)['plans']
print([p for p in plans if p['tp'] == 2 and p['pp'] == 1 and p['params'] == 2][0]['schedule'])" > "$tmp/tp_plan.sched"
expect "a planned tensor-parallel schedule verifies" 0 "equivalent (" \
  -- "$loom" verify "$tmp/tp_plan.sched" --model llama:tiny --seq 32 --micro-batch 2 --threads 1 --nproc 4
# Plans are evaluated on several threads; the result does not depend on how many.
plans_with() { "$loom" plan --model llama:tiny --world 4 --cluster dgx-a100 --checkpoint auto --json --top 100 --threads "$1" 2>/dev/null; }
plans_with 1 > "$tmp/plans1.json"
plans_with 2 > "$tmp/plans2.json"
expect "plan: the same plans on one thread and on two" 0 "" -- cmp "$tmp/plans1.json" "$tmp/plans2.json"
expect "plan: plans on one thread were found" 0 '"plans"' -- cat "$tmp/plans1.json"
expect "plan without a cost model" 2 "error: loom plan needs one cost model: --cluster NAME or --profile FILE" \
  -- "$loom" plan --model gpt:tiny --world 4
expect "plan on a profile of another run" 2 "error: $tmp/profile.json was measured for another run: world 2 (this run: 4)" \
  -- "$loom" plan --model gpt:tiny --world 4 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
# --profile plans on the machine the profile measured: the same plans as on its saved cluster.
# The profile is ZeRO-3's, whose ops ran beside its gathers on the same cores: a note says so.
expect "plan on a profile" 0 "loom plan: gpt:tiny on 2 ranks of this machine ($tmp/profile.json)" \
  "loom plan: note: $tmp/profile.json was measured under a schedule with collectives on \`params\`, not data parallelism's: its ops shared the cores" \
  "loom plan: hint: derive it from a data-parallel profile: loom profile --model gpt:tiny --nproc 2 --out FILE" \
  -- "$loom" plan --model gpt:tiny --world 2 --seq 32 --micro-batch 2 --profile "$tmp/profile.json"
best_plan() { "$loom" plan --model gpt:tiny --world 2 --seq 32 --micro-batch 2 "$@" --json 2>/dev/null |
  python3 -c "import json, sys; p = json.load(sys.stdin)['plans'][0]; print(p['params'], p['grads'], p['optim'], round(p['step_s'], 9))"; }
expect "plan on a profile = plan on its cluster" 0 "same" \
  -- bash -c "[ \"\$1\" = \"\$2\" ] && [ -n \"\$1\" ] && echo same || echo \"\$1 vs \$2\"" _ \
  "$(best_plan --profile "$tmp/profile.json")" "$(best_plan --cluster "$tmp/here.json")"
expect "plan with a bad memory limit" 2 "--memory-limit: expects a size such as 600MiB, 2GiB or a number of bytes (0: none), got 'lots'" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit lots
expect "plan that nothing fits" 2 "error: no plan fits 1.0 MiB per rank (20 over the limit, 0 refused); every plan's model states alone are over it (the least: " \
  "hint: raise --memory-limit above " ", use more ranks, --checkpoint auto, or a smaller --micro-batch or --seq" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 1MiB
expect "plan that nothing fits, with the least simulated peak" 2 "error: no plan fits 5.0 MiB per rank (40 over the limit, 0 refused); a limit of " \
  " fits at least one (the least simulated peak)" "hint: raise --memory-limit to " ", use more ranks, or a smaller --micro-batch or --seq" \
  -- "$loom" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 5MiB --checkpoint auto
expect "plan that no device of the cluster could run: the hint does not raise the limit" 2 \
  "error: no plan fits 72.00 GiB per rank (50 over the limit, 0 refused); every plan's model states alone are over it (the least: 131.42 GiB), more than the devices' 80.00 GiB" \
  "hint: use more ranks, --checkpoint auto, or a smaller --micro-batch or --seq" \
  -- "$loom" plan --model llama3-70b --world 8 --seq 4096 --micro-batch 1 --cluster lins-a800
expect "the limit no plan fits names one that does" 0 "plans simulated" -- bash -c "
  limit=\$(\"$loom\" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit 5MiB --checkpoint auto 2>&1 | sed -n 's/.*a limit of \\([^ ]*\\) fits.*/\\1/p')
  \"$loom\" plan --model gpt:tiny --world 4 --cluster dgx-a100 --memory-limit \"\$limit\" --checkpoint auto 2>/dev/null"
expect "plan where the world does not split over nodes" 2 "error: --world 12 does not split evenly over cluster dgx-a100's nodes of 8 devices" \
  "hint: every node runs the same number of ranks: give --local-world one of 1, 2, 3, 4, 6, or --world a multiple of 8" \
  -- "$loom" plan --model gpt:tiny --world 12 --cluster dgx-a100
expect "plan where no number of ranks per node splits the world" 2 "error: --world 17 does not split evenly over cluster dgx-a100's nodes of 8 devices" \
  "hint: no number of ranks per node splits 17 ranks over cluster dgx-a100's nodes: give a --world that does, or --world a multiple of 8" \
  -- "$loom" plan --model gpt:tiny --world 17 --cluster dgx-a100
expect "plan with more ranks per node than ranks" 2 "error: --local-world 4 is more than --world 2" "hint: give at most 2" \
  -- "$loom" plan --model gpt:tiny --world 2 --local-world 4 --cluster dgx-a100
expect "tune where no point fits writes no schedule and exits 1" 1 "18 infeasible" "no point was feasible: did not write $tmp/none.sched" \
  -- "$loom" tune examples/gpt_tuned.sched --model gpt:tiny --nproc 2 --seq 64 --cluster dgx-a100 --memory-limit 1MiB --out "$tmp/none.sched"
expect "... and leaves no file" 1 "" -- test -e "$tmp/none.sched"
expect "simulate where --local-world does not divide the world" 2 "error: --local-world 4 does not divide --nproc 6" \
  "hint: every node runs the same number of ranks: give --local-world one of 1, 2, 3, 6" \
  -- "$loom" simulate --model gpt:tiny --nproc 6 --local-world 4 --cluster dgx-a100
expect "simulate with more ranks per node than ranks" 2 "error: --local-world 4 is more than --nproc 2" "hint: give at most 2" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --local-world 4 --cluster dgx-a100
expect "simulate on more nodes than the cluster has" 2 "error: --nproc 128 at 1 per node needs 128 nodes; cluster dgx-a100 has 16" \
  "hint: every node runs the same number of ranks: give --local-world one of 8" \
  -- "$loom" simulate --model gpt:tiny --nproc 128 --local-world 1 --cluster dgx-a100
# --nodes: the cluster on more (or fewer) nodes of its kind, without a file of its own.
expect "plan beyond the cluster's devices names --nodes" 2 "error: --world 256 is more than cluster dgx-a100 has (128 devices)" \
  "hint: use at most 128 ranks, or more nodes of its kind: --nodes 32" -- "$loom" plan --model gpt:tiny --world 256 --cluster dgx-a100
expect "simulate on more nodes than the cluster has names --nodes" 2 ", or more nodes of its kind: --nodes 128" \
  -- "$loom" simulate --model gpt:tiny --nproc 128 --local-world 1 --cluster dgx-a100
expect "plan on --nodes more of the cluster" 0 "on 256 ranks of dgx-a100 at 32 nodes" \
  -- "$loom" plan --model gpt:tiny --world 256 --cluster dgx-a100 --nodes 32 --top 1
expect "simulate on --nodes fewer of the cluster" 2 "error: --nproc 64 is more than cluster dgx-a100 at 4 nodes has (32 devices)" \
  "hint: use at most 32 ranks, or more nodes of its kind: --nodes 8" -- "$loom" simulate --model gpt:tiny --nproc 64 --cluster dgx-a100 --nodes 4
expect "tune on --nodes more of the cluster" 0 "on gpt:tiny at 256 ranks, coordinate-descent, sim" \
  -- "$loom" tune examples/gpt_tuned.sched --model gpt:tiny --nproc 256 --seq 64 --cluster dgx-a100 --nodes 32
expect "simulate --nodes with a profile" 2 "error: --nodes 8 resizes a --cluster; a profile prices the machine it measured" \
  "hint: give --cluster NAME with --nodes, or leave --nodes out (in Python: nodes=)" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --profile "$tmp/no_profile.json" --nodes 8
expect "plan --nodes beyond the simulated devices" 2 "error: --nodes 4000000 of cluster dgx-a100 is 32000000 devices: at most 16777216 (2^24) are simulated" \
  "hint: give at most 2097152 nodes (in Python: nodes=)" -- "$loom" plan --model gpt:tiny --world 8 --cluster dgx-a100 --nodes 4000000
for command in "simulate --cluster dgx-a100 --nproc 2" "plan --cluster dgx-a100 --world 2" "explain --nproc 2"; do
  expect "${command%% *} beyond the model's context" 2 "error: --seq 512 is longer than model gpt:tiny's context of 256 tokens" \
    "hint: use --seq 256 or less" -- "$loom" $command --model gpt:tiny --seq 512
done
# Without --memory-limit, on a cluster the passes plan within 90% of its device's memory: a peak
# above it is said too.
sed -e 's/"name": "dgx-a100"/"name": "small"/' -e 's/"80GiB"/"10MiB"/' clusters/dgx-a100.json > "$tmp/small.json"
expect "simulate on a cluster warns above the share of the device it plans within" 0 "loom simulate: warning: the simulated peak " \
  "is above 9.0 MiB, 90% of cluster small's 10.0 MiB devices (--memory-limit sets another limit): the schedule's base placement does not fit" \
  -- "$loom" simulate --model gpt:tiny --nproc 2 --cluster "$tmp/small.json"
expect "plan with more ranks per node than the cluster's nodes have" 2 "error: --local-world 16 is more than a node of cluster dgx-a100 has (8 devices)" \
  -- "$loom" plan --model gpt:tiny --world 16 --local-world 16 --cluster dgx-a100
expect "plan more ranks than the cluster has" 2 "error: --world 4096 is more than cluster dgx-a100 has (128 devices)" \
  -- "$loom" plan --model gpt:tiny --world 4096 --cluster dgx-a100

# loom tune (issue #16): a sweep of a schedule's knobs on the simulator, its database, the best schedule written.
tune="tune examples/gpt_tuned.sched --model gpt:tiny --nproc 2 --seq 64 --cluster dgx-a100"
expect "tune --json" 0 '"space_size": 18' '"evaluations": 18' '"best": {' '"knobs": {' '"objective"' '"trials": [' '"status": "ok"' \
  -- "$loom" $tune --strategy exhaustive --json
expect "tune says how far it is, trial by trial" 0 "loom tune: trial 1 of 18  micro_batch=" -- bash -c "\"$loom\" $tune 2>&1"
expect "tune --out" 0 "wrote the best schedule to $tmp/tuned.sched" -- "$loom" $tune --db "$tmp/tune.jsonl" --out "$tmp/tuned.sched"
# Without --memory-limit the simulator judges points by 90% of the cluster device's 80 GiB (72 GiB).
expect "tune's default limit is 90% of the device's memory" 0 "memory_limit=77309411328\"" -- head -1 "$tmp/tune.jsonl"
expect "the tuned schedule says what it is, its knobs fixed" 0 "# Generated by \`loom tune\` (coordinate-descent, --evaluator sim) from examples/gpt_tuned.sched" \
  'let bs = 8  # tuned: tune("micro_batch", [1, 2, 4, 8])' -- cat "$tmp/tuned.sched"
expect "the tuned schedule checks, without knobs" 0 "ok (" -- "$loom" check "$tmp/tuned.sched" --model gpt:tiny --world 2
expect "a second sweep on the database evaluates nothing again" 0 "from the database" "0 evaluated now" \
  -- bash -c "\"$loom\" $tune --db \"$tmp/tune.jsonl\" --resume 2>&1"
for output in --out --plot; do
  expect "tune $output on a full disk" 1 "loom tune: cannot write /dev/full: No space left on device" \
    -- "$loom" $tune --db "$tmp/tune.jsonl" "$output" /dev/full
done
expect "tune --resume without a database" 1 "error: --resume: no --db given" -- "$loom" $tune --resume
expect "tune --resume of a database without this sweep" 1 "error: --resume: $tmp/other.jsonl holds no trial of this sweep" \
  "hint: give the --db of the sweep to resume" -- "$loom" $tune --db "$tmp/other.jsonl" --resume
expect "tune sim+run without a cost model" 1 "error: --evaluator sim+run needs one cost model: --cluster NAME or --profile FILE" \
  -- "$loom" tune examples/gpt_tuned.sched --model gpt:tiny --nproc 2 --evaluator sim+run
expect "successive halving on the simulator" 1 "error: --strategy successive-halving measures points with more and more steps, which only real runs take" \
  "hint: use it with --evaluator run, or another strategy with --evaluator sim" -- "$loom" $tune --strategy successive-halving
# --plot (Slapo Fig. 10): the objective over two knobs, each cell what the trials say of it.
expect "tune --plot" 0 "drew the objective over micro_batch and ckpt_ratio in $tmp/tune.svg" -- "$loom" $tune --strategy exhaustive --plot "$tmp/tune.svg"
expect "the heatmap has a cell per point, the best outlined" 0 "18 ok, 2 pruned, 1 best" -- bash -c \
  "echo \$(grep -c 'class=\"ok\"' \"$tmp/tune.svg\") ok, \$(grep -c 'class=\"pruned\"' \"$tmp/tune.svg\") pruned, \$(grep -c 'class=\"best\"' \"$tmp/tune.svg\") best"
expect "the heatmap renders" 0 "PNG image data, " -- bash -c "rsvg-convert \"$tmp/tune.svg\" -o \"$tmp/tune.png\" && file \"$tmp/tune.png\""
expect "tune --plot-knobs naming no knob, before any trial" 1 "error: --plot-knobs names 'nosuch', which examples/gpt_tuned.sched does not declare with tune(...)" \
  "hint: name two of its knobs" -- bash -c "\"$loom\" $tune --plot \"$tmp/tune.svg\" --plot-knobs micro_batch,nosuch > \"$tmp/plot_err\" 2>&1;
  rc=\$?; cat \"$tmp/plot_err\"; ! grep -q 'loom tune: trial' \"$tmp/plot_err\" && exit \$rc"
expect "tune --plot-knobs without --plot" 1 "error: --plot-knobs chooses the axes of --plot's heatmap, and no --plot is given" "hint: add --plot FILE.svg" \
  -- "$loom" $tune --plot-knobs micro_batch,ckpt_ratio
expect "tune --confirm without sim+run" 1 "error: --confirm says how many of the simulator's best points real runs confirm, which only --evaluator sim+run does" \
  -- "$loom" $tune --confirm 2
printf 'sch.zero(stage=3)\n' > "$tmp/no_knobs.sched"
expect "tune --plot of a schedule without knobs" 1 "error: --plot draws the objective over two knobs, and $tmp/no_knobs.sched declares none" \
  -- "$loom" tune "$tmp/no_knobs.sched" --model gpt:tiny --nproc 2 --seq 64 --cluster dgx-a100 --plot "$tmp/tune.svg"
expect "tune --plot-knobs with one knob" 1 "error: --plot-knobs names 1 knobs; a heatmap has two axes" -- "$loom" $tune --plot "$tmp/tune.svg" --plot-knobs micro_batch
printf 'let bs = tune("micro_batch", [1, 2])\nsch.batch(micro=bs)\n' > "$tmp/one_knob.sched"
expect "tune --plot of one knob" 1 "error: --plot draws the objective over two knobs, and $tmp/one_knob.sched declares one (micro_batch)" \
  -- "$loom" tune "$tmp/one_knob.sched" --model gpt:tiny --nproc 2 --seq 64 --cluster dgx-a100 --plot "$tmp/tune.svg"
expect "tune without a cost model" 1 "error: --evaluator sim needs one cost model: --cluster NAME or --profile FILE" \
  -- "$loom" tune examples/gpt_tuned.sched --model gpt:tiny --nproc 2
expect "tune a schedule whose every point breaks a constraint" 1 "has no valid point: every one breaks a constraint" \
  -- bash -c "printf 'let x = tune(\"x\", [1, 2])\nconstrain(x > 5)\n' > \"$tmp/none.sched\" && \"$loom\" tune \"$tmp/none.sched\" --model gpt:tiny --cluster dgx-a100"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
