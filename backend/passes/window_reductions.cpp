#include "backend/passes/window_reductions.h"

#include <algorithm>
#include <deque>
#include <set>

namespace loom::passes {

using ir::Instr;
using ir::OpKind;

namespace {

// A backward reduction whose completion can wait: a reduce-scatter, or TAGC's compress.
bool launches_reduction(const Instr& in) {
  return in.phase == ir::Phase::Backward && (in.kind == OpKind::ReduceScatter || in.kind == OpKind::Compress);
}

// Whether `in` completes the reduction `launch`: its wait, or a collective (or select & drop)
// of the same gradients that runs once it is complete, or the wait of one of those.
bool completes(const Instr& in, const Instr& launch, const std::set<int>& chain_handles) {
  if (in.phase != ir::Phase::Backward) return false;
  if (in.kind == OpKind::Wait) return in.handle == launch.handle || chain_handles.count(in.handle);
  bool follows = in.kind == OpKind::AllReduce || in.kind == OpKind::SelectDrop || in.kind == OpKind::CompressBound;
  return follows && in.params == launch.params;
}

}  // namespace

bool window_reductions(ir::Program& p, const PassInputs& inputs) {
  if (inputs.reductions_in_flight < 1) return false;
  std::vector<Instr> out;
  std::deque<std::vector<Instr>> pending;  // completions of reductions in flight, oldest first
  std::set<int> pending_handles;           // the handles those completions produce
  auto complete_oldest = [&] {
    for (const Instr& in : pending.front()) {
      out.push_back(in);
      if (in.kind != OpKind::Wait) pending_handles.erase(in.handle);
    }
    pending.pop_front();
  };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    // What the step's tail reads, or a wait on something still pending, needs the pending completed.
    bool needs = in.phase == ir::Phase::Step || (in.kind == OpKind::Wait && pending_handles.count(in.handle));
    while (needs && !pending.empty()) complete_oldest();
    out.push_back(in);
    if (!launches_reduction(in)) continue;
    std::vector<Instr> completion;
    std::set<int> chain_handles;
    while (i + 1 < p.instrs.size() && completes(p.instrs[i + 1], in, chain_handles)) {
      const Instr& next = p.instrs[++i];
      if (next.kind != OpKind::Wait && next.handle >= 0) chain_handles.insert(next.handle);
      completion.push_back(next);
    }
    if (completion.empty()) continue;
    pending.push_back(completion);
    pending_handles.insert(chain_handles.begin(), chain_handles.end());
    if (pending.size() > static_cast<size_t>(inputs.reductions_in_flight)) complete_oldest();
  }
  while (!pending.empty()) complete_oldest();
  bool changed = !std::equal(out.begin(), out.end(), p.instrs.begin(), [](const Instr& a, const Instr& b) {
    return a.kind == b.kind && a.handle == b.handle && a.params == b.params && a.phase == b.phase;
  });
  p.instrs = std::move(out);
  return changed;
}

}  // namespace loom::passes
