#include "backend/passes/selective_unshard.h"

#include <algorithm>
#include <limits>

#include "backend/passes/unshard.h"
#include "backend/sim/memory_walk.h"
#include "backend/sim/range_max.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

constexpr size_t kNone = static_cast<size_t>(-1);
// What this pass reads as the memory around a step instruction: far below any limit, so no
// span's maximum is one (the step's instructions are outside the body a kept buffer lives in).
constexpr int64_t kNeverHeld = std::numeric_limits<int64_t>::min() / 4;

// A parameter unshard(auto) may keep: where its first forward gather, forward release, backward
// gather and last backward release are.
struct Candidate {
  int param = 0;
  size_t forward_gather = kNone, forward_release = kNone, backward_gather = kNone, backward_release = kNone;
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
    bool forward = in.phase == ir::Phase::Forward, backward = in.phase == ir::Phase::Backward;
    bool gather = in.kind == OpKind::AllGather, release = in.kind == OpKind::Release;
    if (!(forward || backward) || !(gather || release)) continue;
    for (int q : in.params) {
      size_t c = of_param[static_cast<size_t>(q)];
      if (c == kNone) continue;
      if (forward && gather && found[c].forward_gather == kNone) found[c].forward_gather = i;
      if (forward && release && found[c].forward_release == kNone) found[c].forward_release = i;
      if (backward && gather && found[c].backward_gather == kNone) found[c].backward_gather = i;
      if (backward && release) found[c].backward_release = i;
    }
  }
  found.erase(std::remove_if(found.begin(), found.end(), [](const Candidate& c) {
                return c.forward_gather == kNone || c.forward_release == kNone || c.backward_gather == kNone ||
                       c.backward_release == kNone || c.backward_gather < c.forward_release;
              }),
              found.end());
  return found;
}

// An index range [begin, end) of the program's instructions.
struct Span {
  size_t begin = 0, end = 0;
};

// Where keeping c gathered holds its buffer beyond what the program holds already: from its
// forward release to its backward gather and, kept `across` micro-batches, also before its
// forward gather and after its backward release, in the body's every run (so the first
// micro-batch's start and the last's end are counted as if they held it, a bound from above).
// The spans do not overlap: a gather comes before its release in each phase.
std::vector<Span> held_longer(size_t instructions, const Candidate& c, bool across) {
  std::vector<Span> spans = {{c.forward_release + 1, c.backward_gather}};
  if (across) {
    spans.push_back({0, c.forward_gather});
    spans.push_back({c.backward_release + 1, instructions});
  }
  return spans;
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
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == ir::Phase::Step) around[i] = kNeverHeld;
  memory::RangeMax in_use(around);
  std::vector<bool> kept(p.params.size(), false), across(p.params.size(), false);
  bool any = false;
  auto fits = [&](const std::vector<Span>& longer, int64_t buffer) {
    return std::all_of(longer.begin(), longer.end(), [&](const Span& s) { return in_use.max(s.begin, s.end) + buffer <= m.limit; });
  };
  for (const Candidate& c : found) {
    if (c.buffer <= 0) continue;
    // Across the micro-batches where that fits (it saves the later forward gathers too), else within each.
    std::vector<Span> longer = held_longer(p.instrs.size(), c, p.micro_batches > 1);
    bool whole_step = p.micro_batches > 1 && fits(longer, c.buffer);
    if (!whole_step) longer = held_longer(p.instrs.size(), c, false);
    if (!fits(longer, c.buffer)) continue;
    for (const Span& s : longer) in_use.add(s.begin, s.end, c.buffer);
    kept[static_cast<size_t>(c.param)] = any = true;
    across[static_cast<size_t>(c.param)] = whole_step;
  }
  if (!any) return false;
  keep_gathered(p, kept, across);
  return true;
}

}  // namespace loom::passes
