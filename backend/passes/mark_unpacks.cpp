#include "backend/passes/mark_unpacks.h"

#include <algorithm>
#include <vector>

namespace loom::passes {

using ir::Instr;
using ir::OpKind;

namespace {

// The bytes the wait of `collective` unpacks; 0 for a wait that copies nothing.
int64_t unpacked_at_wait(const ir::Program& p, const Instr& collective) {
  if (collective.kind == OpKind::AllGather)
    return ir::gathered_in_place(p, collective) ? 0 : ir::total_param_bytes(p, collective.params);
  // Replicated states (s_os = 1): the gradient reducer's buckets, averaged into each .grad.
  bool data_parallel = collective.kind == OpKind::AllReduce && collective.phase == ir::Phase::Backward &&
                       collective.group.role == ir::Role::Dp && p.sharding.optim == 1;
  return data_parallel ? ir::total_param_bytes(p, collective.params) : 0;
}

}  // namespace

bool mark_unpacks(ir::Program& p, const PassInputs&) {
  int handles = p.next_handle;
  for (const Instr& in : p.instrs) handles = std::max(handles, in.handle + 1);
  std::vector<const Instr*> issued(static_cast<size_t>(handles), nullptr);  // by handle
  for (const Instr& in : p.instrs)
    if (in.kind != OpKind::Wait && in.handle >= 0) issued[static_cast<size_t>(in.handle)] = &in;
  bool changed = false;
  for (Instr& in : p.instrs) {
    if (in.kind != OpKind::Wait || in.handle < 0 || !issued[static_cast<size_t>(in.handle)]) continue;
    int64_t bytes = unpacked_at_wait(p, *issued[static_cast<size_t>(in.handle)]);
    changed |= bytes != in.unpack_bytes;
    in.unpack_bytes = bytes;
  }
  return changed;
}

}  // namespace loom::passes
