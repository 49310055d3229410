#include "verifier/rules/rules.h"

namespace loom::rules {
namespace {

// What a module sharded along `axis` hands to a sync, as Slapo's shard methods infer it
// (slapo.txt §3.2.2): a partition of the features (gathered by all_gather), or partial sums
// (aggregated by all_reduce or reduce_scatter). Linear weights are [out, in]; Embedding
// weights are [vocab, dim].
enum class Produces { Unknown, Partition, PartialSums };

Produces forward_output(const std::string& type, int64_t axis) {
  if (type == "Linear") return axis == 0 ? Produces::Partition : Produces::PartialSums;
  if (type == "Embedding") return axis == 0 ? Produces::PartialSums : Produces::Partition;
  return Produces::Unknown;
}

// The gradient of a Linear's input: partial sums when the output features are split.
Produces input_gradient(const std::string& type, int64_t axis) {
  if (type == "Linear") return axis == 0 ? Produces::PartialSums : Produces::Partition;
  return Produces::Unknown;
}

}  // namespace

void sync_matches_shard_output(const Schedule& s, const RuleOptions&) {
  for (const Directive& sync : s.trace()) {
    if (sync.primitive != "sync") continue;
    std::string mode = sync.arg("mode")->as_string(), op = sync.arg("op")->as_string();
    if (mode == "fwd_pre") continue;
    int module = s.tree().find(sync.target);
    const std::string& type = s.tree().node(module).type;
    for (const Directive* shard : s.directives_on(sync.target, "shard")) {
      const Value& params = *shard->arg("params");
      bool weight = params.is(ValueKind::String) && params.as_string() == "weight";
      if (params.is(ValueKind::List))
        for (const Value& p : params.as_list()) weight |= p.as_string() == "weight";
      if (!weight) continue;
      int64_t axis = shard->arg("axis")->as_int();
      Produces what = mode == "fwd_post" ? forward_output(type, axis) : input_gradient(type, axis);
      if (what == Produces::Unknown) continue;
      bool gathers = op == "all_gather";
      if (what == Produces::Partition && !gathers)
        throw UserError(sync.where,
                        "sync(mode=\"" + mode + "\", op=\"" + op + "\") on `" + sync.target + "`: a " + type +
                            " sharded along axis " + std::to_string(axis) + " gives each rank a partition of its " +
                            (mode == "fwd_post" ? "output" : "input gradient") + ", which " + op + " would sum",
                        "use op=\"all_gather\" to reassemble the partition, or leave it partitioned for the next sharded layer");
      if (what == Produces::PartialSums && gathers)
        throw UserError(sync.where,
                        "sync(mode=\"" + mode + "\", op=\"all_gather\") on `" + sync.target + "`: a " + type +
                            " sharded along axis " + std::to_string(axis) + " gives each rank partial sums of its " +
                            (mode == "fwd_post" ? "output" : "input gradient") + ", which all_gather cannot add up",
                        "use op=\"all_reduce\" (or \"reduce_scatter\")");
    }
  }
}

}  // namespace loom::rules
