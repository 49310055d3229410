// The search space of a schedule's knobs (issue #16 §2): the knobs that `tune(...)` declares,
// their domains (which may depend on earlier knobs: slapo.txt Fig. 6) and the constraints that
// `constrain(...)` prunes with, found by evaluating the schedule under an assignment. Points are
// enumerated lazily. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lang/knobs.h"

namespace loom::tune {

// Evaluates the schedule with the knobs' values the KnobSpace assigns, declaring the knobs on it;
// throws ConstraintViolation for a pruned point (and UserError for a broken schedule).
using EvaluateSchedule = std::function<void(KnobSpace&)>;

// A point: a value for every knob, in declaration order.
using Point = Configuration;

// "micro_batch=2, ckpt_ratio=0.5", as `loom check --print` and `--set` spell values.
std::string point_text(const Point& p);
// The --set arguments that select `p`: {"micro_batch=2", "ckpt_ratio=0.5"}.
std::vector<std::string> point_settings(const Point& p);

class SearchSpace {
 public:
  explicit SearchSpace(EvaluateSchedule evaluate) : evaluate_(std::move(evaluate)) {}

  // The point `values` selects (knobs it does not name take their first value), with each
  // knob's domain there; nullopt when a constraint prunes it.
  struct Resolved {
    Point point;
    std::vector<std::vector<Value>> domains;  // by knob, under the values of the knobs before it
  };
  std::optional<Resolved> resolve(const std::map<std::string, Value>& values) const;

  // Calls `visit` on every valid point, depth-first in declaration order, until it returns
  // false; `pruned` counts the points a constraint removed.
  void for_each_point(const std::function<bool(const Point&)>& visit, size_t* pruned = nullptr) const;
  // Every valid point (at most `limit`), and how many a constraint pruned.
  std::vector<Point> points(size_t limit = SIZE_MAX, size_t* pruned = nullptr) const;

 private:
  EvaluateSchedule evaluate_;
  // Evaluates under `values`: the knob space as declared, and whether a constraint held.
  KnobSpace evaluated(const std::map<std::string, Value>& values, bool& violated) const;
};

std::map<std::string, Value> values_of(const Point& p);

}  // namespace loom::tune
