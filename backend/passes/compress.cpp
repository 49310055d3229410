#include "backend/passes/compress.h"

namespace loom::passes {
namespace {

// The compressed module covering `param`, or null.
const CompressRequest* compressed(const std::string& param, const PassInputs& inputs) {
  for (const CompressRequest& c : inputs.compress)
    if (ir::within(param, c.module)) return &c;
  return nullptr;
}

// A blocking collective of TAGC's on the parameter `q`: the instruction and its wait.
void blocking(ir::Program& p, std::vector<ir::Instr>& out, ir::OpKind kind, int q, ir::GroupRef group, int64_t bytes) {
  ir::Instr in = ir::collective(p, kind, ir::Phase::Backward, q, std::move(group), bytes);
  out.push_back(in);
  out.push_back(ir::wait_for(in.handle, ir::Phase::Backward));
}

}  // namespace

bool compress(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1 || inputs.compress.empty()) return false;
  const ir::Sharding& s = p.sharding;
  std::vector<ir::Instr> out;
  int bound_after = -1;  // the handle of a compressed reduce-scatter: its bound follows its wait
  int bound_param = -1;
  bool changed = false;
  for (const ir::Instr& original : p.instrs) {
    ir::Instr in = original;
    const CompressRequest* c = nullptr;
    if (in.kind == ir::OpKind::ReduceScatter && in.phase == ir::Phase::Backward && in.params.size() == 1)
      c = compressed(p.params[in.params[0]].name, inputs);
    if (c) {
      // tagc.txt Algorithm 1: the index of kept entries (1 bit each) OR-reduced, then the sketch
      // (ratio times smaller than the gradient) reduce-scattered to the shard owners.
      int q = in.params[0];
      int64_t index_bytes = (p.params[q].numel + 7) / 8;
      blocking(p, out, ir::OpKind::CompressIndex, q, in.group, index_bytes);
      in.kind = ir::OpKind::Compress;
      in.bytes = static_cast<int64_t>(static_cast<double>(in.bytes) / c->ratio);
      bound_after = in.handle;
      bound_param = q;
      changed = true;
    }
    out.push_back(in);
    if (in.kind == ir::OpKind::Wait && in.handle == bound_after) {
      // After peeling, the ranks agree on the bound: over the parameter group, then the replicas.
      blocking(p, out, ir::OpKind::CompressBound, bound_param, {ir::Role::Params, s.params}, 16);
      if (s.dp / s.params > 1) blocking(p, out, ir::OpKind::CompressBound, bound_param, {ir::Role::Replicas, s.dp / s.params}, 16);
      bound_after = -1;
    }
  }
  p.instrs = std::move(out);
  return changed;
}

}  // namespace loom::passes
