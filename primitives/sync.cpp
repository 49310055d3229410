// sync(mode, op): aggregates what a sharded module produces (slapo.txt §3.2.2):
// its inputs before forward (fwd_pre), outputs after forward (fwd_post) or
// input gradients after backward (bwd_post), with the given collective.
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: the module (or one below it) was never sharded.
void check_sharded(const PrimitiveCall& c) {
  const Schedule& s = c.schedule();
  // Latest first: a schedule usually shards a layer just before it syncs it.
  for (auto d = s.trace().rbegin(); d != s.trace().rend(); ++d)
    if (d->primitive == "shard" && s.tree().is_within(s.tree().find(d->target), c.module())) return;
  c.fail("module is synced in mode " + c.string_arg("mode") + " but was never sharded",
         "call .shard(...) on " + c.target_name() + " first");
}
}  // namespace

LOOM_PRIMITIVE(sync) {
  return loom::PrimitiveSpec("sync", "Aggregate a sharded module's activations or gradients across the tensor-parallel group.")
      .on(loom::Scope::NonRoot)
      .param("mode", loom::ParamType::one_of({"fwd_pre", "fwd_post", "bwd_post"}), "where to aggregate")
      .param("op", loom::ParamType::one_of({"all_reduce", "all_gather", "reduce_scatter"}), "the collective")
      .check(check_sharded);
}
