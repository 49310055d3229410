// Search strategies (issue #16 §2; slapo.txt §3.4, §5.4): each walks a search space by asking
// for measurements, and stops when it has nothing left to try or when the measure says the
// budget is spent (it throws BudgetSpent). A point already measured costs nothing: the measure
// answers it from the database. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "autotuner/space.h"
#include "autotuner/trial.h"

namespace loom::tune {

// The trial of a point: from the database, or evaluated now.
using Measure = std::function<Trial(const Point&)>;

// Thrown by a Measure when the sweep may evaluate no more points (--max-trials).
struct BudgetSpent : std::runtime_error {
  BudgetSpent() : std::runtime_error("the trial budget is spent") {}
};

// Every valid point, in enumeration order.
void exhaustive(const SearchSpace& space, const Measure& measure, uint64_t seed = 0);
// Every valid point, in a random order (seeded).
void random_search(const SearchSpace& space, const Measure& measure, uint64_t seed);
// Randomized coordinate descent: from a random feasible point, one knob at a time in a random order,
// move along that knob to the best value, walking from the current value while the objective
// improves (a point a constraint prunes is stepped over; a failed or infeasible one ends the
// walk); repeat until a full pass improves nothing, then restart from the best point with a
// new order, until a restarted pass improves nothing either.
void coordinate_descent(const SearchSpace& space, const Measure& measure, uint64_t seed);

// The strategy named "exhaustive", "random" or "coordinate-descent".
using Strategy = std::function<void(const SearchSpace&, const Measure&, uint64_t seed)>;
Strategy strategy_named(const std::string& name);

}  // namespace loom::tune
