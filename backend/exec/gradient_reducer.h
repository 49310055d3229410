// Data-parallel gradient averaging: gradients are all-reduced in the buckets it is given, each
// launched (in order) as soon as all of its gradients are complete, while backward still runs.
#pragma once

#include <memory>
#include <vector>

#include <torch/types.h>

#include "backend/comm/communicator.h"

namespace loom {

class GradientReducer {
 public:
  // `params`: unique tensors. `buckets`: indices into `params`, one list per bucket, in launch
  // order: the step program's data-parallel all-reduces (bucket_data_parallel). A parameter in
  // no bucket is never reduced. `deliveries`: per parameter, the gradients autograd hands it
  // in one backward (ir::gradient_deliveries); it is ready for its bucket after the last. One
  // the program hands none (a pipeline stage's copy of an embedding another stage computes
  // with) is a zero gradient, complete where the program reduces it: after the last backward
  // compute, whose parameters are `last_computed` (or, where it has none, at
  // backward_returned()). A bucket holds `reduce_dtype` (gradients are cast into it and back).
  GradientReducer(const std::vector<torch::Tensor>& params, const std::vector<std::vector<size_t>>& buckets,
                  std::vector<int> deliveries, std::vector<size_t> last_computed, comm::Group& group,
                  torch::Dtype reduce_dtype = torch::kFloat);
  ~GradientReducer();

  // Before each micro-batch's backward: `sync` is true on the last micro-batch of a
  // step (gradients are reduced then), false while accumulating.
  void prepare(bool sync);
  // Autograd has returned from the micro-batch's backward (before a pipeline stage sends its
  // input's gradient): the zero gradients are complete if the last compute did not say so.
  void backward_returned();
  // After backward: launches what is left, waits, and writes averaged gradients.
  void finish();
  size_t bucket_count() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
