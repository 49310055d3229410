// What `loom run` does with a schedule's directives today. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "lang/schedule.h"

namespace loom {

// A fault a test-only primitive injects on purpose (to test loom verify).
struct InjectedFault {
  std::string primitive;  // test_corrupt_shard, test_skip_reduction or test_release_early
  std::string module;     // the module's path
  std::string param;      // the parameter's full name (test_release_early: empty, all of the module's)
  int rank = 0;           // test_corrupt_shard: the rank whose shard is perturbed
};

// compress(): TAGC on the gradient reduction of the module's parameters (tagc.txt).
struct CompressRequest {
  std::string module;
  double ratio = 10;
  int index_bits = 1;
  double sparsity = 0.9875;  // sparsity=auto resolved by Table 1
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
  std::vector<std::string> checkpoint;  // module paths whose forward is recomputed in backward
  ir::Sharding factors;                 // Lins factors from shard_states (all 1: plain data parallelism); dp unset
  std::vector<InjectedFault> faults;    // test-only primitives
  std::vector<std::string> buckets;     // bucket(): modules whose parameters communicate as one
  std::vector<CompressRequest> compress;
  bool offload = false;        // offload("optimizer"): optimizer states on the host
  int64_t offload_budget = 0;  // bytes of states allowed to stay on the device (auto: 0)
  int tp = 1, pp = 1;          // mesh(): dp = world / (tp * pp)
  std::vector<TensorShard> shards;
  std::vector<SyncRequest> syncs;
  std::vector<std::string> pipeline_splits;  // stage boundaries after these list entries ("h.5")
  bool model_parallel() const { return tp > 1 || pp > 1; }
};

// The plan for a validated schedule. A directive whose runtime effect does not exist
// yet is a UserError at its source location naming it: never a silent no-op.
// Supported: checkpoint(); shard_states/zero/fsdp with any valid factors (s_p > 1: the sharded
// executor, also with checkpoint() and prefetch; s_p = 1: optimizer-state sharding, ZeRO-1/2);
// mesh with tensor and pipeline parallelism (shard() of Linear layers; sync() fwd_post all_reduce
// or all_gather, bwd_post all_reduce; pipeline_split(); with plain data parallelism, not with the
// other runtime primitives yet); bucket() (the sharded executor's gathers and reductions, or the data-
// parallel reducer's buckets); compress() where parameters are sharded (s_p > 1: TAGC replaces
// their reduce-scatter); unshard(true); offload("optimizer") (budget=auto: every state on the
// host); verify(); the test-only fault primitives.
RuntimePlan plan_runtime(const Schedule& schedule);

}  // namespace loom
