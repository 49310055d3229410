// The workflow in Python, each function returning Python objects and releasing the GIL while it
// works: check and explain (the step's IR), verify (differential testing against the plain model),
// simulate, plan, tune (a .sched file, or a Python function that builds the schedule at each point),
// and train (`loom run` of the schedule: this process is one rank under torchrun, srun or mpirun,
// else it starts the schedule's ranks). Each is what its command computes (cli/workflow.h).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "backend/data_dirs.h"
#include "autotuner/run_evaluator.h"
#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/pass_pipeline.h"
#include "cli/entry.h"
#include "cli/workflow.h"
#include "lang/trace.h"
#include "python/bindings.h"
#include "verifier/schedule_rules.h"

namespace loom::python {
namespace {

// The schedule's trace as a .sched file of its own, removed when done: what the commands that
// start `loom run`s (train, verify) give their ranks.
class ScheduleFile {
 public:
  explicit ScheduleFile(const Schedule& schedule) {
    std::string text = trace_to_sched(schedule);
    char path[] = "/tmp/loom-python-XXXXXX.sched";
    int fd = mkstemps(path, 6);
    if (fd < 0) throw RunFailure("loom: cannot create a temporary schedule file in /tmp");
    close(fd);
    path_ = path;
    std::ofstream out(path_);
    out << text;
    if (!out.flush()) {
      std::remove(path_.c_str());
      throw RunFailure("loom: cannot write the temporary schedule file " + path_ + " (is /tmp full?)");
    }
  }
  ~ScheduleFile() {
    std::remove(path_.c_str());
    std::remove(metrics().c_str());
  }
  std::string metrics() const { return path_ + ".metrics.jsonl"; }  // loom.train's --metrics
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A size given as bytes (an int, or a float of whole bytes: 8e9) or as the language writes it
// ("80GiB"); "" for none. Anything else is passed on as its text, for the size check to refuse
// with ScheduleError (2**70 is too large, [1] not a size).
std::string size_text(const py::object& size) {
  if (size.is_none()) return "";
  if (py::isinstance<py::float_>(size)) {
    double bytes = size.cast<double>();
    if (std::isfinite(bytes) && bytes == std::floor(bytes) && std::fabs(bytes) < 9.2e18)
      return std::to_string(static_cast<int64_t>(bytes));
  }
  return py::str(size).cast<std::string>();
}

// A memory_limit argument, read with the GIL held. Its bytes are parsed inside unlocked, where a
// bad size raises ScheduleError; None is -1, the command's default.
struct MemoryLimitArg {
  std::optional<std::string> text;
  explicit MemoryLimitArg(const py::object& size) {
    if (!size.is_none()) text = size_text(size);
  }
  int64_t bytes() const { return text ? cli::memory_limit_bytes(*text) : -1; }
};

// The step's IR for the schedule, as `loom explain --json` prints it.
std::string explain_json(PySchedule& s, int64_t micro_batch, int64_t seq, int64_t accum, const MemoryLimitArg& memory_limit) {
  return guarded(s.sources.get(), [&] {
    check_schedule_rules(*s.schedule);
    RuntimePlan plan = lower_schedule(*s.schedule);
    const std::string& model = s.schedule->tree().model_name();
    cli::ExplainOptions options;
    options.nproc = s.schedule->world();
    options.micro_batch = micro_batch;
    options.seq = seq;
    options.accum = accum;
    options.memory_limit = std::max<int64_t>(memory_limit.bytes(), 0);  // None: none, as `loom explain` without the flag
    py::gil_scoped_release unlocked;  // tracing and the passes take a while on large models
    return cli::explain_step(plan, model, options).program.to_json();
  });
}

// Runs `work` without the GIL, turning a UserError into loom.ScheduleError.
template <class F>
py::object unlocked(const SourceManager* sources, F&& work) {
  nlohmann::json result = guarded(sources, [&] {
    py::gil_scoped_release released;
    return work();
  });
  return from_json(result);
}

py::object verify(PySelection& s, int nproc, int64_t micro_batch, int64_t seq, int64_t accum, uint64_t seed,
                  const std::string& data, std::optional<double> atol, std::optional<double> rtol, bool bisect,
                  const py::object& memory_limit) {
  const Schedule& sch = *s.owner->schedule;
  ScheduleFile file(sch);
  cli::VerifyOptions o;
  o.train.schedule_file = file.path();
  o.train.model = sch.tree().model_name();
  o.train.micro_batch = micro_batch;
  o.train.seq = seq;
  o.train.accum = accum;
  o.train.seed = seed;
  o.train.data = data;
  MemoryLimitArg limit(memory_limit);
  o.train.stdlib = stdlib_dir();
  o.nproc = nproc > 0 ? nproc : sch.context().world;
  o.atol = atol;
  o.rtol = rtol;
  o.bisect = bisect;
  try {
    return unlocked(nullptr, [&] {
      o.train.memory_limit = limit.bytes();
      return cli::verify_report(o);
    });
  } catch (const cli::RunFailed& e) {
    throw RunFailure(std::string("loom.verify: ") + e.what());
  }
}

py::object simulate(PySelection& s, const std::string& cluster, const std::string& profile, int64_t micro_batch, int64_t seq,
                    int64_t accum, double clip, const std::string& precision, const py::object& memory_limit,
                    const std::string& memory_plot, int nodes) {
  cli::SimulateOptions o;
  o.model = s.owner->schedule->tree().model_name();
  o.cluster = cluster;
  o.nodes = nodes;
  o.profile = profile;
  o.micro_batch = micro_batch;
  o.seq = seq;
  o.accum = accum;
  o.clip = clip;
  o.precision = precision;
  o.memory_plot = memory_plot;
  MemoryLimitArg limit(memory_limit);
  return unlocked(s.owner->sources.get(), [&] {
    o.memory_limit = limit.bytes();
    return cli::simulate_json(*s.owner->schedule, o);
  });
}

// The loom.simulate call that draws the step check() walked, for its over-the-limit hint.
std::string draw_call(const RuntimePlan& plan, const CheckedStep& step, const MemoryLimitArg& limit) {
  std::string given = *limit.text;
  bool bytes = !given.empty() && given.find_first_not_of("0123456789") == std::string::npos;
  std::string call = "loom.simulate(sch, cluster=\"NAME\"";
  if (plan.micro_batch <= 0) call += ", micro_batch=" + std::to_string(step.micro_batch);
  call += ", seq=" + std::to_string(step.seq);
  if (plan.accum <= 0) call += ", accum=" + std::to_string(step.accum);
  return call + ", memory_limit=" + (bytes ? given : "\"" + given + "\"") + ", memory_plot=\"memory.svg\")";
}

// check()'s work; raises ScheduleError.
void check_schedule(PySelection& s, const py::object& memory_limit, int64_t micro_batch, int64_t seq, int64_t accum) {
  MemoryLimitArg limit(memory_limit);
  guarded(s.owner->sources.get(), [&] {
    cli::check_at_least("--micro-batch", "micro_batch", micro_batch, 1);
    cli::check_at_least("--seq", "seq", seq, 1);
    cli::check_at_least("--accum", "accum", accum, 1);
    RuleOptions rules;
    rules.memory_limit = std::max<int64_t>(limit.bytes(), 0);
    check_schedule_rules(*s.owner->schedule, rules);
    RuntimePlan plan = lower_schedule(*s.owner->schedule);
    if (rules.memory_limit == 0) return;
    CheckedStep step = CheckedStep::of(plan, rules.memory_limit, micro_batch, seq, accum);
    step.draw_command = draw_call(plan, step, limit);
    step.limit_name = "memory_limit";
    step.micro_batch_name = "micro_batch";
    step.seq_name = "seq";
    py::gil_scoped_release released;  // tracing and the passes take a while on large models
    cli::check_step_memory_of(plan, s.owner->schedule->tree().model_name(), s.owner->schedule->world(), step);
  });
}

// The schedule's warnings, rendered as `loom check` prints them.
py::list rendered_warnings(const PySchedule& owner) {
  py::list warnings;
  for (const Diagnostic& d : owner.schedule->warnings()) warnings.append(render(d, owner.sources.get()));
  return warnings;
}

// `loom check`: the whole-schedule rules, the lowering `loom run` would do (what it cannot honour
// is an error here too), and with a memory limit the step walked at micro_batch x seq
// (check_step_memory_of). Returns the schedule's warnings (given by its primitives as they
// were applied); a ScheduleError it raises carries them too, as its `warnings`, so that an error
// does not hide them.
py::list check(PySelection& s, const py::object& memory_limit, int64_t micro_batch, int64_t seq, int64_t accum) {
  try {
    check_schedule(s, memory_limit, micro_batch, seq, accum);
  } catch (py::error_already_set& e) {
    if (e.matches(schedule_error)) e.value().attr("warnings") = rendered_warnings(*s.owner);
    throw;
  }
  return rendered_warnings(*s.owner);
}

py::object plan(const std::string& model, int world, int local_world, int64_t seq, int64_t micro_batch, int64_t accum,
                const py::object& memory_limit, const std::string& cluster, const std::string& profile,
                const std::string& checkpoint, const std::string& attention, const std::string& precision, int top, int threads,
                const std::string& memory_passes, int nodes) {
  cli::PlanOptions o;
  o.model = model;
  o.world = world;
  o.local_world = local_world;
  o.seq = seq;
  o.micro_batch = micro_batch;
  o.accum = accum;
  o.memory_limit = size_text(memory_limit);
  o.cluster = cluster;
  o.nodes = nodes;
  o.profile = profile;
  o.checkpoint = checkpoint;
  o.attention = attention;
  o.memory_passes = memory_passes;
  o.precision = precision;
  o.top = top;
  o.threads = threads;
  return unlocked(nullptr, [&] { return cli::plan_json_report(o); });
}

// A Python function's error inside the tuner, carried out of the C++ code that called it to be
// raised again, as it was, once the GIL is held (the tuner runs without it).
struct PythonFailure : std::runtime_error {
  explicit PythonFailure(std::shared_ptr<py::error_already_set> e) : std::runtime_error("a Python error"), error(std::move(e)) {}
  std::shared_ptr<py::error_already_set> error;
};

// The function that builds the schedule at each point, called with the GIL held: its
// loom.ConstraintViolation prunes the point as a .sched's constrain() does. `build` is shared so
// that copies of the std::function do not touch Python's reference counts without the GIL.
std::function<void(const std::shared_ptr<Schedule>&)> schedule_builder(std::shared_ptr<py::function> build) {
  return [build](const std::shared_ptr<Schedule>& schedule) {
    py::gil_scoped_acquire held;
    auto s = std::make_shared<PySchedule>();
    s->schedule = schedule;
    try {
      (*build)(root_of(s));
    } catch (py::error_already_set& e) {
      if (e.matches(constraint_violation)) throw ConstraintViolation(SourceRange{}, py::str(e.value()));
      if (e.matches(schedule_error)) throw UserError(SourceRange{}, py::str(e.value()));
      throw PythonFailure(std::make_shared<py::error_already_set>(std::move(e)));
    }
  };
}

py::object tune(const py::object& schedule, const std::string& model, int world, int local_world, const std::string& evaluator,
                const std::string& cluster, const std::string& profile, const std::optional<std::string>& strategy,
                size_t max_trials, uint64_t seed, const py::object& memory_limit, int64_t seq, int64_t micro_batch, int64_t accum,
                const std::string& db, const std::string& out, int steps, int nodes) {
  if (model.empty()) throw py::value_error("loom.tune needs model=\"...\" (loom.models() lists them)");
  cli::TuneCommand o;
  if (py::isinstance<py::function>(schedule)) {
    // The trial database knows a schedule by its text; a function's may change under the same name.
    if (!db.empty()) throw py::value_error("loom.tune keeps no trial database for a function; tune a .sched file to keep one");
    o.build = schedule_builder(std::make_shared<py::function>(schedule.cast<py::function>()));
    o.name = py::str(schedule.attr("__qualname__"));
  } else {
    o.file = schedule.cast<std::string>();
  }
  o.model = model;
  o.nproc = world;
  o.local_world = local_world;
  o.evaluator = evaluator;
  o.cluster = cluster;
  o.nodes = nodes;
  o.profile = profile;
  o.strategy_given = strategy.has_value();
  if (strategy) o.strategy = *strategy;
  o.max_trials = max_trials;
  o.seed = seed;
  o.memory_limit = size_text(memory_limit);
  o.seq = seq;
  o.micro_batch = micro_batch;
  o.accum = accum;
  o.db = db;
  o.out = out;
  o.steps = steps;
  o.stdlib = stdlib_dir();
  try {
    return unlocked(nullptr, [&] { return cli::tune_json_report(o); });
  } catch (const PythonFailure& e) {
    e.error->restore();  // the function's own error, raised again
    throw py::error_already_set();
  } catch (const tune::SweepInterrupted&) {  // Ctrl-C stopped a real-run trial
    PyErr_SetString(PyExc_KeyboardInterrupt, "loom.tune: interrupted; the running trial's ranks were stopped");
    throw py::error_already_set();
  }
}

// Copies what is written to a stream to another as well, keeping the text (train's errors).
class Tee : public std::streambuf {
 public:
  explicit Tee(std::streambuf* out) : out_(out) {}
  const std::string& text() const { return text_; }

 protected:
  int overflow(int c) override {
    if (c == EOF) return 0;
    text_.push_back(static_cast<char>(c));
    return out_->sputc(static_cast<char>(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    text_.append(s, static_cast<size_t>(n));
    return out_->sputn(s, n);
  }
  int sync() override { return out_->pubsync(); }

 private:
  std::streambuf* out_;
  std::string text_;
};

// The last `n` lines of `text`.
std::string last_lines(const std::string& text, size_t n) {
  size_t at = text.size();
  for (size_t lines = 0; at > 0 && lines <= n;) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
    ++lines;
  }
  return text.substr(at + 1);
}

// std::cerr written to `tee` as well while it lives.
class CerrTeed {
 public:
  explicit CerrTeed(Tee& tee) : kept_(std::cerr.rdbuf(&tee)) {}
  ~CerrTeed() { std::cerr.rdbuf(kept_); }
  CerrTeed(const CerrTeed&) = delete;
  CerrTeed& operator=(const CerrTeed&) = delete;

 private:
  std::streambuf* kept_;
};

// One run at a time per process: the command line's arguments, the launcher's signal handling
// and std::cerr are the process's.
std::mutex one_run;

// `loom run` of the schedule with `options` as its flags (micro_batch=2 is --micro-batch 2, a
// True is a flag); returns the steps' metrics rank 0 wrote.
py::list train(PySelection& s, int64_t steps, const py::kwargs& options) {
  const Schedule& sch = *s.owner->schedule;
  guarded(s.owner->sources.get(), [&] { check_schedule_rules(sch); });
  ScheduleFile file(sch);
  std::vector<std::string> args{"loom", "run", file.path(), "--model", sch.tree().model_name(), "--nproc",
                                std::to_string(sch.context().world), "--steps", std::to_string(steps), "--metrics", file.metrics()};
  for (auto [key, value] : options) {
    std::string flag = "--" + key.cast<std::string>();
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (py::isinstance<py::bool_>(value)) {
      if (value.cast<bool>()) args.push_back(flag);
      continue;
    }
    args.insert(args.end(), {flag, std::string(py::str(value))});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Tee tee(std::cerr.rdbuf());
  int rc = 0;
  {
    py::gil_scoped_release released;
    std::lock_guard<std::mutex> alone(one_run);
    CerrTeed teed(tee);
    rc = cli::command_line(static_cast<int>(argv.size()), argv.data());
  }
  if (rc != 0)
    throw RunFailure("loom.train: `loom run` failed (exit code " + std::to_string(rc) + "):\n" + last_lines(tee.text(), 12));
  py::list out;
  std::ifstream lines(file.metrics());
  for (std::string line; std::getline(lines, line);) out.append(from_json(nlohmann::json::parse(line)));
  return out;
}

}  // namespace

void bind_workflow(py::module_& m) {
  TrainOptions d;
  m.def("check", &check, py::arg("schedule"), py::arg("memory_limit") = py::none(), py::arg("micro_batch") = d.micro_batch,
        py::arg("seq") = d.seq, py::arg("accum") = d.accum,
        "`loom check`: the whole-schedule rules, and with memory_limit (bytes or '600MiB'; None or 0: none) the step at "
        "micro_batch x seq walked as `loom simulate` walks it; returns the warnings, raises ScheduleError on an error or a "
        "step over the limit.");
  m.def(
      "explain",
      [](PySelection& s, int64_t micro_batch, int64_t seq, int64_t accum, const py::object& memory_limit) {
        return explain_json(*s.owner, micro_batch, seq, accum, MemoryLimitArg(memory_limit));
      },
      py::arg("schedule"), py::arg("micro_batch") = 2, py::arg("seq") = 128, py::arg("accum") = 1,
      py::arg("memory_limit") = py::none(),
      "The step's instruction IR as JSON text (`loom explain --json`), the GIL released while it lowers; memory_limit in "
      "bytes or as '600MiB' (None or 0: none, as the command without --memory-limit)");
  m.def("verify", &verify, py::arg("schedule"), py::arg("nproc") = 0, py::arg("micro_batch") = d.micro_batch, py::arg("seq") = d.seq,
        py::arg("accum") = d.accum, py::arg("seed") = d.seed, py::arg("data") = d.data, py::arg("atol") = py::none(),
        py::arg("rtol") = py::none(), py::arg("bisect") = true, py::arg("memory_limit") = py::none(),
        "`loom verify --json`: one step of the plain model and one of the schedule (nproc: its world), compared module "
        "by module; a dict with 'equivalent', 'first_divergence' and 'breaking_directives'; memory_limit in bytes or as "
        "'600MiB' (None: the run's default, on a GPU 90% of its memory; 0: none)");
  m.def("simulate", &simulate, py::arg("schedule"), py::arg("cluster") = "", py::arg("profile") = "",
        py::arg("micro_batch") = d.micro_batch, py::arg("seq") = d.seq, py::arg("accum") = d.accum, py::arg("clip") = d.clip,
        py::arg("precision") = "bf16", py::arg("memory_limit") = py::none(), py::arg("memory_plot") = "", py::arg("nodes") = 0,
        "`loom simulate --json` on a cluster (by name or file; nodes: on that many nodes of its kind, 0: its own) or a profile: a dict with 'step_s', 'compute_s', "
        "'exposed_comm_s', 'peak_bytes', ...; memory_limit in bytes or as '600MiB' (None: on a cluster 90% of its "
        "device's memory, on a profile the limit its run planned within; 0: none); memory_plot: an SVG file to draw "
        "the memory timeline in");
  m.def("plan", &plan, py::arg("model"), py::arg("world"), py::arg("local_world") = 0, py::arg("seq") = d.seq,
        py::arg("micro_batch") = d.micro_batch, py::arg("accum") = d.accum, py::arg("memory_limit") = py::none(),
        py::arg("cluster") = "", py::arg("profile") = "", py::arg("checkpoint") = "none", py::arg("attention") = "memory_efficient",
        py::arg("precision") = "bf16", py::arg("top") = 5, py::arg("threads") = 0, py::arg("memory_passes") = "off", py::arg("nodes") = 0,
        "`loom plan --json` (nodes: the cluster on that many nodes of its kind, 0: its own): {'plans': [...]}, best first, each with params, grads, optim, tp, pp, step_s, mfu, peak_bytes "
        "and its schedule's text; memory_passes='auto' plans sharded plans' gathers by the memory-aware passes within "
        "memory_limit (None: 90% of the cluster device's memory).");
  m.def("tune", &tune, py::arg("schedule"), py::arg("model") = "", py::arg("world") = 1, py::arg("local_world") = 0,
        py::arg("evaluator") = "sim", py::arg("cluster") = "", py::arg("profile") = "", py::arg("strategy") = py::none(),
        py::arg("max_trials") = 0, py::arg("seed") = 0, py::arg("memory_limit") = py::none(), py::arg("seq") = d.seq,
        py::arg("micro_batch") = d.micro_batch, py::arg("accum") = d.accum, py::arg("db") = "", py::arg("out") = "",
        py::arg("steps") = 6, py::arg("nodes") = 0,
        "`loom tune --json` (nodes: the cluster on that many nodes of its kind, 0: its own) of a .sched file's path, or of a function build(sch) that declares knobs with sch.tune(...) "
        "(evaluated by the simulator): a dict with 'space_size', 'best' and 'trials'.");
  m.def("train", &train, py::arg("schedule"), py::arg("steps") = d.steps,
        "`loom run` of the schedule, its keyword arguments the command's flags (micro_batch=2, lr=1e-3, data='t.bin', "
        "trace='t.json'): under torchrun, srun or mpirun this process is one rank, else it starts the schedule's world "
        "of ranks. Returns the steps' metrics (rank 0's --metrics lines); raises loom.RunError when the run fails.");
}

}  // namespace loom::python
