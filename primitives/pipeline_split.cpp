// pipeline_split(): a pipeline-stage boundary after this module. The module
// must be one of a list of siblings (a ModuleList entry), as in slapo.txt §3.3.2.
#include "primitives/registry.h"

namespace {
using namespace loom;

bool is_index(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// Errors: a module that is not an entry of a list of siblings.
void check_in_list(const PrimitiveCall& c) {
  const ModuleTree& t = c.schedule().tree();
  const ModuleNode& parent = t.node(c.node().parent);
  if (!is_index(c.node().name))
    c.fail("the module is not an entry of a list of sibling layers (its parent `" +
               (parent.path.empty() ? std::string("sch") : parent.path) + "` is a " + parent.type + ")",
           "split between entries of a ModuleList, e.g. sch[\"h.5\"].pipeline_split()");
}

// Errors: no pipeline parallelism declared.
void check_pipelined(const PrimitiveCall& c) {
  if (c.schedule().mesh_state().pp < 2)
    c.fail("pp = 1, so there are no pipeline stages to split into", "declare stages first with sch.mesh(pp=N)");
}
}  // namespace

LOOM_PRIMITIVE(pipeline_split) {
  return loom::PrimitiveSpec("pipeline_split", "Mark a pipeline-stage boundary after this module.")
      .on(loom::Scope::NonRoot)
      .check(check_in_list)
      .check(check_pipelined);
}
