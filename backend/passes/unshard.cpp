#include "backend/passes/unshard.h"

#include <algorithm>
#include <set>

namespace loom::passes {

bool unshard(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1 || inputs.unshard.empty()) return false;
  std::set<int> kept;
  for (size_t q = 0; q < p.params.size(); ++q)
    for (const std::string& module : inputs.unshard)
      if (ir::within(p.params[q].name, module)) kept.insert(static_cast<int>(q));
  if (kept.empty()) return false;
  auto is_kept = [&](int q) { return kept.count(q) > 0; };
  std::set<int> dropped_handles;
  std::vector<ir::Instr> out;
  for (ir::Instr in : p.instrs) {
    bool forward_release = in.phase == ir::Phase::Forward && in.kind == ir::OpKind::Release;
    bool backward_gather = in.phase == ir::Phase::Backward && in.kind == ir::OpKind::AllGather;
    if (forward_release || backward_gather) {
      int64_t before = static_cast<int64_t>(in.params.size());
      in.params.erase(std::remove_if(in.params.begin(), in.params.end(), is_kept), in.params.end());
      if (static_cast<int64_t>(in.params.size()) != before) in.bytes = in.bytes * static_cast<int64_t>(in.params.size()) / before;
      if (in.params.empty()) {
        if (backward_gather) dropped_handles.insert(in.handle);
        continue;
      }
    }
    if (in.kind == ir::OpKind::Wait && dropped_handles.count(in.handle)) continue;
    out.push_back(in);
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
