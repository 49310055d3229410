#include "backend/passes/compress.h"

namespace loom::passes {

bool compress(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1 || inputs.compress.empty()) return false;
  bool changed = false;
  for (ir::Instr& in : p.instrs) {
    if (in.kind != ir::OpKind::ReduceScatter || in.phase != ir::Phase::Backward || in.params.size() != 1) continue;
    const ir::TracedParam& param = p.params[in.params[0]];
    for (const CompressedModule& c : inputs.compress) {
      if (param.name.rfind(c.module + ".", 0) != 0) continue;
      in.kind = ir::OpKind::Compress;
      in.bytes = static_cast<int64_t>(static_cast<double>(in.bytes) / c.ratio) + (param.numel + 7) / 8;
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace loom::passes
