// OptimizerOffload, the runtime of offload("optimizer", budget=BYTES), deepcompile.txt §4.4's
// offloading in its static form: the optimizer states live in host memory. Each tensor the
// optimizer updates gets a host master copy; the optimizer is built over those, so its AdamW
// states are allocated on the host. Each step: gradients device -> host, the step on the host,
// values host -> device: the step program's `offload` and `reload` instructions, which also say
// which tensors (backend/passes/offload_optimizer.h). budget=auto's adaptive form moves the
// states instead and steps on the device (backend/passes/adaptive_offload.h,
// backend/exec/state_copier.h). On a CPU run device and host are the same memory, but the path
// runs the same way.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace loom {

class OptimizerOffload {
 public:
  // `offloaded[i]`: optimized[i]'s states live on the host.
  OptimizerOffload(const std::vector<torch::Tensor>& optimized, const std::vector<bool>& offloaded);

  // What the optimizer updates, in the order given: a host copy, or the device tensor itself.
  const std::vector<torch::Tensor>& optimized() const { return updated_; }
  // How many tensors (and elements) are offloaded.
  size_t offloaded_count() const;
  int64_t offloaded_elements() const;

  // Before the optimizer step: the device gradients into the host copies.
  void gradients_to_host();
  // After it: the updated host values into the device tensors.
  void values_to_device();

 private:
  std::vector<torch::Tensor> device_;
  std::vector<torch::Tensor> updated_;
  std::vector<bool> offloaded_;
};

}  // namespace loom
