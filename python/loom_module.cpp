// The `loom` Python module (pybind11), built into build/python/: the schedule language one to one
// (language_bindings.cpp) and the workflow over it (workflow_bindings.cpp). Here: the module, its
// exceptions, and the conversions both parts share. docs/python.md.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "backend/train/loom_executable.h"
#include "python/bindings.h"
#include "lang/knobs.h"

namespace loom::python {

py::handle schedule_error, constraint_violation;  // kept for the interpreter's life

void raise(const UserError& e, const SourceManager* sources) {
  bool violated = dynamic_cast<const ConstraintViolation*>(&e) != nullptr;
  PyErr_SetString((violated ? constraint_violation : schedule_error).ptr(), render(e.diagnostic(), sources).c_str());
  throw py::error_already_set();
}

Value to_value(const py::handle& o) {
  if (o.is_none()) return Value::none();
  if (o.get_type().is(py::module_::import("loom").attr("_Auto"))) return Value::auto_();
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

py::object from_value(const Value& v) {
  switch (v.kind()) {
    case ValueKind::None: return py::none();
    case ValueKind::Auto: return py::module_::import("loom").attr("auto");
    case ValueKind::Bool: return py::bool_(v.as_bool());
    case ValueKind::Int:
    case ValueKind::Bytes: return py::int_(v.as_int());
    case ValueKind::Float: return py::float_(v.as_number());
    case ValueKind::String: return py::str(v.as_string());
    case ValueKind::List: {
      py::list out;
      for (const Value& item : v.as_list()) out.append(from_value(item));
      return out;
    }
    default: return py::str(v.to_source());  // selections and functions: as .sched writes them
  }
}

py::object from_json(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

PySelection root_of(const std::shared_ptr<PySchedule>& s) { return {s, *s->schedule}; }

}  // namespace loom::python

PYBIND11_MODULE(loom, m) {
  using namespace loom::python;
  m.doc() = "Loom: a schedule language for distributed training of LibTorch models (docs/python.md)";
  schedule_error = py::exception<loom::UserError>(m, "ScheduleError").release();
  constraint_violation = py::exception<loom::ConstraintViolation>(m, "ConstraintViolation", schedule_error).release();
  py::register_exception<RunFailure>(m, "RunError");
  // Ranks, verify's runs and the tuner's trials run the `loom` command line, not python.
  const char* given = std::getenv("LOOM_EXECUTABLE");
  loom::set_loom_executable(given && *given ? given : LOOM_EXECUTABLE);
  bind_language(m);
  bind_workflow(m);
}
