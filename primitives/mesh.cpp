// mesh(tp=, pp=): the schedule's tensor- and pipeline-parallel degrees. Data
// parallelism takes the rest: dp = world / (tp * pp).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a degree below 1; tp * pp not dividing world.
void check_degrees(const PrimitiveCall& c) {
  for (const char* name : {"tp", "pp"})
    if (c.int_arg(name) < 1)
      c.fail_at(c.arg_range(name), std::string(name) + " must be at least 1, got " + std::to_string(c.int_arg(name)),
                "a degree of 1 means no parallelism of that kind");
  int64_t tp = c.int_arg("tp"), pp = c.int_arg("pp"), world = c.schedule().world();
  if (world % (tp * pp) != 0)
    c.fail("tp * pp = " + std::to_string(tp * pp) + " does not divide world = " + std::to_string(world),
           "choose degrees whose product divides the number of ranks (--world)");
}

// Errors: mesh set twice; mesh after dp was read or after sharding was decided with the old degrees.
void check_first(const PrimitiveCall& c) {
  const Schedule& s = c.schedule();
  if (s.mesh_state().where.known())
    c.fail("the mesh is already set at " + s.mesh_state().where.to_string(), "call sch.mesh(...) once");
  if (s.dp_first_read())
    c.fail("dp was already read at " + s.dp_first_read()->to_string() + " with tp = pp = 1",
           "call sch.mesh(...) before the first use of dp");
  for (auto& d : s.trace())
    if (d.primitive == "shard" || d.primitive == "shard_states")
      c.fail(d.primitive + " at " + d.where.to_string() + " was decided before the mesh",
             "call sch.mesh(...) first in the schedule");
}

void apply_mesh(const PrimitiveCall& c) {
  c.schedule().set_mesh(Mesh{static_cast<int>(c.int_arg("tp")), static_cast<int>(c.int_arg("pp")), c.where()});
  c.record();
}
}  // namespace

LOOM_PRIMITIVE(mesh) {
  return loom::PrimitiveSpec("mesh", "Set the tensor- and pipeline-parallel degrees; data parallelism takes the rest of world.")
      .on(loom::Scope::Root)
      .param("tp", loom::ParamType::integer(), loom::Value::integer(1), "tensor-parallel degree")
      .param("pp", loom::ParamType::integer(), loom::Value::integer(1), "pipeline-parallel degree (number of stages)")
      .check(check_degrees)
      .check(check_first)
      .effect(apply_mesh);
}
