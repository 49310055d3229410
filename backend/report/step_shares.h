// Where each rank's step time went, read back from a run's --trace (backend/instrument/
// timeline.h): compute, exposed communication (the compute track waiting for a collective)
// and idle (the rest of the step: between phases, data, host work). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::report {

struct StepShares {
  int rank = 0;
  int64_t step = 0;  // 1-based, as the metrics file counts
  double step_ms = 0;
  double compute_ms = 0;         // inside forward, backward and optimizer phases, not waiting
  double exposed_comm_ms = 0;    // waiting for a collective
  double idle_ms = 0;            // step_ms less the two
};

// One row per rank and step, ranks in order, steps in order. A trace without step spans (an
// older Loom's, or the simulator's) is a UserError saying so.
std::vector<StepShares> step_shares(const nlohmann::json& trace, const std::string& path);

}  // namespace loom::report
