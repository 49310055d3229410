// ActivationCheckpointer, the runtime of checkpoint(): a module's forward runs without keeping
// activations, and is run again with gradients during backward (LibTorch C++ has no checkpoint
// utility). Random state is restored for the recomputation, so dropout masks match.
#pragma once

#include <unordered_set>

#include "models/nn/module.h"

namespace loom {

class ActivationCheckpointer : public nn::CallInterceptor {
 public:
  explicit ActivationCheckpointer(std::unordered_set<const torch::nn::Module*> modules) : modules_(std::move(modules)) {}
  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

 private:
  std::unordered_set<const torch::nn::Module*> modules_;
};

// Runs `forward` on `inputs` under checkpointing: no activations kept, recomputed in backward.
torch::Tensor checkpointed_call(const nn::Forward& forward, const std::vector<torch::Tensor>& inputs);

}  // namespace loom
