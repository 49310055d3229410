#include "backend/passes/mark_unpacks.h"

#include <algorithm>
#include <vector>

#include "backend/sim/memory_walk.h"

namespace loom::passes {

using ir::Instr;
using ir::OpKind;

namespace {

// Sharded states: an all-reduce of gradient shards over their replicas lands at its wait. A
// bucket's sum is copied back into its members' 1/s_p shards, and where s_os > s_p each keeps a
// copy of its optimizer slice (1/s_os), so the rest of the shard can go.
int64_t landed_at_wait(const ir::Program& p, const Instr& sum) {
  const ir::Sharding& s = p.sharding;
  int64_t shards = 0;
  for (int q : sum.params) shards += memory::padded_bytes(p, q) / s.params;
  return (sum.params.size() > 1 ? shards : 0) + (s.optim > s.params ? shards / (s.optim / s.params) : 0);
}

// The bytes the wait of `collective` unpacks; 0 for a wait that copies nothing.
int64_t unpacked_at_wait(const ir::Program& p, const Instr& collective) {
  if (collective.kind == OpKind::AllGather)
    return ir::gathered_in_place(p, collective) ? 0 : ir::total_param_bytes(p, collective.params);
  if (!ir::sums_over_replicas(collective)) return 0;
  // Replicated states (s_os = 1): the gradient reducer's buckets, averaged into each .grad.
  return p.sharding.optim == 1 ? ir::total_param_bytes(p, collective.params) : landed_at_wait(p, collective);
}

}  // namespace

bool mark_unpacks(ir::Program& p, const PassInputs&) {
  std::vector<const Instr*> issued(static_cast<size_t>(ir::handle_count(p)), nullptr);  // by handle
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
