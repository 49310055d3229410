#include "backend/passes/insert_parameter_broadcast.h"

namespace loom::passes {

bool insert_parameter_broadcast(ir::Program& p, const PassInputs&) {
  const ir::Sharding& s = p.sharding;
  if (s.optim <= s.params) return false;
  std::vector<ir::Instr> out;
  for (auto& in : p.instrs) {
    out.push_back(in);
    if (in.kind != ir::OpKind::OptimizerStep) continue;
    std::vector<int> handles;
    for (size_t q = 0; q < p.params.size(); ++q) {
      ir::Instr b;
      b.kind = ir::OpKind::Broadcast;
      b.phase = ir::Phase::Step;
      b.params = {static_cast<int>(q)};
      b.group = {"optim", s.optim / s.params};
      b.bytes = p.params[q].numel * p.params[q].element_bytes / s.params;
      b.handle = p.new_handle();
      handles.push_back(b.handle);
      out.push_back(b);
    }
    for (int h : handles) {
      ir::Instr w;
      w.kind = ir::OpKind::Wait;
      w.phase = ir::Phase::Step;
      w.handle = h;
      out.push_back(w);
    }
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
