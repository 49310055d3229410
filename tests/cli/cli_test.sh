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
expect "bad world" 2 "--world" -- "$loom" check examples/gpt_tp.sched --model gpt2 --world 0
expect "local world must divide" 1 "local_world 3 does not divide world 8" -- "$loom" check examples/gpt_tp.sched --model gpt2 --world 8 --local-world 3
expect "missing file" 1 "cannot read schedule file 'nope.sched'" -- "$loom" check nope.sched --model gpt2
expect "no subcommand" 2 "A subcommand is required" -- "$loom"
expect "help" 0 "check" -- "$loom" --help
expect "check help" 0 "--local-world" -- "$loom" check --help
expect "fmt" 0 "let x = (1 + 2) * 3  # trailing comment" -- "$loom" fmt tests/golden/fmt/messy.sched
expect "fmt --check canonical" 0 "" -- "$loom" fmt --check examples/gpt_tp.sched
expect "fmt --check not canonical" 1 "" -- "$loom" fmt --check tests/golden/fmt/messy.sched
expect "fmt syntax error" 1 "unterminated string literal" -- "$loom" fmt tests/error/syntax_unterminated_string.sched
expect "tree" 0 "h.0.attn.c_attn  Linear  weight[384,128]  bias[384]" -- "$loom" tree --model gpt:tiny
expect "models" 0 "llama3-70b" -- "$loom" models
expect "pipeline boundaries in two lists" 1 \
  'pipeline_two_lists.sched:5:1: error: pipeline_split on `layers.0.block_sparse_moe.experts.1` is in another list than the one on `layers.0`' \
  "hint: split one ModuleList" -- "$loom" check tests/cli/pipeline_two_lists.sched --model mixtral:tiny --world 3

expect "explain zero3" 0 "reduce_scatter  h.3.mlp.c_proj.weight" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain pass log" 0 "#   prefetch: changed" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain ddp" 0 "all_reduce      lm_head" -- "$loom" explain --model llama:tiny --nproc 2
expect "explain json" 0 '"gathers_placed": true' -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --json
expect "explain LOOM_DEBUG" 0 "[loom] pass insert_gather_release: changed" -- env LOOM_DEBUG=1 "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2
expect "explain schedule error" 1 "error: shard_states on sch: params = 3 does not divide dp = 8" -- "$loom" explain tests/error/shard_states_divide.sched --model gpt2 --nproc 8

# Whole-schedule rules (verifier/) run in check.
expect "memory limit" 1 "error: model states need" -- "$loom" check stdlib_schedules/zero1.sched --model gpt2 --world 8 --memory-limit 500MB
expect "memory limit fits" 0 "ok (" -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit 80GiB
expect "memory limit not a size" 2 "error: --memory-limit lots is not a size" -- "$loom" check stdlib_schedules/zero3.sched --model gpt:tiny --world 2 --memory-limit lots


# A measured profile prices the IR; one of another model is refused, naming both ops.
prof="profile --model gpt:tiny --nproc 2 --steps 1 --seq 32 --micro-batch 2 --threads 1 --cache-dir $tmp/cache"
expect "profile" 0 "collectives (alpha-beta fit" -- "$loom" $prof stdlib_schedules/zero3.sched --out "$tmp/profile.json"
expect "profile cached" 0 "loom profile: reusing $tmp/cache/gpt-tiny-w2-" -- "$loom" $prof stdlib_schedules/zero3.sched
expect "explain --profile" 0 "# estimate from $tmp/profile.json (serial sums" -- "$loom" explain stdlib_schedules/zero3.sched --model gpt:tiny --nproc 2 --profile "$tmp/profile.json"
expect "explain --profile other model" 2 "error: $tmp/profile.json was measured for other compute ops: the step's op 0 is \`embed_tokens\`, the profile's is \`wpe\`" -- "$loom" explain --model llama:tiny --nproc 2 --profile "$tmp/profile.json"
expect "explain --profile missing" 2 "error: cannot read the profile '$tmp/none.json'" -- "$loom" explain --model gpt:tiny --nproc 2 --profile "$tmp/none.json"
expect "explain --profile not a profile" 2 "is not a readable Loom profile" -- "$loom" explain --model gpt:tiny --nproc 2 --profile stdlib_schedules/zero3.sched

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
