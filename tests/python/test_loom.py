"""The Python module as a user meets it (run by ctest `python_module` with Debian's python3):
the registry and dir() agree; a schedule written in Python, the same calls in C++
(examples/fluent_api.cpp) and the same .sched text give identical traces and identical IR;
errors are loom.ScheduleError naming the primitive and the fix."""
import json
import os
import subprocess
import sys
import tempfile

import loom
from checks import check, finish

build, source = sys.argv[1], sys.argv[2]

# 1. Every registered primitive is a method, and dir() lists exactly the registry's (and the
#    selection's own methods), so a primitive registered in C++ appears here without more code.
OWN = {"blocks", "paths", "tune", "constrain", "knobs"}  # a selection's own methods
sch = loom.Schedule("gpt2", world=4, local_world=4)
names = loom.primitives()
check("the registry has the primitives", {"prefetch", "zero", "shard", "mesh", "checkpoint"} <= set(names), names)
check("dir() is the registry", sorted(set(dir(sch)) - OWN) == sorted(names), sorted(dir(sch)))
check("a selection has them too", sorted(set(dir(sch["h.0"])) - OWN) == sorted(names))
try:
    sch.no_such_primitive
    check("an unknown primitive is an AttributeError", False)
except AttributeError as e:
    check("an unknown primitive is an AttributeError", "loom.primitives()" in str(e), str(e))

# 2. examples/fluent_api.cpp's calls, in Python (chained, as in C++).
sch.mesh(tp=2, pp=2)
sch["h.0.attn.c_attn"].shard(params=["weight", "bias"], axis=0).sync(mode="bwd_post", op="all_reduce")
sch["h.0.attn.c_proj"].shard(["weight"], 1).sync("fwd_post", "all_reduce")
from_python = loom.to_sched(sch)
from_cpp = subprocess.run([os.path.join(build, "fluent_api")], capture_output=True, text=True, check=True).stdout
check("Python and C++ record the same trace", from_python == from_cpp, f"\n{from_python}\n---\n{from_cpp}")

# The same text as a .sched file, loaded as the CLI loads it.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "same.sched")
    with open(path, "w") as f:
        f.write(from_python)
    from_file = loom.load(path, "gpt2", world=4, local_world=4)
    check("the .sched file records the same trace", loom.to_sched(from_file) == from_python)
    def directives(selection):  # a Python call has no source location; a file's says file:line:col
        trace = json.loads(loom.to_json(selection))
        for d in trace["directives"]:
            d.pop("source")
        return trace
    check("and the same JSON but for where each call was written", directives(from_file) == directives(sch))

# 3. The same IR: a sharded schedule on gpt:tiny, in Python and from its .sched text, lowered
#    as `loom explain --json` lowers it.
tiny = loom.Schedule("gpt:tiny", world=2)
tiny.zero(stage=3)
tiny.blocks().prefetch(budget=loom.auto)
tiny["h.1"].checkpoint()
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "tiny.sched")
    with open(path, "w") as f:
        f.write(loom.to_sched(tiny))
    ir_python = json.loads(loom.explain(tiny, micro_batch=2, seq=32))
    ir_file = json.loads(loom.explain(loom.load(path, "gpt:tiny", world=2), micro_batch=2, seq=32))
    ir_cli = json.loads(subprocess.run([os.path.join(build, "loom"), "explain", path, "--model", "gpt:tiny", "--nproc", "2",
                                        "--micro-batch", "2", "--seq", "32", "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    ir_cli.pop("rank", None)
    check("Python and the file lower to the same IR", ir_python == ir_file)
    check("and to what loom explain prints", ir_python == ir_cli)
    check("the IR has the gathers", sum(1 for i in ir_python["instructions"] if i.get("op") == "all_gather") > 0,
          ir_python["instructions"][:2])
    # A memory limit, as the command line writes it, plans prefetch(budget=auto) as `--memory-limit` does.
    limited = json.loads(loom.explain(tiny, micro_batch=2, seq=32, memory_limit="1MiB"))
    limited_cli = json.loads(subprocess.run([os.path.join(build, "loom"), "explain", path, "--model", "gpt:tiny", "--nproc", "2",
                                             "--micro-batch", "2", "--seq", "32", "--json", "--memory-limit", "1MiB"],
                                            capture_output=True, text=True, check=True).stdout)
    limited_cli.pop("rank", None)
    check("explain's memory_limit is --memory-limit", limited == limited_cli and limited != ir_python)
    check("explain's memory_limit 0 is none", json.loads(loom.explain(tiny, micro_batch=2, seq=32, memory_limit=0)) == ir_python)
    try:
        loom.explain(tiny, memory_limit="lots")
        check("explain with a memory limit that is not a size raises", False)
    except loom.ScheduleError as e:
        check("explain with a memory limit that is not a size says what a size is", "expects a size such as 600MiB" in str(e), str(e))

# 4. Errors name the primitive and the fix.
try:
    loom.Schedule("gpt:tiny", world=2)["h.0"].prefetch(budget=0)
    check("a bad argument raises", False)
except loom.ScheduleError as e:
    text = str(e)
    check("a bad argument names the primitive and the fix",
          "prefetch on `h.0`: budget must be a positive size, got 0B" in text and "hint: e.g. budget=512MiB" in text, text)
# check() runs the whole-schedule rules, as `loom check` does.
plain = loom.Schedule("gpt2", world=2)
plain.offload("optimizer")
try:
    loom.check(plain)
    check("check() raises a rule's error", False)
except loom.ScheduleError as e:
    check("check() raises a rule's error", "this schedule keeps no optimizer shards" in str(e) and "sch.zero(stage=1)" in str(e),
          str(e))
check("check() of a sound schedule returns its warnings", loom.check(tiny) == [])
# With a memory limit check() walks the step as `loom check --memory-limit` does (the same
# figures as tests/cli/cli_test.sh): ZeRO-3's states fit 20 MiB, its step at 4 x 128 tokens does not.
zero3 = loom.Schedule("gpt:tiny", world=2)
zero3.zero(stage=3)
try:
    loom.check(zero3, memory_limit="20MiB", micro_batch=4)
    check("check() with a memory limit raises for a step over it", False)
except loom.ScheduleError as e:
    check("check() names the step's peak and the instruction at it",
          "the step needs 26.1 MiB per rank at its peak, above memory_limit 20.0 MiB: instruction 182 (fwd compute lm_head), "
          "at 1 micro-batch(es) of 4 x 128 tokens" in str(e), str(e))
    check("check()'s hint names the arguments and draws the step with loom.simulate",
          'or a smaller micro_batch or seq; `loom.simulate(sch, cluster="NAME", micro_batch=4, seq=128, accum=1, memory_limit="20MiB", '
          'memory_plot="memory.svg")` draws where the memory goes' in str(e), str(e))
# The schedule's warnings (its primitives give them) come with check()'s error too.
warned = loom.Schedule("gpt:tiny", world=2)
warned.zero(stage=3)
warned.batch()
try:
    loom.check(warned, memory_limit="20MiB", micro_batch=4)
    check("check() over the limit raises with warnings given", False)
except loom.ScheduleError as e:
    check("a ScheduleError from check() carries the schedule's warnings",
          len(e.warnings) == 1 and "batch() sets neither the micro-batch nor the accumulation" in e.warnings[0], str(e.warnings))
try:
    loom.check(zero3, memory_limit="lots")
    check("check() refuses a memory_limit that is not a size", False)
except loom.ScheduleError as e:
    check("a ScheduleError from check() without warnings carries none", e.warnings == [], str(e.warnings))
check("check() of the step at a smaller shape returns its warnings",
      loom.check(zero3, memory_limit=20 * 2**20, micro_batch=1, seq=16) == [])
check("check() with memory_limit=0 checks no step", loom.check(zero3, memory_limit=0, micro_batch=64) == [])
unlowerable = loom.Schedule("gpt:tiny", world=2)
unlowerable["h.0"].compress(ratio=10)
try:
    loom.check(unlowerable)
    check("check() refuses what `loom run` cannot honour, without a limit too", False)
except loom.ScheduleError as e:
    check("check() refuses what `loom run` cannot honour, with run's message",
          "compress is not yet supported at runtime" in str(e) and "zero(stage=3) or fsdp() first" in str(e), str(e))
try:
    loom.check(zero3, micro_batch=0)
    check("check() refuses a micro_batch under 1", False)
except loom.ScheduleError as e:
    check("check() names the argument under 1", "(in Python: micro_batch=) a number of at least 1" in str(e), str(e))
with tempfile.TemporaryDirectory() as tmp:
    svg = os.path.join(tmp, "memory.svg")
    walked = loom.simulate(zero3, cluster="dgx-a100", micro_batch=4, memory_limit="20MiB", memory_plot=svg)
    check("the hint's loom.simulate reaches the same peak", abs(walked["peak_bytes"] / 2**20 - 26.1) < 0.05, walked["peak_bytes"])
    check("loom.simulate draws the memory timeline", open(svg).read().startswith("<svg"), svg)
    try:
        loom.simulate(zero3, cluster="dgx-a100", memory_plot=tmp)
        check("loom.simulate refuses a memory_plot it cannot write", False)
    except loom.ScheduleError as e:
        check("loom.simulate names the memory_plot it cannot write", "memory_plot" in str(e) and "it is a directory" in str(e), str(e))
try:
    loom.Schedule("gpt:tiny", world=2)["h.9"]
    check("a path that matches nothing raises", False)
except loom.ScheduleError as e:
    check("a path that matches nothing says so", "h.9" in str(e), str(e))
try:
    loom.Schedule("gtp:tiny")
    check("an unknown model raises", False)
except loom.ScheduleError as e:
    check("an unknown model suggests the closest", "did you mean 'gpt:tiny'" in str(e), str(e))
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "bad.sched")
    with open(path, "w") as f:
        f.write('sch.zero(stage=3)\nsch["h.0"].prefetch(budget=0)\n')
    try:
        loom.load(path, "gpt:tiny", world=2)
        check("an error in a file raises", False)
    except loom.ScheduleError as e:
        check("an error in a file is located file:line:col", f"{path}:2:" in str(e), str(e))
try:
    loom.Schedule("gpt:tiny").zero(stage=object())
    check("an argument with no .sched value raises", False)
except TypeError as e:
    check("an argument with no .sched value is a TypeError", "has no .sched value" in str(e), str(e))

finish()
