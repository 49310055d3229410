#include "backend/passes/offload_optimizer.h"

#include <algorithm>

#include "backend/passes/adaptive_offload.h"

namespace loom::passes {

bool offload_optimizer(ir::Program& p, const PassInputs& inputs) {
  if (!inputs.offload || (offload_is_adaptive(inputs) && p.sharding.optim > 1)) return false;
  auto step = std::find_if(p.instrs.begin(), p.instrs.end(), [](const ir::Instr& in) { return in.kind == ir::OpKind::OptimizerStep; });
  if (step == p.instrs.end()) return false;
  ir::Instr to_host, to_device;
  to_host.kind = ir::OpKind::Offload;
  to_device.kind = ir::OpKind::Reload;
  to_host.phase = to_device.phase = ir::Phase::Step;
  int64_t kept = 0;
  bool offloading = false;
  for (int q = 0; q < static_cast<int>(p.params.size()); ++q) {
    int64_t elements = ir::optimizer_slice_elements(p, q);
    offloading = offloading || kept + 8 * elements > inputs.offload_budget;
    if (!offloading) {
      kept += 8 * elements;
      continue;
    }
    to_host.params.push_back(q);
    to_host.bytes += 4 * elements;  // fp32 gradients to the host, fp32 values back
  }
  if (to_host.params.empty()) return false;
  to_device.params = to_host.params;
  to_device.bytes = to_host.bytes;
  size_t at = static_cast<size_t>(step - p.instrs.begin());
  p.instrs.insert(p.instrs.begin() + static_cast<long>(at) + 1, to_device);
  p.instrs.insert(p.instrs.begin() + static_cast<long>(at), to_host);
  return true;
}

}  // namespace loom::passes
