// prefetch(budget=auto|bytes): issue the all-gathers of the following modules'
// parameters while this one computes, as many as fit in the budget
// (deepcompile.txt §4.2; auto = as early as --memory-limit allows, one module ahead without one).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a budget that is not positive. Warnings: parameters not sharded.
void check_budget(const PrimitiveCall& c) {
  const Value& b = c.arg("budget");
  if (b.is(ValueKind::Bytes) && b.as_int() <= 0)
    c.fail_at(c.arg_range("budget"), "budget must be a positive size, got " + b.to_source(), "e.g. budget=512MiB, or budget=auto");
  if (c.schedule().dp() == 1)
    c.warn("at dp = 1 (world " + std::to_string(c.schedule().world()) + ") nothing is sharded, so there is nothing to gather ahead",
           kAtWorldOne);
  else if (c.schedule().sharding().params == 1)
    c.warn("parameters are not sharded (s_p = 1), so there is nothing to gather ahead",
           "shard parameters first, e.g. sch.shard_states(params=dp, grads=dp, optim=dp)");
}
}  // namespace

LOOM_PRIMITIVE(prefetch) {
  return loom::PrimitiveSpec("prefetch", "Gather the next modules' sharded parameters while this one computes.")
      .on(loom::Scope::Module)
      .param("budget", loom::ParamType::bytes_or_auto(), loom::Value::auto_(), "bytes of parameters gathered ahead; auto = as early as --memory-limit allows (one module without a limit)")
      .check(check_budget);
}
