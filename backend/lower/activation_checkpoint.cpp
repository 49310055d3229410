// Activation checkpointing: checkpoint() recomputes a module's forward in backward; the step
// program says where, with a `recompute` instruction.
#include <algorithm>
#include <set>

#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void checkpoint(const Directive& d, const Schedule& schedule, RuntimePlan& plan) {
  const ModuleTree& tree = schedule.tree();
  // The step program recomputes the ops that own parameters; a module without any has none.
  if (tree.parameter_count(tree.find(d.target)) == 0)
    unsupported(d, "`" + d.target + "` holds no parameters, so the step has no op of it to recompute",
                "checkpoint the block around it instead");
  if (std::find(plan.checkpoint.begin(), plan.checkpoint.end(), d.target) == plan.checkpoint.end())
    plan.checkpoint.push_back(d.target);  // twice is once (the primitive warned)
}

void insert_recomputation(const std::vector<std::string>& checkpointed, ir::Program& p) {
  std::set<std::string> requested(checkpointed.begin(), checkpointed.end());
  std::vector<std::string> outermost;
  for (const std::string& m : requested) {
    bool nested = false;
    for (const std::string& other : requested) nested = nested || (other != m && ir::within(m, other));
    if (!nested) outermost.push_back(m);
  }
  for (const std::string& m : outermost) {
    ir::Instr recompute;
    recompute.kind = ir::OpKind::Recompute;
    recompute.phase = ir::Phase::Backward;
    recompute.module = m;
    std::set<int> params;
    size_t first_backward = p.instrs.size();
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      ir::Instr& in = p.instrs[i];
      if (in.kind != ir::OpKind::Compute || !ir::within(in.module, m)) continue;
      if (in.phase == ir::Phase::Forward) {
        params.insert(in.params.begin(), in.params.end());
        recompute.flops += in.flops;
        recompute.activation_bytes += in.activation_bytes;
        in.activation_bytes = 0;  // dropped in forward: the recomputation saves them again
      } else if (in.phase == ir::Phase::Backward && first_backward == p.instrs.size()) {
        first_backward = i;
      }
    }
    if (first_backward == p.instrs.size()) continue;  // no op of the module runs (no parameters)
    recompute.params.assign(params.begin(), params.end());
    p.instrs.insert(p.instrs.begin() + static_cast<long>(first_backward), recompute);
  }
}

}  // namespace loom::lowering
