// The C++ fluent API on a reference model: the calls of examples/gpt_tp.sched's first block.
// The README quotes this file; the test suite builds and runs it.
#include <iostream>

#include "lang/schedule.h"
#include "lang/trace.h"
#include "models/zoo.h"

int main() {
  loom::Schedule sch(loom::module_tree_of("gpt2"), {/*world=*/4});
  sch.mesh(2, 2);
  sch["h.0.attn.c_attn"].shard({"weight", "bias"}, 0).sync("bwd_post", "all_reduce");
  sch["h.0.attn.c_proj"].shard({"weight"}, 1).sync("fwd_post", "all_reduce");
  std::cout << loom::trace_to_sched(sch);
  return sch.trace().size() == 5 ? 0 : 1;
}
