// The per-op half of the profiler (issue #4 §3): an interceptor that sits innermost, where a
// compute op's parameters are already resident, and measures each traced op of the step —
// forward time and memory around the call, backward time and memory between two autograd
// markers (one on the op's output: its backward starts; one on each input that needs a
// gradient: its backward is done). Wall clock on CPU; CUDA events on GPU, read after each
// micro-batch. Memory: the counting CPU allocator, or CUDA allocator statistics.
#pragma once

#include <memory>

#include "backend/comm/communicator.h"
#include "backend/ir/op_trace.h"
#include "backend/cost/profile.h"
#include "models/nn/module.h"

namespace loom {

// What the waits unpacked in the measured steps (instrument/unpack_timer.h), over all of them.
struct UnpackRate {
  double gb_per_s = -1;  // the slowest rank's rate; -1: nothing unpacked, or on a GPU (host time only)
  int64_t bytes = 0;     // the most bytes a rank unpacked; 0 on a GPU
};

class OpProfiler : public nn::CallInterceptor {
 public:
  // `inner` (may be null) runs each call (the activation checkpointer). `cuda_device` < 0: CPU.
  OpProfiler(torch::nn::Module& model, const ir::OpTrace& trace, nn::CallInterceptor* inner, int cuda_device);
  ~OpProfiler() override;

  // Around each micro-batch; only micro-batches begun with `measured` are recorded.
  void begin_forward(bool measured);
  void begin_backward();
  void end_backward();
  // The optimizer's update of `elements` took `ms` (recorded in measured steps).
  void optimizer_step_took(double ms, int64_t elements);
  // The gradient norm's own work took `ms`: the norm and the clipping, less its waits for the
  // all-reduce (recorded in measured steps).
  void grad_norm_took(double ms);
  // A measured step took `ms` of wall time, this profiler's own work in it included.
  void step_took(double ms);

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

  // Per traced op, in forward order: means of the times (a step is their sum, and the mean of a
  // sum is the sum of the means: on a shared CPU an op's times have a long upper tail that a
  // median leaves out, and the simulated step with it), maxima of the memory figures,
  // then the maximum of each over the ranks of `world`, so every rank returns the same; with
  // more than one rank also each rank's own times (OpProfile::forward_ms_by_rank).
  std::vector<OpProfile> result(comm::Group& world) const;
  // The mean update time, the maximum over the ranks of `world`; -1 when none was measured.
  double optimizer_step_ms(comm::Group& world) const;
  // The gradient norm's mean, likewise.
  double grad_norm_ms(comm::Group& world) const;
  // Everything above into `profile`, whose measured_steps is set: its ops, optimizer step (and
  // the most elements a rank's updated), gradient norm and unpacking (a step's bytes). Every
  // rank calls it.
  void fill(Profile& profile, comm::Group& world) const;
  // Forgets what was measured (between two steps): a re-planning run's next round measures the
  // program it switched to.
  void reset();

  struct State;

 private:
  void add_rank_times(comm::Group& world, std::vector<OpProfile>& ops) const;
  // The median (the measured step, which the run's median step is compared with) or the mean
  // (a part of the step, which the simulator sums) of `samples`, the maximum over the ranks; -1
  // when none was measured.
  double slowest_median(const std::vector<double>& samples, comm::Group& world) const;
  double slowest_mean(const std::vector<double>& samples, comm::Group& world) const;
  // The largest of every rank's `value` over `world`.
  double max_over_ranks(double value, comm::Group& world) const;
  // The waits' unpacking over the measured micro-batches and step tails; every rank calls it.
  UnpackRate unpack_rate(comm::Group& world) const;
  std::unique_ptr<State> s_;
};

}  // namespace loom
