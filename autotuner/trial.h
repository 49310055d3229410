// One evaluation of one point of a search space (issue #16 §2): what it measured, or why it has
// no measurement. The objective is tokens per second per rank, subject to the peak memory
// fitting the memory limit. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "autotuner/space.h"

namespace loom::tune {

enum class TrialStatus {
  Ok,          // measured, within the memory limit
  Infeasible,  // measured (or predicted) above the memory limit, or refused by the runtime
  Failed,      // the evaluation failed: the run crashed or the schedule does not lower
  TimedOut,    // a real run passed its time limit
};
const char* status_name(TrialStatus s);
// Throws std::invalid_argument for a name status_name never returns.
TrialStatus status_named(const std::string& name);

struct Trial {
  Point knobs;
  TrialStatus status = TrialStatus::Failed;
  double objective = 0;      // tokens per second per rank; 0 unless Ok
  double step_s = 0;         // the step time it measured or predicted (0 when it has none)
  int64_t peak_bytes = 0;    // the peak memory per rank it measured or predicted
  std::string message;       // why it is not Ok
  double seconds = 0;        // how long the evaluation took
  int steps = 0;             // a real run's steps trained (successive halving gives survivors more); 0: simulated
  bool from_database = false;  // found in the database, not evaluated by this sweep

  bool ok() const { return status == TrialStatus::Ok; }
};

}  // namespace loom::tune
