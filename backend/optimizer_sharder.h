// Optimizer-state sharding with replicated parameters (ZeRO-1 and ZeRO-2: s_p = 1, s_os > 1).
// After data-parallel gradient averaging, each rank of an optimizer group of s_os ranks keeps
// a flat, padded 1/s_os slice of every gradient (Lins' select & drop: the rest of the reduced
// gradient is dropped), updates that slice of the parameters with its own optimizer states,
// and the group all-gathers the updated slices (lins.txt §IV-C.2).
#pragma once

#include <memory>
#include <vector>

#include <torch/types.h>

#include "backend/communicator.h"

namespace loom {

class OptimizerSharder {
 public:
  // `params`: unique parameters; `group`: this rank's optimizer-state group.
  OptimizerSharder(const std::vector<torch::Tensor>& params, std::shared_ptr<comm::Group> group);
  ~OptimizerSharder();

  // The tensors the optimizer updates: this rank's slices.
  const std::vector<torch::Tensor>& shards() const;
  // Where this rank's slice of parameter `i` starts in its flat padded tensor.
  int64_t offset(size_t i) const;
  // Takes this rank's slice of each averaged gradient and drops the full gradients.
  void take_gradients();
  // Clips the global gradient norm to `max_norm`, over the slices of the whole group.
  void clip_gradients(double max_norm);
  // All-gathers the updated slices back into the full parameters.
  void publish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
