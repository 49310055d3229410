// offload("optimizer", budget=...): the optimizer states live in host memory (deepcompile.txt
// §4.4's adaptive offloading, in its static form). Each tensor the optimizer updates gets a
// host master copy; the optimizer is built over those, so its AdamW states are allocated on
// the host. Each step: gradients device -> host, the step on the host, values host -> device.
// Tensors whose states fit in the budget (8 bytes per element for AdamW) stay on the device,
// in order; budget=auto offloads all of them (the profile-guided choice is not built yet).
// On a CPU run device and host are the same memory, but the path runs the same way.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace loom {

class OptimizerOffload {
 public:
  // `device_budget`: bytes of optimizer states allowed to stay with the device tensors; 0: none.
  OptimizerOffload(const std::vector<torch::Tensor>& optimized, int64_t device_budget);

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
