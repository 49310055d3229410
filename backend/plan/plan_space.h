// The plans `loom plan` searches (issue #15 §4): Lins' sharding factors (lins.txt §IV-B, §V-B:
// s_p | s_g | s_os | dp, s_g in {s_p, s_os}, a factor that spans nodes fills a node first), a
// tensor-parallel and pipeline mesh, and whether every block is recomputed; each written as the
// schedule that runs it. Torch-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lang/module_tree.h"
#include "lang/replacements.h"

namespace loom {

struct PlanPoint {
  int tp = 1, pp = 1;
  int params = 1, grads = 1, optim = 1;  // s_p, s_g, s_os inside the data-parallel group
  bool checkpoint = false;               // every repeated block recomputed
  int dp(int world) const { return world / (tp * pp); }
};

struct PlanSpaceOptions {
  int world = 1;
  int local_world = 1;         // ranks per node
  std::string checkpoint = "none";  // "none", "all", "auto" (both)
};

// Every point of the space for `tree`, in a fixed order. Tensor parallelism is offered where it
// divides a node's ranks (its groups stay inside a node) and only for models whose blocks it knows
// how to split (tensor_parallel_directives);
// a pipeline up to the blocks there are.
std::vector<PlanPoint> enumerate_plan_space(const ModuleTree& tree, const PlanSpaceOptions& options);

// How a plan with sharded parameters (s_p > 1) overlaps their gathers.
enum class PlanPrefetch {
  BlockAhead,  // each block's gathers during the block before it, as the runtimes Lins compares
               // overlap them (lins.txt §VI-A.4): prefetch()
  MemoryAware  // DeepCompile's passes under the run's memory limit (docs/passes.md): every block's
               // prefetch(budget=auto) and, without tensor parallelism (whose shards unsharding
               // would undo), unshard(auto)
};

// The schedule of `point` for `tree`, as a .sched file's text (without a header): its
// structure's lines, then its own. Every attention module runs `attention` (a registered
// replace() implementation; "" keeps the model's own), and sharded parameters are gathered
// ahead as `prefetch` says.
std::string plan_schedule_text(const ModuleTree& tree, const PlanPoint& point, const std::string& attention = "",
                               PlanPrefetch prefetch = PlanPrefetch::BlockAhead);

// plan_schedule_text in two parts: the lines every point of its mesh shares (the attention's
// replace(), the mesh and its Megatron split), and the point's own (its sharding, recomputation,
// prefetch and unshard), which follow them.
struct PlanText {
  std::string structure, own;
};
PlanText plan_schedule_parts(const ModuleTree& tree, const PlanPoint& point, const std::string& attention = "",
                             PlanPrefetch prefetch = PlanPrefetch::BlockAhead);

// The modules of `tree` that implementation `impl` replaces (ReplacementRegistry), each to run it:
// what the trace of a plan that replaces them is taken with.
std::vector<ModuleReplacement> replacements_of(const ModuleTree& tree, const std::string& impl);

// Megatron-LM's split of one repeated block, for a model whose blocks group their Linear layers
// in sub-modules (attention, MLP): in each group the last Linear is row-parallel (its weight split
// along its inputs, its output summed in forward), the others column-parallel (split along their
// outputs, their input gradient summed in backward). Empty when the blocks are not like that or a
// split dimension does not divide by `tp`.
std::string tensor_parallel_directives(const ModuleTree& tree, int tp);

}  // namespace loom
