// Tensor parallelism at runtime (slapo.txt §3.2.2, issue #5): shard() splits a Linear's
// parameters over the tensor-parallel group; sync() adds the collective that makes the
// split module compute what the whole one does, which lowering puts in the step program as a
// `tp_all_reduce` or `tp_all_gather` after its module (backend/lower/tensor_parallel.cpp): the
// interceptor issues the program's, and no other. As in Megatron-LM:
//   fwd_post all_reduce  the output is summed over the group in forward (the gradient passes
//                        through unchanged); a Linear split along its inputs adds its bias once,
//                        after the sum (RowParallelLinear)
//   fwd_post all_gather  the output's last dimension is gathered (the gradient keeps this
//                        rank's part)
//   bwd_post all_reduce  the gradient at the module's inputs is summed over the group in
//                        backward (the forward passes through unchanged: ColumnParallelLinear)
// A schedule that splits without the right sync computes something else; loom verify says where.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/ir/ir.h"
#include "backend/lower/runtime_plan.h"
#include "models/nn/module.h"

namespace loom {

class TensorParallel : public nn::CallInterceptor {
 public:
  // `group`: this rank's tensor-parallel group (nullptr: tp = 1, nothing is split). The
  // interceptor issues no collective until it follows a program.
  TensorParallel(torch::nn::Module& root, const std::vector<TensorShard>& shards, std::shared_ptr<comm::Group> group,
                 nn::CallInterceptor* next = nullptr);

  // Issues the tensor-parallel collectives of `step` (this rank's program): each forward
  // `tp_all_reduce` / `tp_all_gather` after its module's forward, each backward `tp_all_reduce`
  // on its module's input gradient. The backward ones that precede their module's backward
  // compute are a recomputation's replays of the forward's, which the same interception issues.
  void follow(const ir::Program& step);

  // Replaces each split parameter by this rank's slice. Every rank must hold the same whole
  // parameters first (the plain model's, from the same seed).
  void shard_parameters();
  // The axis `param` (a full name) is split along, or -1 when every tp rank holds all of it.
  int split_axis(const std::string& param) const;
  // The interceptor each module call goes on to (the activation checkpointer, the profiler).
  void call_next(nn::CallInterceptor* next) { next_ = next; }

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

 private:
  struct Sync {
    bool reduce_output = false;      // fwd_post all_reduce
    bool gather_output = false;      // fwd_post all_gather
    bool reduce_input_grad = false;  // bwd_post all_reduce
    bool bias_after_reduce = false;  // a Linear split along its inputs whose bias is whole
  };
  torch::Tensor reduce(const torch::Tensor& partial) const;
  torch::Tensor gather_last_dim(const torch::Tensor& part) const;

  torch::nn::Module& root_;
  std::shared_ptr<comm::Group> group_;
  nn::CallInterceptor* next_;
  std::unordered_map<std::string, int> split_axis_;  // full parameter name -> axis
  std::unordered_map<const torch::nn::Module*, Sync> syncs_;
};

}  // namespace loom
