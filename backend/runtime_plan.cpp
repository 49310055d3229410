#include "backend/runtime_plan.h"

#include <set>

#include "backend/pipeline_stages.h"
#include "primitives/tagc_table1.h"

namespace loom {
namespace {

// `hint` says what the user can do instead; by default, train without the directive.
[[noreturn]] void unsupported(const Directive& d, const std::string& why, const std::string& hint = "") {
  throw UserError(d.where, d.primitive + " is not yet supported at runtime: " + why,
                  !hint.empty() ? hint : "remove `" + d.to_sched() + "`: the runtime cannot honour it yet, and the rest of the schedule runs without it");
}

}  // namespace

RuntimePlan plan_runtime(const Schedule& schedule) {
  RuntimePlan plan;
  for (const Directive& d : schedule.trace()) {
    if (d.primitive == "checkpoint") {
      plan.checkpoint.push_back(d.target);
    } else if (d.primitive == "shard_states") {
      // The primitive checked the dependency rule (s_p <= s_g <= s_os, s_g in {s_p, s_os}).
      plan.factors.params = static_cast<int>(d.arg("params")->as_int());
      plan.factors.grads = static_cast<int>(d.arg("grads")->as_int());
      plan.factors.optim = static_cast<int>(d.arg("optim")->as_int());
    } else if (d.primitive == "prefetch") {
      // Honoured by the sharded executor, which follows the IR's placement of gathers; without
      // sharded parameters there is nothing to gather (the primitive warned).
    } else if (d.primitive == "unshard") {
      // keep=true: the IR's unshard pass; with s_p = 1 parameters are always resident (the primitive warned).
      if (!d.arg("keep")->is(ValueKind::Bool))
        unsupported(d, "unshard(auto) needs the memory-aware selection of deepcompile.txt §4.3, which is not implemented",
                    "write unshard(true) to keep this module's parameters gathered, or remove it");
    } else if (d.primitive == "bucket") {
      plan.buckets.push_back(d.target);  // the sharded executor follows the IR's bucket pass
    } else if (d.primitive == "offload") {
      plan.offload = true;
      const Value& b = *d.arg("budget");
      plan.offload_budget = b.is(ValueKind::Bytes) ? b.as_int() : 0;
    } else if (d.primitive == "compress") {
      CompressRequest c{d.target, d.arg("ratio")->as_number(), static_cast<int>(d.arg("index_bits")->as_int())};
      const Value& s = *d.arg("sparsity");
      c.sparsity = s.is(ValueKind::Float) ? s.as_number() : tagc_table1_sparsity(c.ratio);
      plan.compress.push_back(c);
    } else if (d.primitive == "verify") {
      // The launcher runs loom verify first (cli/run.cpp); the ranks have nothing to do.
    } else if (d.primitive.rfind("test_", 0) == 0) {
      const Value* param = d.arg("param");
      const Value* rank = d.arg("rank");
      plan.faults.push_back({d.primitive, d.target, param ? d.target + "." + param->as_string() : "",
                             rank ? static_cast<int>(rank->as_int()) : 0});
    } else if (d.primitive == "mesh") {
      plan.tp = static_cast<int>(d.arg("tp")->as_int());
      plan.pp = static_cast<int>(d.arg("pp")->as_int());
    } else if (d.primitive == "shard") {
      const std::string& type = schedule.tree().node(schedule.tree().find(d.target)).type;
      if (type != "Linear")
        unsupported(d, "tensor parallelism splits Linear layers; `" + d.target + "` is a " + type,
                    "shard the Linear layers inside it instead (`loom tree --model " + schedule.tree().model_name() + "` lists them)");
      TensorShard s{d.target, {}, static_cast<int>(d.arg("axis")->as_int())};
      const Value& params = *d.arg("params");
      if (params.is(ValueKind::String)) s.params.push_back(params.as_string());
      else for (const Value& p : params.as_list()) s.params.push_back(p.as_string());
      plan.shards.push_back(s);
    } else if (d.primitive == "sync") {
      SyncRequest s{d.target, d.arg("mode")->as_string(), d.arg("op")->as_string()};
      bool runs = (s.mode == "fwd_post" && (s.op == "all_reduce" || s.op == "all_gather")) ||
                  (s.mode == "bwd_post" && s.op == "all_reduce");
      if (!runs)
        unsupported(d, "sync(mode=\"" + s.mode + "\", op=\"" + s.op + "\") is not built; the runtime has fwd_post "
                       "all_reduce or all_gather, and bwd_post all_reduce (Megatron-LM's row- and column-parallel layers)",
                    "use one of those syncs");
      plan.syncs.push_back(s);
    } else if (d.primitive == "pipeline_split") {
      plan.pipeline_splits.push_back(d.target);
    } else {
      unsupported(d, "its runtime effect is not implemented yet");
    }
  }
  for (const Directive& d : schedule.trace()) {
    static const std::set<std::string> with_model_parallel{"mesh", "shard", "sync", "pipeline_split", "verify"};
    // shard_states(1, 1, 1) (zero() or fsdp() at dp = 1 record it too) is plain data parallelism.
    bool plain_data_parallel = d.primitive == "shard_states" && d.arg("optim")->as_int() == 1;
    std::string mesh_kind = plan.tp > 1 && plan.pp > 1 ? "tensor and pipeline" : plan.tp > 1 ? "tensor" : "pipeline";
    if (plan.model_parallel() && !with_model_parallel.count(d.primitive) && !plain_data_parallel)
      unsupported(d, "with tensor or pipeline parallelism (mesh tp = " + std::to_string(plan.tp) + ", pp = " +
                         std::to_string(plan.pp) + ") the runtime runs shard, sync and pipeline_split over plain data "
                         "parallelism; " + d.primitive + " is not combined with them yet",
                  "remove it to train with the mesh's " + mesh_kind + " parallelism, or remove the mesh (and its "
                  "shard, sync and pipeline_split) to keep it");
    if (d.primitive == "test_release_early" && plan.factors.params == 1)
      unsupported(d, "it releases sharded parameters, but this schedule does not shard them (s_p = 1)",
                  "shard parameters first, e.g. sch.zero(stage=3)");
    if (d.primitive == "compress" && plan.factors.params == 1 && schedule.dp() > 1)
      unsupported(d, "TAGC replaces the reduce-scatter of sharded parameters, and this schedule does not shard them "
                     "(s_p = 1)",
                  "shard them with zero(stage=3) or fsdp() first, or remove the compress()");
  }
  // The stage plan can fail (a ModuleList too short for pp stages): say so before any rank starts.
  if (plan.pp > 1) plan_pipeline_stages(schedule.tree(), plan.pipeline_splits, plan.pp);
  return plan;
}

}  // namespace loom
