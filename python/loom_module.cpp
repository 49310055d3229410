// The `loom` Python module (pybind11): the schedule language one to one. A Schedule of a model,
// selections by path (sch["h.0.attn"]), every registered primitive as a method with the keyword
// arguments of .sched (taken from the registry at call time, so a primitive registered in C++ is
// there without more code here), the trace as .sched text or JSON, files loaded as the CLI loads
// them, and the step's IR as `loom explain` lowers it. Errors are loom.ScheduleError carrying the
// rendered diagnostic (file:line:col where it came from a file). Built into build/python/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>

#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/pass_pipeline.h"
#include "lang/diagnostics.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "lang/trace.h"
#include "models/zoo.h"
#include "primitives/all.h"
#include "primitives/registry.h"
#include "verifier/schedule_rules.h"

namespace py = pybind11;

namespace loom::python {
namespace {

// A schedule and the sources its files came from (for located error messages).
struct PySchedule {
  std::shared_ptr<SourceManager> sources = std::make_shared<SourceManager>();
  std::shared_ptr<Schedule> schedule;
};

// A selection of a schedule, keeping the schedule alive.
struct PySelection {
  std::shared_ptr<PySchedule> owner;
  Selection selection;
};

// loom.auto: the `auto` of .sched (prefetch(budget=auto)).
struct Auto {};

py::handle schedule_error;  // loom.ScheduleError (kept for the interpreter's life)

[[noreturn]] void raise(const UserError& e, const SourceManager* sources) {
  PyErr_SetString(schedule_error.ptr(), render(e.diagnostic(), sources).c_str());
  throw py::error_already_set();
}

// Runs `f`, turning a UserError into loom.ScheduleError with its rendered diagnostic.
template <class F>
auto guarded(const PySchedule& owner, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const UserError& e) {
    raise(e, owner.sources.get());
  }
}

// A Python argument as a language value: ints, floats, bools, strings, lists, None, loom.auto.
Value to_value(const py::handle& o) {
  if (o.is_none()) return Value::none();
  if (py::isinstance<Auto>(o)) return Value::auto_();
  if (py::isinstance<py::bool_>(o)) return Value::boolean(o.cast<bool>());
  if (py::isinstance<py::int_>(o)) return Value::integer(o.cast<int64_t>());
  if (py::isinstance<py::float_>(o)) return Value::floating(o.cast<double>());
  if (py::isinstance<py::str>(o)) return Value::string(o.cast<std::string>());
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    std::vector<Value> items;
    for (const py::handle& item : o) items.push_back(to_value(item));
    return Value::list(std::move(items));
  }
  throw py::type_error("loom: an argument of type " + std::string(py::str(o.get_type())) +
                       " has no .sched value (use int, float, bool, str, a list, None or loom.auto)");
}

// Applies the registered primitive `name` to the selection, as a .sched call would.
void apply(PySelection& s, const std::string& name, const py::args& args, const py::kwargs& kwargs) {
  CallArgs call;
  for (const py::handle& a : args) call.positional.push_back({to_value(a), SourceRange{}});
  for (auto [key, value] : kwargs) call.keyword.push_back({key.cast<std::string>(), {to_value(value), SourceRange{}}});
  guarded(*s.owner, [&] { s.selection.apply(name, call); });
}

std::vector<std::string> primitive_names() {
  register_builtin_primitives();
  return PrimitiveRegistry::global().names();
}

// The step's IR for the schedule, as `loom explain --json` prints it.
std::string explain_json(PySchedule& s, int64_t micro_batch, int64_t seq, int64_t accum, int64_t memory_limit) {
  return guarded(s, [&] {
    check_schedule_rules(*s.schedule);
    RuntimePlan plan = lower_schedule(*s.schedule);
    StepOptions options;
    options.accum = plan.accum_or(accum);
    options.memory.limit = memory_limit;
    ir::TraceShape shape{plan.micro_batch_or(micro_batch), seq};
    py::gil_scoped_release unlocked;  // tracing and the passes take a while on large models
    const std::string& model = s.schedule->tree().model_name();
    return lower_step(plan, trace_model(model, shape, plan.replacements), nullptr, PipelineDebug{}, options).to_json();
  });
}

PySelection root_of(const std::shared_ptr<PySchedule>& s) { return {s, *s->schedule}; }

}  // namespace
}  // namespace loom::python

PYBIND11_MODULE(loom, m) {
  using namespace loom;
  using namespace loom::python;
  m.doc() = "Loom: a schedule language for distributed training of LibTorch models (docs/python.md)";
  schedule_error = py::exception<UserError>(m, "ScheduleError").release();
  py::class_<Auto>(m, "_Auto").def("__repr__", [](const Auto&) { return "loom.auto"; });
  m.attr("auto") = Auto{};

  py::class_<PySelection>(m, "Selection")
      .def("__getitem__",
           [](PySelection& s, const std::string& path) {
             return guarded(*s.owner, [&] { return PySelection{s.owner, s.selection[path]}; });
           })
      .def("blocks", [](PySelection& s) { return guarded(*s.owner, [&] { return PySelection{s.owner, s.selection.blocks()}; }); })
      .def("paths", [](PySelection& s) { return s.selection.paths(); })
      .def("__repr__", [](PySelection& s) { return s.selection.describe(); })
      // Every registered primitive: sel.prefetch(budget=loom.auto), sch.zero(stage=3).
      .def("__getattr__",
           [](py::object self, const std::string& name) -> py::object {
             std::vector<std::string> names = primitive_names();
             if (std::find(names.begin(), names.end(), name) == names.end())
               throw py::attribute_error("loom: no primitive '" + name + "' (loom.primitives() lists them)");
             return py::cpp_function([self, name](py::args args, py::kwargs kwargs) {
               apply(self.cast<PySelection&>(), name, args, kwargs);
               return self;
             });
           })
      .def("__dir__", [](py::object self) {
        py::list out;
        for (const std::string& n : primitive_names()) out.append(n);
        for (const char* n : {"blocks", "paths"}) out.append(n);
        return out;
      });

  m.def(
      "Schedule",
      [](const std::string& model, int world, int local_world) {
        auto s = std::make_shared<PySchedule>();
        try {
          s->schedule = std::make_shared<Schedule>(module_tree_of(model), ScheduleContext{world, local_world});
        } catch (const UserError& e) {
          raise(e, nullptr);
        }
        return root_of(s);
      },
      py::arg("model"), py::arg("world") = 1, py::arg("local_world") = 0,
      "The schedule of a reference (or registered) model at `world` ranks: the root selection `sch`.");
  m.def(
      "load",
      [](const std::string& path, const std::string& model, int world, int local_world, const std::string& stdlib) {
        auto s = std::make_shared<PySchedule>();
        try {
          s->schedule = std::make_shared<Schedule>(module_tree_of(model), ScheduleContext{world, local_world});
          InterpreterOptions io;
          io.stdlib_dir = stdlib;
          Interpreter(*s->schedule, *s->sources, io).run_file(path);
        } catch (const UserError& e) {
          raise(e, s->sources.get());
        }
        return root_of(s);
      },
      py::arg("path"), py::arg("model"), py::arg("world") = 1, py::arg("local_world") = 0, py::arg("stdlib") = LOOM_STDLIB_DIR,
      "A .sched file evaluated as `loom check` does, its calls replayed on a new schedule.");
  m.def("primitives", &primitive_names, "The registered primitives' names, in registration order.");
  m.def("to_sched", [](PySelection& s) { return trace_to_sched(*s.owner->schedule); },
        "The schedule's directive trace as .sched text (what `loom fmt --trace` prints).");
  m.def("to_json", [](PySelection& s) { return trace_to_json(*s.owner->schedule); }, "The directive trace as JSON text.");
  m.def(
      "check",
      [](PySelection& s) {
        guarded(*s.owner, [&] { check_schedule_rules(*s.owner->schedule); });
        std::vector<std::string> warnings;
        for (const Diagnostic& d : s.owner->schedule->warnings()) warnings.push_back(render(d, s.owner->sources.get()));
        return warnings;
      },
      "Runs the whole-schedule rules (`loom check`); returns the warnings, raises ScheduleError on an error.");
  m.def(
      "explain",
      [](PySelection& s, int64_t micro_batch, int64_t seq, int64_t accum, int64_t memory_limit) {
        return explain_json(*s.owner, micro_batch, seq, accum, memory_limit);
      },
      py::arg("schedule"), py::arg("micro_batch") = 2, py::arg("seq") = 128, py::arg("accum") = 1,
      py::arg("memory_limit") = 0, "The step's instruction IR as JSON text (`loom explain --json`), the GIL released while it lowers.");
}
