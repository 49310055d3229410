#include "verifier/rules/rules.h"

namespace loom::rules {
namespace {

// `path` is `ancestor` or inside it ("" is the whole model).
bool within(const std::string& path, const std::string& ancestor) {
  return ancestor.empty() || path == ancestor || path.rfind(ancestor + ".", 0) == 0;
}

std::string parameters_of(const Directive& shard) {
  const Value* p = shard.arg("params");
  if (!p) return "its parameters";
  return p->to_source();
}

}  // namespace

// unshard() keeps a module's parameters whole and resident on every rank (deepcompile.txt's
// selective unsharding); a tensor-sharded parameter is never whole on any rank, by design.
void unshard_conflicts_with_shard(const Schedule& s, const RuleOptions&) {
  for (const Directive& u : s.trace()) {
    if (u.primitive != "unshard") continue;
    for (const Directive& t : s.trace())
      if (t.primitive == "shard" && within(t.target, u.target))
        throw UserError(u.where,
                        "unshard on `" + (u.target.empty() ? std::string("sch") : u.target) +
                            "` keeps its parameters whole on every rank, but shard at " + t.where.to_string() + " splits " +
                            parameters_of(t) + " of `" + t.target + "` across the tensor-parallel ranks",
                        "the two cannot both hold: drop unshard() to keep the tensor shards, or drop shard() to replicate the module");
  }
}

}  // namespace loom::rules
