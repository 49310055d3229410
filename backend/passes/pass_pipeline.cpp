#include "backend/passes/pass_pipeline.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>

#include "backend/ir/verifier.h"
#include "lang/diagnostics.h"
#include "backend/passes/adaptive_offload.h"
#include "backend/passes/auto_bucket.h"
#include "backend/passes/bucket.h"
#include "backend/passes/bucket_data_parallel.h"
#include "backend/passes/compress.h"
#include "backend/passes/insert_gather_release.h"
#include "backend/passes/insert_gradient_reduction.h"
#include "backend/passes/insert_parameter_broadcast.h"
#include "backend/passes/mark_unpacks.h"
#include "backend/passes/offload_optimizer.h"
#include "backend/passes/prefetch.h"
#include "backend/passes/proactive_prefetch.h"
#include "backend/passes/selective_unshard.h"
#include "backend/passes/unshard.h"
#include "backend/passes/window_reductions.h"

namespace loom {

const PassList& pipeline_passes() {
  using G = TimedGroup;
  static const PassList list = {
      {"insert_gather_release", passes::insert_gather_release},          // Fig. 4: gather before first use, release after last
      {"insert_gradient_reduction", passes::insert_gradient_reduction},  // Lins: reduce each gradient when complete
      {"insert_parameter_broadcast", passes::insert_parameter_broadcast},  // Lins: s_os > s_p spreads updated params
      {"compress", passes::compress},                                     // TAGC: a compressed reduce-scatter
      {"unshard", passes::unshard},                                       // DeepCompile §4.3: keep gathered for backward
      {"bucket", passes::bucket},                                         // SimpleFSDP §3.2: one collective per bucket
      {"auto_bucket", passes::auto_bucket, G::Overlap},                   // SimpleFSDP §3.3.2: bucket(size=BYTES|auto), reordered
      {"bucket_data_parallel", passes::bucket_data_parallel},             // DDP: gradient all-reduces in size-capped buckets
      // Before the memory-aware passes: how long gradients wait for their reductions is memory they plan with.
      {"window_reductions", passes::window_reductions},                   // SimpleFSDP §3.1: reductions in flight
      {"prefetch", passes::prefetch},                                     // budget=BYTES: gathers of the next blocks, ahead
      {"proactive_prefetch", passes::proactive_prefetch, G::Overlap},     // DeepCompile Alg. 1: budget=auto under a memory limit
      {"selective_unshard", passes::selective_unshard, G::Unshard},       // DeepCompile §4.3: unshard(auto) under a memory limit
      {"adaptive_offload", passes::adaptive_offload},                     // DeepCompile Alg. 2: budget=auto under a memory limit
      {"offload_optimizer", passes::offload_optimizer},                   // DeepCompile §4.4, static: states and the step on the host
      // Last: which waits copy members out of a flat buffer, once every collective is final.
      {"mark_unpacks", passes::mark_unpacks},                             // the waits' host work, priced and timed as theirs
  };
  return list;
}

std::string describe_timed_group(TimedGroup group) {
  std::string passes;
  for (const PipelinePass& p : pipeline_passes())
    if (p.group == group) passes += (passes.empty() ? "" : ", ") + p.name;
  switch (group) {
    case TimedGroup::Overlap: return "prefetching and bucketing (" + passes + ")";
    case TimedGroup::Unshard: return "unsharding (" + passes + ")";
    case TimedGroup::None: break;
  }
  return "the passes that read no times";
}

std::string first_differing_pass(const std::vector<PassRecord>& a, const std::vector<PassRecord>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i].digest != b[i].digest) return a[i].pass;
  if (a.size() == b.size()) return "";
  return (a.size() > b.size() ? a : b)[std::min(a.size(), b.size())].pass;  // one ran a pass the other did not
}

PipelineDebug PipelineDebug::from_environment(std::ostream& out) {
  PipelineDebug d;
  if (const char* v = std::getenv("LOOM_DEBUG")) d.level = std::atoi(v);
  if (const char* v = std::getenv("LOOM_TIME_PASSES")) d.time = std::atoi(v) != 0;
  d.out = &out;
  return d;
}

namespace {
void check(const ir::Program& p, const std::string& after) {
  std::string problem = ir::verify(p);
  if (!problem.empty()) throw InternalError("IR verifier, after " + after + ": " + problem);
}
}  // namespace

ir::Program run_passes(ir::Program program, const passes::PassInputs& inputs, const PassList& list, std::vector<PassRecord>* records,
                       const PipelineDebug& debug) {
  if (debug.verify_each_pass) check(program, "lowering");
  std::optional<passes::PassInputs> by_sizes;  // the inputs less their times, for groups not yet timed
  std::map<TimedGroup, passes::PassInputs> as_settled;  // the inputs of the groups an earlier round settled
  for (const auto& [name, pass, group] : list) {
    const passes::PassInputs* given = &inputs;
    if (auto settled = inputs.memory.settled.find(group); settled != inputs.memory.settled.end()) {
      auto [it, added] = as_settled.try_emplace(group, inputs);
      if (added) it->second.memory.plan_as(settled->second);
      given = &it->second;
    } else if (group > inputs.memory.timed_through && inputs.memory.instruction_seconds) {
      if (!by_sizes) (by_sizes = inputs)->memory.instruction_seconds = nullptr;
      given = &*by_sizes;
    }
    auto t0 = std::chrono::steady_clock::now();
    bool changed = pass(program, *given);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (debug.verify_each_pass) check(program, "pass '" + name + "'");
    if (records) records->push_back({name, changed, ms, program.instrs.size(), std::hash<std::string>{}(program.to_json())});
    if (debug.out && (debug.level >= 1 || debug.time)) {
      *debug.out << "[loom] pass " << name << ": " << (changed ? "changed" : "unchanged") << ", "
                 << program.instrs.size() << " instructions";
      if (debug.time) *debug.out << ", " << ms << " ms";
      *debug.out << "\n";
    }
    if (debug.out && debug.level >= 2 && changed) *debug.out << program.to_text();
  }
  return program;
}

}  // namespace loom
