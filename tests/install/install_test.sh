#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` into a temporary prefix, then a
# project of its own (tests/install/consumer) finds it with find_package(Loom) and builds
# examples/fluent_api.cpp and examples/custom_model.cpp unchanged; both run; custom_model, the
# loom command line with the model it registers, checks, verifies and trains that model at
# world 2; and the installed loom checks a standard schedule from the installed share/loom, also
# once the prefix is moved.
set -uo pipefail
build=$(cd "$1" && pwd)
source "$(dirname "$0")/../lib/expect.sh" "$build/loom" "$2"  # $loom, $src, $tmp, expect
prefix="$tmp/prefix"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
expect "cmake --install" 0 "Installing: $prefix/lib/cmake/Loom/LoomConfig.cmake" -- cmake --install "$build" --prefix "$prefix"
expect "the package's files" 0 "ok" -- bash -c "test -x '$prefix/bin/loom' && test -f '$prefix/lib/libloom_core.a' &&
  test -f '$prefix/include/loom/lang/schedule.h' && test -f '$prefix/include/loom/models/zoo_torch.h' &&
  test -f '$prefix/share/loom/stdlib_schedules/zero3.sched' && test -f '$prefix/share/loom/clusters/dgx-a100.json' && echo ok"
expect "a project finds the package" 0 "Build files have been written" -- cmake -S "$src/tests/install/consumer" \
  -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DLOOM_EXAMPLES="$src/examples" "${launcher[@]}"
expect "it builds the examples unchanged" 0 "Linking CXX executable custom_model" -- cmake --build "$tmp/consumer"
expect "fluent_api runs" 0 "sch[" -- "$tmp/consumer/fluent_api"
expect "custom_model runs" 0 "sch.shard_states(params=4, grads=4, optim=4)" 'sch["blocks.0"].checkpoint()' -- "$tmp/consumer/custom_model"
# Your own model: custom_model registers tiny-lm, and with arguments it is the loom command line.
custom="$tmp/consumer/custom_model"
expect "your model among the models" 0 "tiny-lm	examples/custom_model.cpp" -- "$custom" models
expect "check your model" 0 "ok (" "for tiny-lm at world 2" -- "$custom" check "$prefix/share/loom/stdlib_schedules/zero3.sched" \
  --model tiny-lm --world 2
expect "verify your model" 0 "equivalent (2 runs" -- "$custom" verify "$prefix/share/loom/stdlib_schedules/zero3.sched" \
  --model tiny-lm --nproc 2 --seq 32 --micro-batch 2
expect "train your model at world 2" 0 "loom run: done: 4 steps" "2 ranks" -- "$custom" run \
  "$prefix/share/loom/stdlib_schedules/zero3.sched" --model tiny-lm --nproc 2 --steps 4 --seq 32 --micro-batch 2 --threads 1 \
  --metrics "$tmp/tiny_lm.jsonl"
expect "its loss is a number each step" 0 "4 steps" -- python3 -c "
import json, math
rows = [json.loads(l) for l in open('$tmp/tiny_lm.jsonl')]
assert all(math.isfinite(r['loss']) for r in rows)
print(len(rows), 'steps')"
expect "a name it did not register" 2 "error: unknown model 'tiny-ml'" "did you mean 'tiny-lm'?" -- "$custom" check \
  "$prefix/share/loom/stdlib_schedules/zero3.sched" --model tiny-ml --world 2
expect "the installed loom checks an installed schedule" 0 "ok (" -- "$prefix/bin/loom" check "$prefix/share/loom/stdlib_schedules/zero3.sched" \
  --model gpt:tiny --world 2
# A moved prefix: the installed loom reads its own share/loom (a file only the moved copy has),
# not the source tree it was built from.
moved="$tmp/moved"
cp -r "$prefix" "$moved"
printf 'sch.zero(stage=3)\n' > "$moved/share/loom/stdlib_schedules/moved_only.sched"
cp "$moved/share/loom/clusters/dgx-a100.json" "$moved/share/loom/clusters/moved-only.json"
printf 'import "stdlib/moved_only.sched"\n' > "$tmp/uses_moved.sched"
expect "a moved loom imports its own standard schedules" 0 "ok (" -- "$moved/bin/loom" check "$tmp/uses_moved.sched" \
  --model gpt:tiny --world 2
expect "a moved loom finds its own cluster files" 0 '"step_s"' -- "$moved/bin/loom" simulate --model gpt:tiny --nproc 2 \
  --cluster moved-only --seq 32 --micro-batch 2 --json
expect "a moved loom's --help names its own share/loom" 0 "$moved/share/loom/stdlib_schedules" -- "$moved/bin/loom" check --help
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
