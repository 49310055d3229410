// The runtime plan: a validated schedule's directives, resolved into what the run does
// (lower_schedule.h builds it). Plain data with a comment on each field. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/lower/pipeline_stages.h"
#include "backend/passes/pass.h"  // the requests the passes receive
#include "lang/replacements.h"

namespace loom {

// A fault a test-only primitive injects on purpose (to test loom verify).
enum class FaultKind {
  CorruptShard,    // test_corrupt_shard: perturb one rank's shard of a parameter after the step
  SkipReduction,   // test_skip_reduction: never reduce one parameter's gradient
  ReleaseEarly,    // test_release_early: release a module's gathered parameters before backward
};

struct InjectedFault {
  FaultKind kind = FaultKind::CorruptShard;
  std::string module;  // the module's path
  std::string param;   // the parameter's full name (ReleaseEarly: empty, all of the module's)
  int rank = 0;        // CorruptShard: the rank whose shard is perturbed
};

// shard(): parameters of a module split along `axis` over the tensor-parallel group.
struct TensorShard {
  std::string module;
  std::vector<std::string> params;  // the module's own parameter names ("weight", "bias")
  int axis = 0;
};

// sync(): a collective on a sharded module's output in forward (fwd_post) or on the gradient
// of its input in backward (bwd_post), over the tensor-parallel group.
struct SyncRequest {
  std::string module;
  std::string mode;  // fwd_post or bwd_post
  std::string op;    // all_reduce, or all_gather (fwd_post)
};

struct RuntimePlan {
  bool verify_first = false;            // verify(): the launcher runs loom verify before training
  std::vector<std::string> checkpoint;  // module paths whose forward is recomputed in backward
  ir::Sharding factors;                 // dp, and the Lins factors from shard_states (all 1: plain data parallelism)
  std::vector<PrefetchRequest> prefetch;
  std::vector<UnshardRequest> unshard;  // unshard(true|auto): modules whose parameters stay gathered for backward
  std::vector<InjectedFault> faults;    // test-only primitives
  std::vector<std::string> buckets;     // bucket(): modules whose parameters communicate as one
  std::vector<BucketRequest> sized_buckets;  // bucket(size=BYTES|auto): modules whose collectives go in sized buckets
  std::vector<CompressRequest> compress;
  bool offload = false;        // offload("optimizer"): optimizer states on the host
  int64_t offload_budget = 0;  // bytes of states allowed to stay on the device (auto: 0)
  bool offload_automatic = false;  // budget=auto: adaptive offloading under a memory limit
  int tp = 1, pp = 1;          // mesh(): dp = world / (tp * pp)
  std::vector<TensorShard> shards;
  std::vector<SyncRequest> syncs;
  std::vector<std::string> pipeline_splits;  // stage boundaries after these list entries ("h.5")
  PipelineStages stages;                     // pp > 1: which list entries each stage runs
  int64_t micro_batch = 0, accum = 0;        // batch(): per rank, per step; 0 keeps the command line's
  std::vector<ModuleReplacement> replacements;  // replace(): modules that run another implementation
  bool model_parallel() const { return tp > 1 || pp > 1; }
  // Whether a pass plans within the memory limit: prefetch(budget=auto), unshard(auto),
  // bucket(size=auto) or offload("optimizer", budget=auto).
  bool plans_within_memory() const {
    return prefetches_automatically() || unshards_automatically() || buckets_automatically() || offload_automatic;
  }
  // prefetch(budget=auto): under a limit proactive_prefetch, which fuses gathers by their times.
  bool prefetches_automatically() const {
    for (const PrefetchRequest& p : prefetch)
      if (p.budget == 0) return true;
    return false;
  }
  // unshard(auto): under a limit selective_unshard, which keeps parameters by T_c(B)/B.
  bool unshards_automatically() const {
    for (const UnshardRequest& u : unshard)
      if (u.automatic) return true;
    return false;
  }
  // Whether bucket(size=auto) sizes buckets (from instruction times, with or without a limit).
  bool buckets_automatically() const {
    for (const BucketRequest& b : sized_buckets)
      if (b.automatic) return true;
    return false;
  }
  // The run's micro-batch and micro-batches per step: the schedule's batch(), else these.
  int64_t micro_batch_or(int64_t command_line) const { return micro_batch > 0 ? micro_batch : command_line; }
  int64_t accum_or(int64_t command_line) const { return accum > 0 ? accum : command_line; }
};

}  // namespace loom
