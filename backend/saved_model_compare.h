// Compares two consolidated model checkpoints (model.pt, as `loom run --save` writes them)
// parameter by parameter: what `loom verify` uses to compare a plain and a scheduled run.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct ParameterDifference {
  std::string name;       // in the model's named_parameters() order (module execution order for the zoo)
  double max_abs = 0;     // largest |a - b|
  double max_value = 0;   // largest |a|, for a relative view
};

// Throws UserError when a file cannot be read as `model`'s parameters.
std::vector<ParameterDifference> compare_saved_models(const std::string& model, const std::string& model_pt_a,
                                                      const std::string& model_pt_b);

}  // namespace loom
