// What every pass receives besides the program: the schedule's requests, resolved. The
// lowering (backend/lower) fills them; the passes do not see the lowering.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/ir/ir.h"

namespace loom {

class InstructionCost;  // backend/cost/instruction_cost.h

// compress(): TAGC on the gradient reduction of the module's parameters (tagc.txt).
struct CompressRequest {
  std::string module;
  double ratio = 10;
  int index_bits = 1;
  double sparsity = 0.9875;  // sparsity=auto resolved by Table 1
};

// bucket(size=...): the module's gathers (and their reductions) in buckets: of at most `size`
// bytes each, or, `automatic`, as SimpleFSDP's auto-wrapping sizes them (auto_bucket).
// bucket() without a size is one bucket of the whole module (PassInputs::buckets).
struct BucketRequest {
  std::string module;
  int64_t size = 0;
  bool automatic = false;
};

// prefetch(): gather the parameters of the blocks after `module` ahead of their use.
struct PrefetchRequest {
  std::string module;  // a block, e.g. "h.3"
  int64_t budget = 0;  // bytes gathered ahead; 0 means auto (proactive_prefetch under a memory limit, else one block ahead)
};

// unshard(): keep a module's parameters gathered from forward to backward; `automatic`
// (unshard(auto)) keeps those of them that selective_unshard finds room for under the limit.
struct UnshardRequest {
  std::string module;
  bool automatic = false;
};

// The groups of passes that read instruction times, in the order the two-level loop plans them
// from measurements, one round after another (deepcompile.txt §3: each pass plans on the
// profile of the program the passes before it made): first prefetching and bucketing
// (proactive_prefetch's fusion rule, auto_bucket's overlap rule), then unsharding
// (selective_unshard's T_c(B)/B). Passes that read no times are in none.
enum class TimedGroup { None, Overlap, Unshard };
constexpr TimedGroup kLastTimedGroup = TimedGroup::Unshard;

// What a group of passes plans with: instruction times (empty: by sizes) and the cost model of
// its memory (null: the traced bytes, no workspaces), as MemoryPlanning below.
struct GroupPlanning {
  std::function<double(const ir::Program&, const ir::Instr&)> instruction_seconds;
  std::shared_ptr<const InstructionCost> cost;
};

// What the memory-aware passes (prefetch(budget=auto), unshard(auto)) plan with
// (deepcompile.txt §4.2-4.3, Table 1).
struct MemoryPlanning {
  int64_t limit = 0;  // M: bytes per rank (--memory-limit); 0: none, and the auto passes fall back
  StateBytes state_bytes = StateBytes::loom_adamw();
  // The seconds one run of an instruction of a program takes (a collective's T_c, a compute's
  // T_c in SimpleFSDP's sense), from a cluster's model; empty where none is known: then no
  // gathers are fused, unsharding ranks by size (for any cost alpha + beta * B, T_c(B)/B is
  // highest for the smallest B), and bucket(size=auto) buckets each module whole.
  std::function<double(const ir::Program&, const ir::Instr&)> instruction_seconds;
  // The last group that plans with instruction_seconds; the groups after it plan by sizes, as
  // without times, with `cost`'s memory still (a re-plan's earlier rounds, backend/train/replan.h).
  // By default every group.
  TimedGroup timed_through = kLastTimedGroup;
  // The groups an earlier round of a re-plan settled (deepcompile.txt §3: a pass plans on the
  // profile of the program the passes before it left, and is not planned again): each plans
  // with what it planned with then, so the program keeps their decisions. Empty: none.
  std::map<TimedGroup, GroupPlanning> settled;
  // The cost model those times come from, where the passes may keep it: its compute workspaces
  // count in the memory walk (memory::memory_around_each), as they do when the simulator prices
  // the program. Null: none known (a run's first program plans without them; its re-plans with
  // a profile's, profile_planning.h).
  std::shared_ptr<const InstructionCost> cost;
  double fusion_alpha = 1.5;  // fuse two all-gathers when T_c(V1) + T_c(V2) > alpha * T_c(V1 + V2) (§4.2)
  // M_prefetch: bytes gathered ahead of their use at any point. DeepSpeed's DeepCompile uses
  // 4e9 (MAX_BUFFERED_SIZE); under a smaller limit M governs.
  int64_t prefetch_group_bytes = 4'000'000'000;

  // Plans with `model`'s instruction times (instruction_seconds) and its memory (cost).
  void plan_with(std::shared_ptr<const InstructionCost> model);
  // The times and memory planned with, as a settled group keeps them; and back.
  GroupPlanning planning() const { return {instruction_seconds, cost}; }
  void plan_as(const GroupPlanning& group) {
    instruction_seconds = group.instruction_seconds;
    cost = group.cost;
  }

  // The limit on a device of `device_bytes` when none is given: its memory less DeepSpeed
  // DeepCompile's 10% margin (allocator fragmentation, library workspaces); at least a byte, since
  // 0 would be no limit at all.
  static int64_t device_default(int64_t device_bytes) { return std::max<int64_t>(1, device_bytes / 10 * 9); }
  // The limit a command plans within: `given` as --memory-limit gave it (-1: not given; 0:
  // none), else the default of a device of `device_bytes` (a GPU's, a cluster's), or none
  // where there is no device to fill (0 bytes: a CPU).
  static int64_t limit_or_default(int64_t given, int64_t device_bytes) {
    if (given >= 0) return given;
    return device_bytes > 0 ? device_default(device_bytes) : 0;
  }
  // The limit a plan or a tuning point is judged by, and its passes plan within: as
  // limit_or_default, but 0 is all of the device's memory (a plan is judged against some limit).
  static int64_t judging_limit(int64_t given, int64_t device_bytes) {
    return given == 0 ? device_bytes : limit_or_default(given, device_bytes);
  }
};

}  // namespace loom

namespace loom::passes {

struct PassInputs {
  std::vector<PrefetchRequest> prefetch;
  std::vector<std::string> buckets;  // bucket() targets: module paths
  std::vector<BucketRequest> sized_buckets;  // bucket(size=BYTES|auto)
  std::vector<UnshardRequest> unshard;
  std::vector<CompressRequest> compress;
  int64_t data_parallel_bucket_bytes = 1 << 20;  // DDP's bucket size (the run's bucket_bytes)
  bool offload = false;        // offload("optimizer"): optimizer states on the host
  int64_t offload_budget = 0;  // bytes of states that may stay on the device
  bool offload_automatic = false;  // budget=auto: under a memory limit, adaptive_offload decides (else all offloaded)
  int reductions_in_flight = 2;  // backward reduce-scatters overlapping compute (window_reductions; 0: as placed)
  MemoryPlanning memory;
};

// A pass rewrites the program and says whether it changed anything.
using Pass = bool (*)(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
