// shard_states(params=, grads=, optim=): the Lins sharding factors s_p, s_g,
// s_os (lins.txt §IV-B). Each factor is split into an intra-node part s^0 and an
// inter-node part s^1 by Eq. 7 (fill a node before crossing nodes), and checked
// against the dependency rule and the divisibility filters (Eq. 3-6).
#include "primitives/registry.h"

namespace {
using namespace loom;

const char* kDependencyRule =
    "lins.txt §IV-B dependency rule: R >= s_dp^0 >= s_os^0 >= s_g^0 >= s_p^0 and N >= s_dp^1 >= s_os^1 >= s_g^1 >= s_p^1, "
    "so 1 <= s_p <= s_g <= s_os <= dp";

struct Factors {
  int64_t p, g, os;
};
Factors factors(const PrimitiveCall& c) { return {c.int_arg("params"), c.int_arg("grads"), c.int_arg("optim")}; }

// Errors: a factor below 1, above dp, not dividing dp, or out of the rule's order.
void check_dependency_rule(const PrimitiveCall& c) {
  int dp = c.schedule().dp();
  Factors f = factors(c);
  for (const char* name : {"params", "grads", "optim"}) {
    int64_t s = c.int_arg(name);
    if (s < 1 || s > dp)
      c.fail_at(c.arg_range(name), std::string(name) + " = " + std::to_string(s) + " is outside 1.." + std::to_string(dp) + " (dp)",
                kDependencyRule);
    if (dp % s != 0)
      c.fail_at(c.arg_range(name), std::string(name) + " = " + std::to_string(s) + " does not divide dp = " + std::to_string(dp),
                "lins.txt Eq. 5-6: every sharding factor divides the data-parallel degree");
  }
  if (!(f.p <= f.g && f.g <= f.os))
    c.fail("sharding factors params=" + std::to_string(f.p) + ", grads=" + std::to_string(f.g) + ", optim=" +
               std::to_string(f.os) + " break the dependency rule",
           kDependencyRule);
  if (f.g != f.p && f.g != f.os)
    c.fail_at(c.arg_range("grads"),
              "grads = " + std::to_string(f.g) + " must equal params (" + std::to_string(f.p) + ") or optim (" +
                  std::to_string(f.os) + ")",
              "lins.txt §IV-C.3 restricts s_g to {s_p, s_os}");
}

// Errors: a factor that cannot be laid out on the node mesh (lins.txt Eq. 5-7).
void check_node_split(const PrimitiveCall& c) {
  const Schedule& s = c.schedule();
  int per_node = s.local_world() / (s.mesh_state().tp * s.mesh_state().pp);
  if (per_node < 1) per_node = 1;
  int dp = s.dp();
  int nodes = std::max(1, dp / per_node);
  for (const char* name : {"params", "grads", "optim"}) {
    int64_t f = c.int_arg(name);
    if (f <= per_node) {
      if (per_node % f != 0)
        c.fail_at(c.arg_range(name),
                  std::string(name) + " = " + std::to_string(f) + " does not divide the " + std::to_string(per_node) +
                      " data-parallel ranks of a node",
                  "lins.txt Eq. 5: an intra-node factor divides s_dp^0; pick a divisor of " + std::to_string(per_node));
    } else if (f % per_node != 0 || nodes % (f / per_node) != 0) {
      c.fail_at(c.arg_range(name),
                std::string(name) + " = " + std::to_string(f) + " spans nodes but is not a whole number of nodes (" +
                    std::to_string(per_node) + " ranks each) dividing the " + std::to_string(nodes) + " nodes",
                "lins.txt Eq. 6-7: a factor larger than a node uses whole nodes");
    }
  }
}

// Errors: factors set twice.
void check_once(const PrimitiveCall& c) {
  if (c.schedule().sharding().where.known())
    c.fail("sharding factors are already set at " + c.schedule().sharding().where.to_string(),
           "call shard_states (or fsdp/zero) once");
}

void apply_factors(const PrimitiveCall& c) {
  Factors f = factors(c);
  c.schedule().set_sharding({static_cast<int>(f.p), static_cast<int>(f.g), static_cast<int>(f.os), c.where()});
  c.record();
}
}  // namespace

LOOM_PRIMITIVE(shard_states) {
  return loom::PrimitiveSpec("shard_states", "Shard parameters, gradients and optimizer states over groups of s_p, s_g, s_os ranks.")
      .on(loom::Scope::Root)
      .param("params", loom::ParamType::integer(), loom::Value::integer(1), "s_p: ranks sharing one copy of the parameters")
      .param("grads", loom::ParamType::integer(), loom::Value::integer(1), "s_g: ranks sharing one copy of the gradients")
      .param("optim", loom::ParamType::integer(), loom::Value::integer(1), "s_os: ranks sharing one copy of the optimizer states")
      .check(check_once)
      .check(check_dependency_rule)
      .check(check_node_split)
      .effect(apply_factors);
}
