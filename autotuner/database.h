// The trial database (issue #16 §2): every trial is appended to a JSONL file, one line each,
// keyed by the sweep's context (the schedule, the model, the world, the evaluator and the run's
// shape) and the point's knobs, so that a re-run or `loom tune --resume` skips what is already
// measured. A line is written and flushed as its trial ends, so a killed sweep keeps every
// trial before the one it was running; a truncated last line (the kill came mid-write) is
// dropped with a warning. Torch-free.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "autotuner/trial.h"

namespace loom::tune {

class TrialDatabase {
 public:
  // Reads `path` if it exists (an empty path keeps trials in memory only). Throws UserError
  // for a malformed line before the last; `warn` hears of a dropped last line.
  TrialDatabase(std::string path, std::ostream* warn);

  // The trial of `point` under `context`, or nullptr.
  const Trial* find(const std::string& context, const Point& point) const;
  // Records the trial, appending its line to the file.
  void append(const std::string& context, const Trial& trial);
  // Every trial under `context`, in the order they were recorded.
  std::vector<Trial> trials(const std::string& context) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, size_t> index_;                         // context + point -> position
  std::vector<std::pair<std::string, Trial>> trials_;           // (context, trial), in order
  void remember(const std::string& context, Trial trial);
};

// The JSON object of a trial's knobs: numbers as numbers, strings as strings, the rest
// (sizes, auto, none) as their .sched spelling.
std::string knobs_json(const Point& knobs);

}  // namespace loom::tune
