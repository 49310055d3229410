// test_corrupt_shard(param=, rank=): test-only. Rank `rank` adds 0, 0.01, ..., 0.06 (repeating) to its optimizer shard
// of one of this module's parameters before training (under data parallelism: its replica),
// as a corrupted shard would. `loom verify` must name this module and this directive.
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a parameter the module does not own directly; a rank outside the world.
void check_target(const PrimitiveCall& c) {
  check_owns_parameter(c, "param");
  int64_t rank = c.int_arg("rank");
  if (rank < 0 || rank >= c.schedule().world())
    c.fail_at(c.arg_range("rank"), "rank " + std::to_string(rank) + " is outside 0.." + std::to_string(c.schedule().world() - 1),
              "choose a rank of this run");
}
}  // namespace

LOOM_PRIMITIVE(test_corrupt_shard) {
  return loom::PrimitiveSpec("test_corrupt_shard", "Test only: one rank perturbs its shard of one parameter before training.")
      .on(loom::Scope::NonRoot)
      .param("param", loom::ParamType::string(), loom::Value::string("weight"), "the parameter, owned by this module")
      .param("rank", loom::ParamType::integer(), loom::Value::integer(0), "the rank whose shard is corrupted")
      .check(check_target)
      .test_only();
}
