// What the Python module's binding files share: a schedule held by Python, its selections, the
// error it raises, and language values and JSON as Python objects.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"
#include "lang/schedule.h"
#include "lang/source.h"
#include "lang/value.h"

namespace loom::python {

namespace py = pybind11;

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

// loom.ScheduleError and loom.ConstraintViolation (a ScheduleError).
extern py::handle schedule_error, constraint_violation;

// A run that failed (loom.train), raised in Python as loom.RunError.
struct RunFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raises `e` as loom.ScheduleError (loom.ConstraintViolation for a failed constrain) with its
// rendered diagnostic.
[[noreturn]] void raise(const UserError& e, const SourceManager* sources);

// Runs `f`, turning a UserError into a Python exception with its rendered diagnostic.
template <class F>
auto guarded(const SourceManager* sources, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const UserError& e) {
    raise(e, sources);
  }
}

// A Python argument as a language value (ints, floats, bools, strings, lists, None, loom.auto)
// and back.
Value to_value(const py::handle& o);
py::object from_value(const Value& v);

// JSON as Python dicts and lists.
py::object from_json(const nlohmann::json& j);

PySelection root_of(const std::shared_ptr<PySchedule>& s);

// The Python module's parts: the language (loom.Schedule, selections, primitives, knobs, traces)
// and the workflow (check, explain, verify, simulate, plan, tune, train).
void bind_language(py::module_& m);
void bind_workflow(py::module_& m);

}  // namespace loom::python
