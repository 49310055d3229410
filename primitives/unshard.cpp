// unshard(keep=auto|true): keep this module's gathered parameters resident
// instead of releasing them after use (deepcompile.txt selective unsharding);
// auto lets the memory-aware pass decide.
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: keep=false (meaningless). Warnings: parameters not sharded.
void check_keep(const PrimitiveCall& c) {
  const Value& k = c.arg("keep");
  if (k.is(ValueKind::Bool) && !k.as_bool())
    c.fail_at(c.arg_range("keep"), "unshard(false) asks for nothing", "remove the call: sharded parameters are released by default");
  if (c.schedule().dp() == 1)
    c.warn("at dp = 1 (world " + std::to_string(c.schedule().world()) + ") nothing is sharded, so parameters are always resident",
           kAtWorldOne);
  else if (c.schedule().sharding().params == 1)
    c.warn("parameters are not sharded (s_p = 1), so they are always resident", "shard parameters first with shard_states(...)");
}
}  // namespace

LOOM_PRIMITIVE(unshard) {
  return loom::PrimitiveSpec("unshard", "Keep the module's gathered parameters resident between uses.")
      .on(loom::Scope::Module)
      .param("keep", loom::ParamType::bool_or_auto(), loom::Value::auto_(), "true: always; auto: when memory allows")
      .check(check_keep);
}
