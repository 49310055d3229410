// Data-parallel gradient averaging: gradients are all-reduced in buckets, each
// launched as soon as all of its gradients are complete, while backward still runs.
#pragma once

#include <memory>
#include <vector>

#include <torch/types.h>

#include "backend/communicator.h"

namespace loom {

class GradientReducer {
 public:
  // `params` in registration order; shared (tied) tensors are reduced once.
  // Buckets hold `reduce_dtype` (the gradients are cast into them and back).
  // `declared_bucket` (per parameter, may be empty): parameters with the same id >= 0 form one
  // bucket of their own (bucket()); the others fill buckets of `bucket_bytes`.
  GradientReducer(const std::vector<torch::Tensor>& params, comm::Group& group, int64_t bucket_bytes,
                  torch::Dtype reduce_dtype = torch::kFloat, const std::vector<int>& declared_bucket = {});
  ~GradientReducer();

  // Before each micro-batch's backward: `sync` is true on the last micro-batch of a
  // step (gradients are reduced then), false while accumulating.
  void prepare(bool sync);
  // After backward: launches what is left, waits, and writes averaged gradients.
  void finish();
  size_t bucket_count() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
