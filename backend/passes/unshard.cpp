#include "backend/passes/unshard.h"

#include <algorithm>
#include <set>

namespace loom::passes {

void keep_gathered(ir::Program& p, const std::vector<bool>& kept) {
  auto is_kept = [&](int q) { return kept[static_cast<size_t>(q)]; };
  std::set<int> dropped_handles;
  std::vector<ir::Instr> out;
  out.reserve(p.instrs.size());
  for (ir::Instr& in : p.instrs) {
    bool forward_release = in.phase == ir::Phase::Forward && in.kind == ir::OpKind::Release;
    bool backward_gather = in.phase == ir::Phase::Backward && in.kind == ir::OpKind::AllGather;
    if (forward_release || backward_gather) {
      in.params.erase(std::remove_if(in.params.begin(), in.params.end(), is_kept), in.params.end());
      in.bytes = ir::total_param_bytes(p, in.params);  // a bucket's members differ in size: by bytes, not by count
      if (in.params.empty()) {
        if (backward_gather) dropped_handles.insert(in.handle);
        continue;
      }
    }
    if (in.kind == ir::OpKind::Wait && dropped_handles.count(in.handle)) continue;
    out.push_back(std::move(in));
  }
  p.instrs = std::move(out);
}

bool unshard(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1) return false;
  std::vector<bool> kept(p.params.size(), false);
  bool any = false;
  for (size_t q = 0; q < p.params.size(); ++q)
    for (const UnshardRequest& r : inputs.unshard)
      if (!r.automatic && ir::within(p.params[q].name, r.module)) kept[q] = any = true;
  if (!any) return false;
  keep_gathered(p, kept);
  return true;
}

}  // namespace loom::passes
