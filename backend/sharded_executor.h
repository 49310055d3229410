// Fully sharded execution of a step (first version: s_p = s_g = s_os = k, i.e. ZeRO-3 when
// k = dp and MiCS-style groups when k < dp). Each rank keeps a flat, padded 1/k shard of every
// parameter; the full tensors' storage is freed. The forward follows the step's IR: gathers are
// launched where the IR puts them (so prefetch overlaps), waited before use, released after the
// last use. In backward, a pass-through autograd node on each module's output re-gathers its
// parameters just before its backward runs; each parameter's gradient is reduce-scattered to
// its owners as soon as it is complete (simplefsdp.txt §3.1), in the same order on every rank.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

#include "backend/communicator.h"
#include "backend/ir/ir.h"
#include "models/nn/module.h"

namespace loom {

class ShardedExecutor : public nn::CallInterceptor {
 public:
  // `shard_group`: the k ranks sharing one copy of the parameters; `replicas`: the dp / k ranks
  // holding the same shard (nullptr when k = dp). The program must be the step planned for
  // this model and sharding (plan_step).
  ShardedExecutor(torch::nn::Module& model, ir::Program program, std::shared_ptr<comm::Group> shard_group,
                  std::shared_ptr<comm::Group> replicas, int dp);
  ~ShardedExecutor() override;

  // The tensors the optimizer updates: this rank's shards, with gradients after finish_backward.
  const std::vector<torch::Tensor>& shards() const;

  // Before each micro-batch's forward.
  void begin_forward();
  // After the forward returned: runs the IR's remaining forward instructions (final releases).
  void finish_forward();
  // After backward: waits for the gradient reductions and adds them to the shards' gradients.
  void finish_backward();
  // After the last micro-batch: averages the shards' gradients over all dp ranks.
  void average_gradients();
  // Clips the global gradient norm (over all shards of all ranks) to `max_norm`.
  void clip_gradients(double max_norm);

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

  // Every rank: make all parameters resident (to save the whole model), then free them again.
  void gather_all();
  void release_all();

  // Gathers parameter `p` now if it is not resident (used by the backward re-gather).
  void ensure_resident(size_t p);
  const std::vector<size_t>& params_of(const torch::nn::Module* module) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
