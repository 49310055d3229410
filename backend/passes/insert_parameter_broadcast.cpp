#include "backend/passes/insert_parameter_broadcast.h"

namespace loom::passes {

bool insert_parameter_broadcast(ir::Program& p, const PassInputs&) {
  const ir::Sharding& s = p.sharding;
  if (s.optim <= s.params) return false;
  std::vector<ir::Instr> out;
  out.reserve(p.instrs.size() + 2 * p.params.size());
  for (auto& in : p.instrs) {
    bool step = in.kind == ir::OpKind::OptimizerStep;
    out.push_back(std::move(in));
    if (!step) continue;
    std::vector<int> handles;
    for (size_t q = 0; q < p.params.size(); ++q) {
      int param = static_cast<int>(q);
      ir::Instr b = ir::collective(p, ir::OpKind::Broadcast, ir::Phase::Step, param, {ir::Role::Optim, s.optim / s.params},
                                   ir::param_bytes(p, param) / s.params);
      handles.push_back(b.handle);
      out.push_back(std::move(b));
    }
    for (int h : handles) out.push_back(ir::wait_for(h, ir::Phase::Step));
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
