// A run's --metrics file read back (one JSON object per step, backend/train/step_loop.cpp):
// what `loom report` plots. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::report {

struct MetricsRow {
  int64_t step = 0;
  double loss = 0;  // NaN where the run's was not finite
  double tokens_per_s = 0;
  double step_ms = 0;
  int64_t peak_bytes = 0;  // the rank's peak memory in the step (peak_mem_bytes)
};

// Every row, in file order. A missing file, a line that is not a metrics object, or a file
// without rows is a UserError naming the file and line.
std::vector<MetricsRow> read_metrics(const std::string& path);

}  // namespace loom::report
