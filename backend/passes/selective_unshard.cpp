#include "backend/passes/selective_unshard.h"

#include <algorithm>

#include "backend/passes/unshard.h"
#include "backend/sim/memory_walk.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

constexpr size_t kNone = static_cast<size_t>(-1);

// A parameter unshard(auto) may keep: where its forward release and backward gather are.
struct Candidate {
  int param = 0;
  size_t forward_release = kNone, backward_gather = kNone;
  int64_t buffer = 0;      // B: what staying gathered holds, the parameter's full storage
  double saved_per_byte = 0;  // T_c(B) / B
};

std::vector<Candidate> candidates(const ir::Program& p, const PassInputs& inputs) {
  std::vector<Candidate> found;
  std::vector<size_t> of_param(p.params.size(), kNone);
  for (size_t q = 0; q < p.params.size(); ++q)
    for (const UnshardRequest& r : inputs.unshard)
      if (r.automatic && ir::within(p.params[q].name, r.module)) {
        of_param[q] = found.size();
        found.push_back({static_cast<int>(q)});
        break;
      }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    bool forward_release = in.phase == ir::Phase::Forward && in.kind == OpKind::Release;
    bool backward_gather = in.phase == ir::Phase::Backward && in.kind == OpKind::AllGather;
    if (!forward_release && !backward_gather) continue;
    for (int q : in.params) {
      size_t c = of_param[static_cast<size_t>(q)];
      if (c == kNone) continue;
      if (forward_release && found[c].forward_release == kNone) found[c].forward_release = i;
      if (backward_gather && found[c].backward_gather == kNone) found[c].backward_gather = i;
    }
  }
  found.erase(std::remove_if(found.begin(), found.end(), [](const Candidate& c) {
                return c.forward_release == kNone || c.backward_gather == kNone || c.backward_gather < c.forward_release;
              }),
              found.end());
  return found;
}

// T_c(B)/B of each candidate: its own backward all-gather, priced alone.
void rank_by_saving(const ir::Program& p, const MemoryPlanning& m, std::vector<Candidate>& found) {
  for (Candidate& c : found) {
    Instr alone = p.instrs[c.backward_gather];
    alone.params = {c.param};
    alone.bytes = ir::param_bytes(p, c.param);
    c.buffer = alone.bytes;  // what staying gathered holds: the parameter's full storage
    double seconds = m.instruction_seconds ? m.instruction_seconds(p, alone) : 1.0;
    c.saved_per_byte = c.buffer > 0 ? seconds / static_cast<double>(c.buffer) : 0;
  }
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) { return a.saved_per_byte > b.saved_per_byte; });
}

}  // namespace

bool selective_unshard(ir::Program& p, const PassInputs& inputs) {
  const MemoryPlanning& m = inputs.memory;
  if (p.sharding.params <= 1 || m.limit <= 0) return false;
  std::vector<Candidate> found = candidates(p, inputs);
  if (found.empty()) return false;
  rank_by_saving(p, m, found);
  std::vector<int64_t> around = memory::memory_around_each(p, m.state_bytes, m.cost.get());
  std::vector<bool> kept(p.params.size(), false);
  bool any = false;
  for (const Candidate& c : found) {
    if (c.buffer <= 0) continue;
    // Kept, its buffer lives on after its forward release until its backward gather would have made it again.
    auto from = around.begin() + static_cast<long>(c.forward_release) + 1, to = around.begin() + static_cast<long>(c.backward_gather);
    if (from < to && *std::max_element(from, to) + c.buffer > m.limit) continue;
    for (auto it = from; it != to; ++it) *it += c.buffer;
    kept[static_cast<size_t>(c.param)] = any = true;
  }
  if (!any) return false;
  keep_gathered(p, kept);
  return true;
}

}  // namespace loom::passes
