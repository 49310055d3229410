// Compares the step records of a plain and a scheduled run, rank by rank (loom verify), and
// finds the first quantity, in step order, that differs beyond the tolerance.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "verifier/differential/step_record.h"

namespace loom {

// A difference is accepted when max|scheduled - plain| <= atol + rtol * max|plain|, per tensor.
struct Tolerance {
  std::string dtype;  // what the run computes or reduces in: fp32, fp16 or bf16
  double atol = 0;
  double rtol = 0;
  // The first step's learning rate (0: not used). A gradient element within the tolerance of
  // zero has no sign the comparison can vouch for, and AdamW's first step moves an element by
  // up to lr either way: such elements' updated values may differ by 2 lr more.
  double step_lr = 0;
};
// The defaults for a dtype: fp32 1e-5 + 1e-4 x scale, fp16 1e-3 + 1e-2 x, bf16 1e-2 + 5e-2 x.
Tolerance default_tolerance(const std::string& dtype);

struct QuantityDifference {
  RecordKind kind = RecordKind::Output;
  std::string name;       // module path or parameter name
  std::string module;     // the module it belongs to (a parameter's owner)
  int64_t call = 0;
  int64_t index = 0;
  int rank = 0;
  double max_abs = 0;     // largest |scheduled - plain|
  double allowed = 0;     // what the tolerance accepts for this tensor
  std::string note;       // e.g. a shape mismatch, or the compression bound used
  bool within() const { return max_abs <= allowed; }
};

struct KindSummary {
  RecordKind kind;
  int64_t compared = 0;
  std::optional<QuantityDifference> largest;
};

// Quantities compared against a lossy primitive's error bound instead of the tolerance.
struct BoundedSummary {
  int64_t compared = 0;
  double largest_gradient_bound = 0;
  int64_t estimated = 0;  // entries TAGC decoded by estimation (over all compressed parameters)
};

struct RecordComparison {
  std::vector<KindSummary> kinds;                      // output, output gradient, ... in step order
  std::optional<QuantityDifference> first_divergence;  // the earliest beyond tolerance, in the plain run's step order
  int64_t recorded_by_one_run = 0;                     // e.g. gradients inside a checkpoint()ed module, which only recompute
  BoundedSummary compressed;                           // compress()ed parameters' gradients and values
  int64_t unresolved_updates = 0;                      // updated elements beyond the tolerance whose gradient was within it of zero
  bool equivalent() const { return !first_divergence; }
};

// `plain[r]` and `scheduled[r]` are rank r's records of the two runs (the same ranks, seed and batch).
RecordComparison compare_step_records(const std::vector<std::vector<RecordEntry>>& plain,
                                      const std::vector<std::vector<RecordEntry>>& scheduled, const Tolerance& tolerance);

}  // namespace loom
