#include "backend/passes/proactive_prefetch.h"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "backend/sim/memory_walk.h"
#include "backend/sim/range_max.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// Whether every parameter of `in` lies in a module prefetch(budget=auto) names.
bool automatically_prefetched(const Instr& in, const std::vector<bool>& selected) {
  return !in.params.empty() && std::all_of(in.params.begin(), in.params.end(), [&](int q) { return selected[static_cast<size_t>(q)]; });
}

std::vector<bool> selected_params(const ir::Program& p, const PassInputs& inputs) {
  std::vector<bool> selected(p.params.size(), false);
  for (const PrefetchRequest& r : inputs.prefetch)
    if (r.budget == 0)
      for (size_t q = 0; q < p.params.size(); ++q)
        if (!selected[q] && ir::within(p.params[q].name, r.module)) selected[q] = true;
  return selected;
}

// A gather moved to `before` (an index into the program: it is issued just before that instruction).
struct Move {
  size_t before = 0;
  size_t gather = 0;
};

// The first position in the phase's `order` a gather at position k may land at for its own
// parameters: just below the last all-gather or release of any of them above it.
class GatherBounds {
 public:
  explicit GatherBounds(size_t params) : last_touch_(params, 0) {}
  size_t of(const Instr& gather) const {
    size_t bound = 0;
    for (int q : gather.params) bound = std::max(bound, last_touch_[static_cast<size_t>(q)]);
    return bound;
  }
  // Records the instruction at position k (after `of` has been asked of it).
  void passed(const Instr& in, size_t k) {
    if (in.kind == OpKind::AllGather || in.kind == OpKind::Release)
      for (int q : in.params) last_touch_[static_cast<size_t>(q)] = k + 1;
  }

 private:
  std::vector<size_t> last_touch_;  // one past each parameter's last all-gather or release
};

// One past the last position in [begin, end) whose value exceeds `room`; `begin` when none does.
size_t below_last_above(memory::RangeMax& values, size_t begin, size_t end, int64_t room) {
  size_t full = values.last_above(begin, end, room);
  return full == end ? begin : full + 1;
}

// Plans the moves of one phase's gathers: `around` is the memory around each instruction
// (memory_walk), raised by each move over the instructions its buffer now lives across.
void plan_phase(const ir::Program& p, ir::Phase phase, const std::vector<bool>& selected, const MemoryPlanning& m,
                std::vector<int64_t>& around, std::vector<Move>& moves) {
  std::vector<size_t> order;  // the phase's instructions, in program order
  std::vector<int64_t> phase_around;
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == phase) {
      order.push_back(i);
      phase_around.push_back(around[i]);
    }
  memory::RangeMax in_use(phase_around);
  memory::RangeMax ahead(std::vector<int64_t>(order.size(), 0));  // bytes gathered ahead of their use, around each instruction
  int64_t group_limit = m.prefetch_group_bytes > 0 ? m.prefetch_group_bytes : std::numeric_limits<int64_t>::max();
  GatherBounds bounds(p.params.size());
  // No gather goes above an earlier one (the collective stream is first in, first out): one
  // that stays bounds the next from below; one that moved lets the next land beside it, after it.
  size_t floor = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const Instr& g = p.instrs[order[k]];
    size_t own_bound = bounds.of(g);
    bounds.passed(g, k);
    if (g.kind != OpKind::AllGather) continue;
    if (!automatically_prefetched(g, selected)) {
      floor = k + 1;
      continue;
    }
    // Up to just below the nearest instruction above where the buffer would not fit.
    int64_t buffer = memory::gather_launch_bytes(p, g);
    size_t lowest = std::max(floor, own_bound);
    size_t to = std::max(below_last_above(in_use, lowest, k, m.limit - buffer), below_last_above(ahead, lowest, k, group_limit - buffer));
    if (to == k) {
      floor = k + 1;
      continue;
    }
    floor = to;
    in_use.add(to, k, buffer);
    ahead.add(to, k, buffer);
    moves.push_back({order[to], order[k]});
  }
  std::vector<int64_t> raised = in_use.values();
  for (size_t j = 0; j < order.size(); ++j) around[order[j]] = raised[j];
}

// Whether fusing a gather of `bytes` into one of `fused` bytes pays (deepcompile.txt §4.2):
// T_c(V1) + T_c(V2) > alpha * T_c(V1 + V2). Priced as instructions of the program, on the gather's group.
Instr fused_with(const Instr& fused, const Instr& next) {
  Instr both = fused;
  both.bytes += next.bytes;
  both.params.insert(both.params.end(), next.params.begin(), next.params.end());
  return both;
}
bool fusion_pays(const ir::Program& p, const Instr& fused, const Instr& next, const MemoryPlanning& m) {
  if (!m.instruction_seconds || fused.group.role != next.group.role || fused.runs_in != next.runs_in) return false;
  Instr both = fused_with(fused, next);
  return m.instruction_seconds(p, fused) + m.instruction_seconds(p, next) > m.fusion_alpha * m.instruction_seconds(p, both);
}

// What the fused gather `both`'s members hold as separate gathers (what `around` counts).
int64_t separate_outputs(const ir::Program& p, const Instr& both) {
  int64_t separate = 0;
  for (int q : both.params) {
    Instr alone = both;
    alone.params = {q};
    separate += memory::gather_launch_bytes(p, alone);
  }
  return separate;
}

// The bytes the fused gather `both` holds from its launch to its wait beyond its members'
// separate outputs: the shards' concatenated copy it sends.
int64_t fused_extra_held(const ir::Program& p, const Instr& both) {
  return memory::gather_launch_bytes(p, both) - separate_outputs(p, both);
}

// The last instruction of the span a gather landing before `from` holds memory over: its wait.
size_t wait_index(const ir::Program& p, const Instr& gather, size_t from) {
  return std::min(ir::find_instruction(p, OpKind::Wait, gather.handle, from), p.instrs.size() - 1);
}

// Whether the fused gather `both`, landing before instruction `from`, stays within the limit:
// beside what `around` holds (the members' outputs, and `already` of the fused gather's own
// extra), its concatenated send from its landing to its wait, and at its wait every member's
// full storage beside the output (memory::gather_peak_bytes).
bool fusion_fits(const ir::Program& p, const Instr& both, size_t from, const std::vector<int64_t>& around,
                 int64_t already, const MemoryPlanning& m) {
  int64_t held = fused_extra_held(p, both) - already;
  int64_t at_wait = memory::gather_peak_bytes(p, both) - separate_outputs(p, both) - already;
  size_t end = wait_index(p, both, from);
  for (size_t i = from; i <= end; ++i)
    if (around[i] + (i == end ? at_wait : held) > m.limit) return false;
  return true;
}

// Raises `around` by `bytes` from instruction `from` to the wait of `gather`.
void hold(const ir::Program& p, const Instr& gather, size_t from, int64_t bytes, std::vector<int64_t>& around) {
  for (size_t i = from, end = wait_index(p, gather, from); i <= end; ++i) around[i] += bytes;
}

// Rebuilds the program with the gathers at their new places, fusing those that land at one
// place where fusing pays and fits; a fused gather's waits but the first go (they wait for the
// fused one).
void apply(ir::Program& p, std::vector<Move>& moves, std::vector<int64_t> around, const MemoryPlanning& m) {
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.before < b.before; });
  std::vector<bool> moved(p.instrs.size(), false);
  for (const Move& mv : moves) moved[mv.gather] = true;
  std::unordered_map<int, int> fused_into;  // a fused gather's handle -> the handle of the one it joined
  std::vector<Instr> out;
  out.reserve(p.instrs.size());
  auto next = moves.begin();
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    size_t first_here = out.size();
    int64_t held = 0;  // what the last fused gather holds beyond its members' outputs, already in `around`
    for (; next != moves.end() && next->before == i; ++next) {
      Instr& g = p.instrs[next->gather];
      if (out.size() > first_here && fusion_pays(p, out.back(), g, m) &&
          fusion_fits(p, fused_with(out.back(), g), i, around, held, m)) {
        fused_into[g.handle] = out.back().handle;
        out.back() = fused_with(out.back(), g);
        int64_t now = fused_extra_held(p, out.back());
        hold(p, out.back(), i, now - held, around);
        held = now;
      } else {
        out.push_back(std::move(g));
        held = 0;
      }
    }
    if (!moved[i]) out.push_back(std::move(p.instrs[i]));
  }
  if (!fused_into.empty()) {
    std::set<int> waited;
    std::vector<Instr> kept;
    kept.reserve(out.size());
    for (Instr& in : out) {
      if (in.kind == OpKind::Wait) {
        if (auto f = fused_into.find(in.handle); f != fused_into.end()) in.handle = f->second;
        if (!waited.insert(in.handle).second) continue;
      }
      kept.push_back(std::move(in));
    }
    out = std::move(kept);
  }
  p.instrs = std::move(out);
}

}  // namespace

bool proactive_prefetch(ir::Program& p, const PassInputs& inputs) {
  const MemoryPlanning& m = inputs.memory;
  if (p.sharding.params <= 1 || m.limit <= 0) return false;
  std::vector<bool> selected = selected_params(p, inputs);
  if (std::none_of(selected.begin(), selected.end(), [](bool s) { return s; })) return false;
  std::vector<int64_t> around = memory::memory_around_each(p, m.state_bytes, m.cost.get());
  std::vector<Move> moves;
  plan_phase(p, ir::Phase::Forward, selected, m, around, moves);
  plan_phase(p, ir::Phase::Backward, selected, m, around, moves);
  if (moves.empty()) return false;
  apply(p, moves, around, m);
  return true;
}

}  // namespace loom::passes
