#include "backend/lower/lower_schedule.h"

#include <map>
#include <vector>

#include "backend/lower/directive_lowering.h"

namespace loom {
namespace {

struct Entry {
  lowering::Lower lower;
  lowering::Check check = nullptr;
  bool with_mesh = false;  // runs beside tensor or pipeline parallelism (the test-only faults do not)
};

// Every primitive with a runtime effect, by name. A new one adds its line here and its
// function in its parallelism's file (docs/backend.md, "Adding a primitive").
const std::map<std::string, Entry>& lowerings() {
  using namespace lowering;
  static const std::map<std::string, Entry> table = {
      {"bucket", {bucket, nullptr, true}},
      {"shard_states", {shard_states, nullptr, true}},
      {"prefetch", {prefetch, nullptr, true}},
      {"unshard", {unshard, nullptr, true}},
      {"mesh", {mesh, nullptr, true}},
      {"shard", {shard, nullptr, true}},
      {"sync", {sync, nullptr, true}},
      {"pipeline_split", {pipeline_split, nullptr, true}},
      {"checkpoint", {checkpoint, check_checkpoint, true}},
      {"offload", {offload, nullptr, true}},
      {"compress", {compress, check_compress, true}},
      {"verify", {[](const Directive&, const Schedule&, RuntimePlan& plan) { plan.verify_first = true; }, nullptr, true}},
      {"batch", {batch, nullptr, true}},
      {"replace", {replace, nullptr, true}},
      {"test_corrupt_shard", {test_corrupt_shard}},
      {"test_skip_reduction", {test_skip_reduction}},
      {"test_release_early", {test_release_early, check_release_early}},
  };
  return table;
}

void check_mesh_composition(const Directive& d, const RuntimePlan& plan) {
  std::string kind = plan.tp > 1 && plan.pp > 1 ? "tensor and pipeline" : plan.tp > 1 ? "tensor" : "pipeline";
  lowering::unsupported(d, "with tensor or pipeline parallelism (mesh tp = " + std::to_string(plan.tp) + ", pp = " +
                               std::to_string(plan.pp) + ") the runtime does not run " + d.primitive + " yet",
                        "remove it to train with the mesh's " + kind + " parallelism, or remove the mesh (and its "
                        "shard, sync and pipeline_split) to keep it");
}

}  // namespace

RuntimePlan lower_schedule(const Schedule& schedule) {
  RuntimePlan plan;
  plan.factors.dp = schedule.dp();
  const std::vector<Directive>& trace = schedule.trace();
  std::vector<const Entry*> entries;  // by directive, looked up once
  entries.reserve(trace.size());
  for (const Directive& d : trace) {
    auto it = lowerings().find(d.primitive);
    if (it == lowerings().end()) lowering::unsupported(d, "its runtime effect is not implemented yet");
    it->second.lower(d, schedule, plan);
    entries.push_back(&it->second);
  }
  lowering::plan_stages(schedule, plan);
  for (size_t i = 0; i < trace.size(); ++i) {
    const Entry& e = *entries[i];
    if (plan.model_parallel() && !e.with_mesh) check_mesh_composition(trace[i], plan);
    if (e.check) e.check(trace[i], schedule, plan);
  }
  return plan;
}

namespace lowering {

void unsupported(const Directive& d, const std::string& why, const std::string& hint) {
  throw UserError(d.where, d.primitive + " is not yet supported at runtime: " + why,
                  !hint.empty() ? hint : "remove `" + d.to_sched() + "`: the runtime cannot honour it yet, and the rest of the schedule runs without it");
}

}  // namespace lowering
}  // namespace loom
