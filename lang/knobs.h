// Tunable knobs (`tune`) and constraints (`constrain`): the search space as data.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {

// One knob as declared: its domain is evaluated under the values of the knobs before it,
// so a knob's domain may depend on other knobs (Slapo Fig. 6).
struct Knob {
  std::string name;
  std::vector<Value> domain;
  Value value;        // the value this evaluation used
  SourceRange where;  // the tune(...) call
};

struct Constraint {
  std::string text;   // the condition as written
  SourceRange where;
  bool holds = true;
};

// Raised when a constrain(...) is false; the tuner treats it as a pruned point.
class ConstraintViolation : public UserError {
 public:
  using UserError::UserError;
};

class KnobSpace {
 public:
  // `--set name=value`: the text is matched against the knob's domain when declared.
  void set_override(const std::string& name, const std::string& text);
  // A tuner's choice for some knobs; knobs not named take their first value.
  void set_assignment(std::map<std::string, Value> values) { assignment_ = std::move(values); }
  const std::map<std::string, Value>& assignment() const { return assignment_; }

  Value declare(const std::string& name, const std::vector<Value>& domain, const SourceRange& where);
  void constrain(bool holds, const std::string& text, const SourceRange& where);

  const std::vector<Knob>& knobs() const { return knobs_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }
  const Knob* find(const std::string& name) const;
  // Throws if a --set named a knob the schedule never declared.
  void check_overrides_used() const;

 private:
  std::vector<Knob> knobs_;
  std::vector<Constraint> constraints_;
  std::map<std::string, std::string> overrides_;
  std::map<std::string, Value> assignment_;
};

// Applies command-line `name=value` settings (--set) to a knob space. A setting without a
// name or '=' is a UserError without a location; values are matched when knobs are declared.
void apply_settings(KnobSpace& knobs, const std::vector<std::string>& settings);

// One point of the search space: a value for every knob, in declaration order.
using Configuration = std::vector<std::pair<std::string, Value>>;

}  // namespace loom
