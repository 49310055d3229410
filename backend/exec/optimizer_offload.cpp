#include "backend/exec/optimizer_offload.h"

#include <torch/csrc/autograd/generated/variable_factories.h>

namespace loom {

OptimizerOffload::OptimizerOffload(const std::vector<torch::Tensor>& optimized, const std::vector<bool>& offloaded)
    : device_(optimized), offloaded_(offloaded) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < optimized.size(); ++i) {
    const torch::Tensor& t = optimized[i];
    if (!offloaded_[i]) {
      updated_.push_back(t);
      continue;
    }
    // Pinned on a CUDA run, so the copies each way can overlap; a plain copy on a CPU run.
    auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU).dtype(torch::kFloat).pinned_memory(t.is_cuda()));
    host.copy_(t.detach());
    updated_.push_back(host.requires_grad_(true));
  }
}

size_t OptimizerOffload::offloaded_count() const {
  size_t n = 0;
  for (bool o : offloaded_) n += o;
  return n;
}

int64_t OptimizerOffload::offloaded_elements() const {
  int64_t n = 0;
  for (size_t i = 0; i < device_.size(); ++i)
    if (offloaded_[i]) n += device_[i].numel();
  return n;
}

void OptimizerOffload::gradients_to_host() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < device_.size(); ++i) {
    if (!offloaded_[i]) continue;
    const torch::Tensor& g = device_[i].grad();
    if (!g.defined()) {
      updated_[i].mutable_grad() = torch::Tensor();
      continue;
    }
    if (!updated_[i].grad().defined()) updated_[i].mutable_grad() = torch::empty_like(updated_[i]);
    updated_[i].mutable_grad().copy_(g);
    device_[i].mutable_grad() = torch::Tensor();  // the next step's backward starts afresh
  }
}

void OptimizerOffload::values_to_device() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < device_.size(); ++i)
    if (offloaded_[i]) device_[i].detach().copy_(updated_[i].detach());
}

}  // namespace loom
