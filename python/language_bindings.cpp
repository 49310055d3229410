// The language in Python: loom.Schedule(model, world, local_world), selections by path
// (sch["h.0.attn"]), every registered primitive as a method with the keyword arguments of .sched
// (taken from the registry at call time, so a primitive registered in C++ is there without more
// code here), the knobs (sch.tune, sch.constrain), and the trace as .sched text or JSON, replayed
// or loaded from a file as the CLI loads it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "backend/data_dirs.h"
#include "lang/interpreter.h"
#include "lang/trace.h"
#include "models/zoo.h"
#include "primitives/all.h"
#include "primitives/registry.h"
#include "python/bindings.h"

namespace loom::python {
namespace {

// loom.auto: the `auto` of .sched (prefetch(budget=auto)).
struct Auto {};

// Applies the registered primitive `name` to the selection, as a .sched call would.
void apply(PySelection& s, const std::string& name, const py::args& args, const py::kwargs& kwargs) {
  CallArgs call;
  for (const py::handle& a : args) call.positional.push_back({to_value(a), SourceRange{}});
  for (auto [key, value] : kwargs) call.keyword.push_back({key.cast<std::string>(), {to_value(value), SourceRange{}}});
  guarded(s.owner->sources.get(), [&] { s.selection.apply(name, call); });
}

std::vector<std::string> primitive_names() {
  register_builtin_primitives();
  return PrimitiveRegistry::global().names();
}

std::shared_ptr<PySchedule> new_schedule(const std::string& model, int world, int local_world) {
  auto s = std::make_shared<PySchedule>();
  guarded(nullptr, [&] { s->schedule = std::make_shared<Schedule>(module_tree_of(model), ScheduleContext{world, local_world}); });
  return s;
}

// `tune("name", [values])` of .sched: declares the knob, returns the value this evaluation takes.
py::object declare_knob(PySelection& s, const std::string& name, const py::iterable& domain) {
  std::vector<Value> values;
  for (const py::handle& v : domain) values.push_back(to_value(v));
  return from_value(guarded(s.owner->sources.get(), [&] { return s.owner->schedule->knobs().declare(name, values, SourceRange{}); }));
}

// loom.replay: a schedule from trace JSON (loom.to_json, `loom fmt --json`), at the model and
// world it records unless others are given.
PySelection replay_json(const std::string& text, std::string model, int world, int local_world) {
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_object()) {
    // The header's fields as the trace writes them: a string and two counts that fit an int.
    auto count = [&](const char* field, int64_t least, int fallback) -> int {
      if (!header.contains(field)) return fallback;
      const nlohmann::json& v = header.at(field);
      if (!v.is_number_integer() || v.get<int64_t>() < least || v.get<int64_t>() > std::numeric_limits<int>::max())
        throw py::value_error(std::string("loom.replay: the trace's \"") + field + "\" is " + v.dump() + ", not a count of at least " +
                              std::to_string(least) + "; give " + field + "= or fix the trace");
      return static_cast<int>(v.get<int64_t>());
    };
    if (model.empty() && header.contains("model")) {
      if (!header.at("model").is_string())
        throw py::value_error("loom.replay: the trace's \"model\" is " + header.at("model").dump() + ", not a model's name");
      model = header.at("model").get<std::string>();
    }
    if (world <= 0) world = count("world", 1, 1);
    if (local_world < 0) local_world = count("local_world", 0, 0);
  }
  if (model.empty())
    throw py::value_error("loom.replay: the trace names no model; give model=\"...\" (loom.models() lists them)");
  std::shared_ptr<PySchedule> s = new_schedule(model, std::max(world, 1), std::max(local_world, 0));
  guarded(nullptr, [&] { replay(directives_from_json(text), *s->schedule); });
  return root_of(s);
}

}  // namespace

void bind_language(py::module_& m) {
  py::class_<Auto>(m, "_Auto").def("__repr__", [](const Auto&) { return "loom.auto"; });
  m.attr("auto") = Auto{};

  py::class_<PySelection>(m, "Selection")
      .def("__getitem__",
           [](PySelection& s, const std::string& path) {
             return guarded(s.owner->sources.get(), [&] { return PySelection{s.owner, s.selection[path]}; });
           })
      .def("blocks", [](PySelection& s) { return guarded(s.owner->sources.get(), [&] { return PySelection{s.owner, s.selection.blocks()}; }); })
      .def("paths", [](PySelection& s) { return s.selection.paths(); })
      .def("tune", &declare_knob, py::arg("name"), py::arg("values"),
           "Declares a knob (`tune(\"name\", [values])` of .sched) and returns the value this evaluation takes: the "
           "first, or the tuner's choice when loom.tune calls the function that builds the schedule.")
      .def(
          "constrain",
          [](PySelection& s, bool holds, const std::string& text) {
            guarded(s.owner->sources.get(), [&] { s.owner->schedule->knobs().constrain(holds, text, SourceRange{}); });
          },
          py::arg("holds"), py::arg("text") = "a constraint",
          "`constrain(condition)` of .sched: raises loom.ConstraintViolation when it does not hold (the tuner prunes the point).")
      .def("knobs",
           [](PySelection& s) {
             py::dict out;
             for (const Knob& k : s.owner->schedule->knobs().knobs()) out[py::str(k.name)] = from_value(k.value);
             return out;
           }, "The knobs declared so far and the values they took.")
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
        for (const char* n : {"blocks", "paths", "tune", "constrain", "knobs"}) out.append(n);
        return out;
      });

  m.def(
      "Schedule",
      [](const std::string& model, int world, int local_world) { return root_of(new_schedule(model, world, local_world)); },
      py::arg("model"), py::arg("world") = 1, py::arg("local_world") = 0,
      "The schedule of a reference (or registered) model at `world` ranks: the root selection `sch`.");
  m.def(
      "load",
      [](const std::string& path, const std::string& model, int world, int local_world, const std::string& stdlib) {
        std::shared_ptr<PySchedule> s = new_schedule(model, world, local_world);
        InterpreterOptions io;
        io.stdlib_dir = stdlib;
        guarded(s->sources.get(), [&] { Interpreter(*s->schedule, *s->sources, io).run_file(path); });
        return root_of(s);
      },
      py::arg("path"), py::arg("model"), py::arg("world") = 1, py::arg("local_world") = 0, py::arg("stdlib") = stdlib_dir(),
      "A .sched file evaluated as `loom check` does, its calls replayed on a new schedule.");
  m.def("replay", &replay_json, py::arg("trace"), py::arg("model") = "", py::arg("world") = 0, py::arg("local_world") = -1,
        "A schedule from trace JSON (loom.to_json), its directives replayed through the registry, at the model and world "
        "the trace records unless given.");
  m.def("primitives", &primitive_names, "The registered primitives' names, in registration order.");
  m.def("models", [] {
    std::vector<std::string> names;
    for (const ModelInfo& info : model_catalog()) names.push_back(info.name);
    return names;
  }, "The models Schedule() knows: the reference models and those registered with LOOM_REGISTER_MODEL.");
  m.def("to_sched", [](PySelection& s) { return trace_to_sched(*s.owner->schedule); },
        "The schedule's directive trace as .sched text (what `loom fmt --trace` prints).");
  m.def("to_json", [](PySelection& s) { return trace_to_json(*s.owner->schedule); }, "The directive trace as JSON text.");
}

}  // namespace loom::python
