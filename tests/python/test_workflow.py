"""The workflow from Python (run by ctest `python_workflow` with Debian's python3): knobs, trace
replay, simulate, plan, tune, verify and train, each checked against the command line computing
the same thing (`loom ... --json` on the same schedule), with the GIL released while they run."""
import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ["LOOM_TEST_PRIMITIVES"] = "1"  # test_skip_reduction: a fault that verify must find
import loom
from checks import check, finish

loom_exe = sys.argv[1]
torchrun_port = random.randint(19000, 19999)  # apart from loom run's ports (10000-18999), the other tests' and the ephemeral range
tmp = tempfile.mkdtemp(prefix="loom-python-workflow-")
atexit.register(shutil.rmtree, tmp, True)


def cli_json(*args):
    out = subprocess.run([loom_exe, *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"loom {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout)


def sched_file(sch, name):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(loom.to_sched(sch))
    return path


# 1. Knobs: tune() returns the first value, constrain() raises loom.ConstraintViolation.
sch = loom.Schedule("gpt:tiny", world=2)
stage = sch.tune("stage", [3, 2, 1])
check("tune() returns the knob's first value", stage == 3, stage)
check("knobs() lists what was declared", sch.knobs() == {"stage": 3}, sch.knobs())
try:
    sch.constrain(stage < 3, "stage < 3")
    check("a false constrain() raises", False)
except loom.ConstraintViolation as e:
    check("a false constrain() is a ConstraintViolation naming it", "stage < 3" in str(e), str(e))
check("a ConstraintViolation is a ScheduleError", issubclass(loom.ConstraintViolation, loom.ScheduleError))

# 2. Replay: the JSON trace gives the same schedule, at the model and world it records.
sch = loom.Schedule("gpt:tiny", world=2)
sch.zero(stage=3)
sch["h.*"].prefetch(budget=loom.auto)
replayed = loom.replay(loom.to_json(sch))
check("a replayed trace is the same schedule", loom.to_sched(replayed) == loom.to_sched(sch), loom.to_sched(replayed))
check("a replayed trace lowers to the same IR", loom.explain(replayed, seq=32) == loom.explain(sch, seq=32))
try:
    loom.replay('{"loom_trace": 1, "directives": []}')
    check("a trace without a model raises", False)
except ValueError as e:
    check("a trace without a model says to give one", 'model="..."' in str(e), str(e))
# A header or an argument order of the wrong type is an error that names it (it was a raw
# type_error; a world beyond an int became world 1).
for text, message, kind in [('{"model": "gpt:tiny", "world": "2", "directives": []}', '"world" is "2", not a count', ValueError),
                            ('{"model": "gpt:tiny", "world": 3000000000, "directives": []}', '"world" is 3000000000', ValueError),
                            ('{"model": "gpt:tiny", "directives": [{"primitive": "zero", "target": "", "args": {"stage": 3},'
                             ' "arg_order": [3]}]}', '"arg_order" holds 3, not an argument name', loom.ScheduleError)]:
    try:
        loom.replay(text)
        check(f"replay refuses: {message}", False)
    except kind as e:
        check(f"replay says what is wrong: {message}", message in str(e), str(e))

# 3. simulate: what `loom simulate --json` prints for the same schedule.
path = sched_file(sch, "zero3.sched")
py = loom.simulate(sch, cluster="dgx-a100", micro_batch=2, seq=64)
cli = cli_json("simulate", path, "--model", "gpt:tiny", "--nproc", "2", "--cluster", "dgx-a100", "--micro-batch", "2", "--seq", "64")
check("simulate is loom simulate --json", py == cli, f"{py} vs {cli}")
py = loom.simulate(sch, cluster="dgx-a100", micro_batch=2, seq=64, memory_limit=0)
cli = cli_json("simulate", path, "--model", "gpt:tiny", "--nproc", "2", "--cluster", "dgx-a100", "--micro-batch", "2", "--seq", "64",
               "--memory-limit", "0")
check("simulate's memory_limit=0 is --memory-limit 0 (none)", py == cli, f"{py} vs {cli}")
py = loom.simulate(sch, cluster="dgx-a100", micro_batch=2, seq=64, memory_limit="20MiB")
cli = cli_json("simulate", path, "--model", "gpt:tiny", "--nproc", "2", "--cluster", "dgx-a100", "--micro-batch", "2", "--seq", "64",
               "--memory-limit", "20MiB")
check("simulate's memory_limit takes a size as the language writes it", py == cli, f"{py} vs {cli}")
try:
    loom.simulate(sch, cluster="dgx-a100", memory_limit="lots")
    check("simulate with a memory limit that is not a size raises", False)
except loom.ScheduleError as e:
    check("simulate with a memory limit that is not a size says what a size is", "expects a size such as 600MiB" in str(e), str(e))
try:
    loom.simulate(sch)
    check("simulate without a cost model raises", False)
except loom.ScheduleError as e:
    check("simulate without a cost model names both", "--cluster NAME or --profile FILE" in str(e), str(e))

# 4. plan: what `loom plan --json` prints.
py = loom.plan("gpt:tiny", world=8, cluster="dgx-a100", seq=64, micro_batch=2, top=3, memory_limit="4GiB")
cli = cli_json("plan", "--model", "gpt:tiny", "--world", "8", "--cluster", "dgx-a100", "--seq", "64", "--micro-batch", "2",
               "--top", "3", "--memory-limit", "4GiB")
check("plan is loom plan --json", py == cli, f"{py['plans'][:1]} vs {cli['plans'][:1]}")
check("plan returns the plans best first", len(py["plans"]) == 3 and all("schedule" in p for p in py["plans"]))
py = loom.plan("gpt:tiny", world=4, cluster="dgx-a100", top=2, memory_limit="12MiB", memory_passes="auto")
cli = cli_json("plan", "--model", "gpt:tiny", "--world", "4", "--cluster", "dgx-a100", "--top", "2", "--memory-limit", "12MiB",
               "--memory-passes", "auto")
check("plan's memory_passes is --memory-passes", py == cli and py["memory_passes"] == "auto", f"{py['plans'][:1]} vs {cli['plans'][:1]}")
check("plan with the memory-aware passes writes them", "prefetch(budget=auto)" in py["plans"][0]["schedule"], py["plans"][0]["schedule"])
py = loom.plan("gpt:tiny", world=256, cluster="dgx-a100", nodes=32, seq=64, micro_batch=2, top=1)
cli = cli_json("plan", "--model", "gpt:tiny", "--world", "256", "--cluster", "dgx-a100", "--nodes", "32", "--seq", "64",
               "--micro-batch", "2", "--top", "1")
check("plan's nodes is --nodes: the cluster on more nodes of its kind", py == cli and len(py["plans"]) == 1, f"{py['plans'][:1]}")
one_node, sixteen = loom.simulate(sch, cluster="dgx-a100", nodes=1), loom.simulate(sch, cluster="dgx-a100")
check("simulate's nodes is --nodes: the cluster named for them", one_node.pop("priced_by") == "cluster dgx-a100 at 1 node", one_node)
sixteen.pop("priced_by")
check("simulate's nodes change no price of ranks that fit either way", one_node == sixteen, f"{one_node} vs {sixteen}")
for bad, message in [("memory_passes", "--memory-passes must be one of off, auto, not 'sometimes'"),
                     ("checkpoint", "--checkpoint must be one of none, all, auto, not 'sometimes'")]:
    try:
        loom.plan("gpt:tiny", world=4, cluster="dgx-a100", **{bad: "sometimes"})
        check(f"plan with {bad}='sometimes' raises", False)
    except loom.ScheduleError as e:
        check(f"plan with {bad}='sometimes' says what it takes", message in str(e), str(e))
check("a memory limit of whole bytes as a float is those bytes",
      loom.simulate(sch, cluster="dgx-a100", memory_limit=20e6) == loom.simulate(sch, cluster="dgx-a100", memory_limit=20000000))
knob_file_for_shape = os.path.join(tmp, "shape_checks.sched")
with open(knob_file_for_shape, "w") as f:
    f.write("sch.zero(stage=3)\n")
# No option check runs for Python: the library refuses what the command line's checks would (a run
# of no ranks or empty batches, a choice not offered, a tolerance that is not a number) itself.
for call, message in [(lambda: loom.plan("gpt:tiny", world=0, cluster="dgx-a100"), "--world must be at least 1, got 0"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", accum=0), "--accum must be at least 1, got 0"),
                      (lambda: loom.simulate(sch, cluster="dgx-a100", micro_batch=0), "--micro-batch must be at least 1, got 0"),
                      (lambda: loom.tune(knob_file_for_shape, model="gpt:tiny", world=2, cluster="dgx-a100", seq=0),
                       "--seq must be at least 1, got 0"),
                      (lambda: loom.explain(sch, micro_batch=0), "--micro-batch must be at least 1, got 0"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", top=0), "--top must be at least 1, got 0"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", nodes=-1), "--nodes must be at least 0, got -1"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", threads=-1), "--threads must be at least 0, got -1"),
                      (lambda: loom.plan("gpt:tiny", world=4, local_world=-1, cluster="dgx-a100"),
                       "--local-world must be at least 0, got -1"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", attention="flash"),
                       "--attention must be one of memory_efficient, eager, not 'flash'"),
                      (lambda: loom.plan("gpt:tiny", world=4, cluster="dgx-a100", precision="fp8"),
                       "--precision must be one of bf16, fp32, not 'fp8'"),
                      # Choices the command line checks are checked for Python too, not priced as the default.
                      (lambda: loom.simulate(sch, cluster="dgx-a100", precision="FP32"),
                       "--precision must be one of bf16, fp32, not 'FP32'"),
                      (lambda: loom.tune(knob_file_for_shape, model="gpt:tiny", world=2, cluster="dgx-a100", evaluator="RUN"),
                       "--evaluator must be one of sim, run, sim+run, not 'RUN'"),
                      (lambda: loom.tune(knob_file_for_shape, model="gpt:tiny", world=2, cluster="dgx-a100", strategy="grid"),
                       "--strategy must be one of exhaustive, random, coordinate-descent, successive-halving, not 'grid'"),
                      (lambda: loom.tune(knob_file_for_shape, model="gpt:tiny", world=2, cluster="dgx-a100", steps=2),
                       "--steps must be at least 3, got 2"),
                      (lambda: loom.verify(sch, atol=float("nan")), "--atol must be a finite number of at least 0, got nan"),
                      # A memory limit that is not a size is a ScheduleError, whatever Python type it comes as.
                      (lambda: loom.simulate(sch, cluster="dgx-a100", memory_limit=2**70), "which is too large"),
                      (lambda: loom.simulate(sch, cluster="dgx-a100", memory_limit=[1]), "got '[1]'")]:
    try:
        call()
        check(f"an argument the command line would refuse raises: {message}", False)
    except loom.ScheduleError as e:
        check(f"an argument the command line would refuse says which: {message}", message in str(e), str(e))

# 5. tune: a Python function declaring knobs sweeps the same space as the .sched file with the
#    same knobs, and a constraint prunes points as in the language.
def build(s):
    stage = s.tune("stage", [1, 2, 3])
    s.constrain(stage != 2, "stage != 2")
    s.zero(stage=stage)


knob_file = os.path.join(tmp, "knobs.sched")
with open(knob_file, "w") as f:
    f.write('let stage = tune("stage", [1, 2, 3])\nconstrain(stage != 2)\nsch.zero(stage=stage)\n')
common = dict(model="gpt:tiny", world=2, cluster="dgx-a100", strategy="exhaustive", seq=64, micro_batch=2)
by_function, by_file = loom.tune(build, **common), loom.tune(knob_file, **common)
objectives = lambda r: [(t["knobs"], t["objective"]) for t in r["trials"]]
check("tune of a function sweeps what the file's knobs do", objectives(by_function) == objectives(by_file),
      f"{objectives(by_function)} vs {objectives(by_file)}")
check("a constraint prunes a point", by_function["space_size"] == 2 and by_function["pruned"] == 1, by_function)
best = os.path.join(tmp, "best.sched")
loom.tune(build, out=best, **common)
written = open(best).read()
check("tune(out=...) writes the best schedule's trace", "knobs: stage=1" in written and "sch.shard_states(params=1, grads=1, optim=2)" in written,
      written)
try:
    loom.tune(build, model="gpt:tiny", world=2, evaluator="run")
    check("a function tuned with real runs raises", False)
except loom.ScheduleError as e:
    check("a function tuned with real runs says to write a .sched file", "tuned by the simulator only" in str(e), str(e))


def raising(s):
    raise KeyError("no such knob")


try:
    loom.tune(raising, **common)
    check("a function that raises stops tune", False)
except KeyError as e:
    check("a function's own error comes back as it was raised", "no such knob" in str(e), str(e))
try:
    loom.tune(build, db=os.path.join(tmp, "trials.jsonl"), **common)
    check("a trial database for a function raises", False)
except ValueError as e:
    check("a trial database for a function says to tune a file", "tune a .sched file" in str(e), str(e))

# 6. verify: ZeRO-3 is equivalent; a skipped reduction is found, with its directive.
shape = dict(micro_batch=2, seq=32)
report = loom.verify(sch, **shape)
check("verify of ZeRO-3 is equivalent", report["equivalent"] is True and report["ranks"] == 2, report)
broken = loom.Schedule("gpt:tiny", world=2)
broken.zero(stage=2)
broken["h.1.mlp.c_fc"].test_skip_reduction(param="weight")
report = loom.verify(broken, **shape)
check("verify finds a skipped reduction", report["equivalent"] is False, report)
check("verify names the breaking directive", [d["primitive"] for d in report["breaking_directives"]] == ["test_skip_reduction"],
      report["breaking_directives"])
try:
    loom.verify(sch, memory_limit="lots", **shape)
    check("verify with a memory limit that is not a size raises", False)
except loom.ScheduleError as e:
    check("verify with a memory limit that is not a size says what a size is", "expects a size such as 600MiB" in str(e), str(e))

# 7. train: `loom run` of the schedule, the same losses as the command line's, the GIL released.
stamps = []  # when another Python thread ran, at most every millisecond
done = threading.Event()


def count():
    while not done.is_set():
        now = time.monotonic()
        if not stamps or now - stamps[-1] >= 0.001:
            stamps.append(now)


counter = threading.Thread(target=count)
counter.start()
started = time.monotonic()
metrics = loom.train(sch, steps=3, **shape)
ended = time.monotonic()
done.set()
counter.join()
check("train returns a metrics row per step", [m["step"] for m in metrics] == [1, 2, 3], metrics)
middle = [t for t in stamps if started + (ended - started) / 4 <= t <= ended - (ended - started) / 4]
check("Python ran in the middle of train (the GIL was released)", len(middle) > 50, f"{len(middle)} of {len(stamps)}")
cli_metrics = os.path.join(tmp, "cli.jsonl")
subprocess.run([loom_exe, "run", path, "--model", "gpt:tiny", "--nproc", "2", "--steps", "3", "--micro-batch", "2", "--seq", "32",
                "--metrics", cli_metrics], check=True, capture_output=True)
cli_losses = [json.loads(l)["loss"] for l in open(cli_metrics)]
check("train's losses are loom run's", [m["loss"] for m in metrics] == cli_losses, f"{metrics} vs {cli_losses}")
try:
    loom.train(sch, steps=1, no_such_flag=1)
    check("an unknown option raises", False)
except loom.RunError as e:
    check("an unknown option is a RunError with loom run's message", "--no-such-flag" in str(e), str(e))

# 8. Under torchrun each Python process is one rank, and rank 0 returns the metrics.
script = os.path.join(tmp, "ranks.py")
with open(script, "w") as f:
    f.write("import os, loom\nsch = loom.Schedule('gpt:tiny', world=2)\nsch.zero(stage=3)\n"
            "m = loom.train(sch, steps=2, micro_batch=2, seq=32)\n"
            "print('rank', os.environ['RANK'], 'losses', [r['loss'] for r in m], flush=True)\n")
out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
                      "--master_port", str(torchrun_port), "--log_dir", os.path.join(tmp, "torchrun"), script], capture_output=True, text=True, timeout=300)
rank0 = [l for l in out.stdout.splitlines() if "rank 0 losses" in l]
check("train under torchrun: every rank trains, rank 0 has the metrics",
      out.returncode == 0 and len(rank0) == 1 and str(cli_losses[:2]) in rank0[0] and "rank 1 losses []" in out.stdout,
      out.stdout[-2000:] + out.stderr[-2000:])

# 9. Ctrl-C during a tune of real runs stops the running trial and raises KeyboardInterrupt;
#    Python's own SIGINT handler is back afterwards.
script = os.path.join(tmp, "interrupted.py")
with open(script, "w") as f:
    f.write("import signal, sys, loom\n"
            "print('tuning', flush=True)\n"
            "try:\n"
            f"    loom.tune({knob_file!r}, model='gpt:tiny', world=2, evaluator='run', steps=50, seq=32, micro_batch=2)\n"
            "except KeyboardInterrupt as e:\n"
            "    print('interrupted:', e, flush=True)\n"
            "print('handler restored:', signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n")
child = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
child.stdout.readline()  # "tuning"
time.sleep(4)  # into the first trial's run
child.send_signal(signal.SIGINT)
try:
    out, err = child.communicate(timeout=60)
except subprocess.TimeoutExpired:
    child.kill()
    out, err = child.communicate()
check("Ctrl-C stops loom.tune's real-run trial with KeyboardInterrupt",
      "interrupted: loom.tune: interrupted; the running trial's ranks were stopped" in out, out + err[-2000:])
check("Python's SIGINT handler is back after loom.tune", "handler restored: True" in out, out + err[-2000:])

finish()
