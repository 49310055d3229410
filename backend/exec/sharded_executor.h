// Sharded execution of a step with Lins factors s_p <= s_g <= s_os, s_os >= 2 (ZeRO-1/2/3,
// MiCS-style groups, and hybrids such as Table III's (4,4,8)). Each rank keeps a flat, padded
// 1/s_p shard of every parameter; the full tensors' storage is freed. The forward follows the
// step's IR: gathers are launched where the IR puts them (so prefetch overlaps), waited before
// use, released after the last use. In backward, a pass-through autograd node on each module's
// output runs the IR's backward instructions up to that module's compute just before its
// backward: its parameters are waited for and the next ops' gathers launched (backward
// prefetch, where the IR places them). A parameter's backward release (the IR's, in the
// micro-batches it runs in) runs once its gradient is complete. Each parameter's gradient is
// reduce-scattered to its s_p owners as soon as it is complete (simplefsdp.txt §3.1), in the
// same order on every rank, and completed where the program waits for it. Gradients (lins.txt §IV-C): when s_g > s_p, every micro-batch but
// the last is all-reduced among the s_g / s_p peers and each keeps its 1/s_g (select & drop);
// the last is all-reduced over all dp / s_p replicas and each rank keeps the 1/s_os slice its
// optimizer states cover. The optimizer updates that slice in place inside the parameter shard,
// and the s_os / s_p peers all-gather the updated slices (the paper's broadcasts, as one collective).
// With s_p = 1 (ZeRO-1/2) each parameter becomes a view into its padded flat copy and stays
// resident. Collectives follow the IR, never the data: modules a rank does not call (experts no
// token chose) are passed over with their collectives, their gradients reduced as zeros.
// A bucket() (one IR collective for several parameters) is one all-gather of their
// concatenated shards and one reduce-scatter of their concatenated gradients. A compress()ed
// parameter's reduce-scatter is TAGC's: sparsify, OR the index, reduce count sketches, peel.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

#include "backend/comm/communicator.h"
#include "backend/ir/ir.h"
#include "backend/train/optimizer_checkpoint.h"
#include "backend/comm/shard_groups.h"
#include "backend/exec/tagc.h"
#include "models/nn/module.h"

namespace loom {

class StateCopier;

class ShardedExecutor : public nn::CallInterceptor {
 public:
  // The program must be the step planned for this model and sharding (lower_step). `inner`
  // (may be null) runs each module call once its parameters are resident: the activation
  // checkpointer, whose recomputation in backward re-gathers through this executor.
  // Gradients travel in `reduce_dtype` (cast before each collective, accumulated in fp32).
  ShardedExecutor(torch::nn::Module& model, ir::Program program, ShardGroups groups, nn::CallInterceptor* inner,
                  torch::Dtype reduce_dtype = torch::kFloat);
  ~ShardedExecutor() override;

  // The tensors the optimizer updates: this rank's 1/s_os slices, views into its parameter
  // shards, with gradients after average_gradients.
  const std::vector<torch::Tensor>& optimized() const;
  // The process groups it runs its collectives on.
  const ShardGroups& groups() const;

  // Before each micro-batch's forward (`micro_batch` of `micro_batches`); the last one ends the
  // step's accumulation.
  void begin_forward(int64_t micro_batch, int64_t micro_batches);
  // Adaptive offloading: the program's offload_states and reload_states run through `copier`
  // (which must outlive the executor's steps).
  void attach_state_copier(StateCopier* copier);
  // Between steps (every parameter released, no reduction in flight): follow `program` from the
  // next step on, a re-plan of the same parameters and sharding (backend/train/replan.h).
  void replace_program(ir::Program program);
  // Whether its program has state copies (offload_states / reload_states) for a copier to run.
  bool moves_optimizer_states() const;
  // After the forward returned: runs the IR's remaining forward instructions (final releases).
  void finish_forward();
  // On a pipeline stage that hands its input's gradient back, once its backward returned: runs
  // the program's backward instructions before that send (the reductions it places after the
  // last backward compute), so they are issued before it, as the program orders them.
  void run_backward_to_send();
  // After backward: completes the gradient reductions still in flight (during backward each
  // completes where the program waits for it, window_reductions' window, which bounds the
  // full-size gradients alive) and keeps this rank's part.
  void finish_backward();
  // After the last micro-batch: the optimizer slices' gradients, averaged over all dp ranks.
  void average_gradients();
  // Clips the global gradient norm (over all slices of all ranks) to `max_norm`; returns the
  // norm before clipping.
  double clip_gradients(double max_norm);
  // After the optimizer step: its gradients go (LibTorch 1.13's zero_grad would keep them, zeroed).
  void drop_gradients();
  // After the optimizer step: spreads the updated slices inside each optimizer subgroup (the
  // program's broadcasts, as one all-gather per parameter).
  void publish();

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

  // Every rank: make all parameters resident (to save the whole model), then free them again.
  void gather_all();
  void release_all();

  // Just before `module`'s backward: the IR's backward instructions up to its compute
  // (gathers launched ahead, waits), then its parameters made resident.
  void before_backward(const torch::nn::Module* module);
  const std::vector<size_t>& params_of(const torch::nn::Module* module) const;

  // Test-only faults (test_skip_reduction, test_release_early): the gradients of `unreduced`
  // (parameter names) are never reduced, each rank keeping its own; the parameters of the
  // `released_early` modules (paths) are refilled with zeros instead of gathered in backward.
  void inject_faults(const std::vector<std::string>& unreduced, const std::vector<std::string>& released_early);

  // compress(): TAGC replaces the reduce-scatter of these parameters (tagc.txt Algorithm 1),
  // keyed by parameter name. Call before the first step.
  void compress(const std::map<std::string, tagc::Config>& params);
  // After a step, for each compressed parameter: elementwise, its averaged gradient is within
  // `bound` of the exact one (the dropped values' thresholds summed over the dp ranks / dp),
  // unless peeling left `estimated` entries (over all shards) to estimation.
  struct CompressionBound {
    std::string param;
    double bound = 0;
    int64_t estimated = 0;
  };
  std::vector<CompressionBound> compression_bounds() const;
  // TAGC's error-feedback accumulators of this rank (parameter name -> padded flat tensor), for
  // checkpoints, and back. Restoring refuses a tensor of another size (another sharding).
  std::map<std::string, torch::Tensor> compression_residuals() const;
  void restore_compression_residuals(const std::map<std::string, torch::Tensor>& residuals);

  // Each optimizer slice as a range of its parameter's flat padded tensor (sharded checkpoints),
  // in the order of optimized().
  std::vector<OptimizedRange> optimized_ranges() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
