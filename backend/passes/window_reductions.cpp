#include "backend/passes/window_reductions.h"

#include <algorithm>
#include <deque>
#include <set>

namespace loom::passes {

using ir::Instr;
using ir::OpKind;

namespace {

// Whether `in` completes the reduction `launch`: its wait, or a collective (or select & drop)
// of the same gradients that runs once it is complete, or the wait of one of those.
bool completes(const Instr& in, const Instr& launch, const std::vector<int>& chain_handles) {
  if (in.phase != ir::Phase::Backward) return false;
  if (in.kind == OpKind::Wait)
    return in.handle == launch.handle || std::find(chain_handles.begin(), chain_handles.end(), in.handle) != chain_handles.end();
  bool follows = in.kind == OpKind::AllReduce || in.kind == OpKind::SelectDrop || in.kind == OpKind::CompressBound;
  return follows && in.params == launch.params;
}

// A pipeline stage's send of its input's gradient: the previous stage waits for it, not for
// these reductions, so completions due at it come after it.
bool hands_gradient_back(const Instr& in) { return in.phase == ir::Phase::Backward && in.kind == OpKind::Send; }

}  // namespace

bool window_reductions(ir::Program& p, const PassInputs& inputs) {
  if (inputs.reductions_in_flight < 1) return false;
  // The new order, as indices into p.instrs; the instructions move only once it is known.
  std::vector<size_t> order;
  order.reserve(p.instrs.size());
  std::deque<std::vector<size_t>> pending;  // completions of reductions in flight, oldest first
  std::vector<char> pending_handle(static_cast<size_t>(std::max(p.next_handle, 0)), 0);  // handles those completions produce
  auto complete_oldest = [&] {
    for (size_t k : pending.front()) {
      order.push_back(k);
      if (p.instrs[k].kind != OpKind::Wait && p.instrs[k].handle >= 0) pending_handle[p.instrs[k].handle] = 0;
    }
    pending.pop_front();
  };
  // Part of launching a reduction: TAGC's index all-reduce and its wait come before its compress.
  std::set<int> index_handles;
  for (const Instr& in : p.instrs)
    if (in.phase == ir::Phase::Backward && in.kind == OpKind::CompressIndex) index_handles.insert(in.handle);
  auto in_a_launch = [&](const Instr& in) {
    if (in.phase != ir::Phase::Backward) return false;
    return ir::launches_reduction(in) || in.kind == OpKind::CompressIndex || (in.kind == OpKind::Wait && index_handles.count(in.handle) > 0);
  };
  auto is_pending = [&](int handle) { return handle >= 0 && handle < static_cast<int>(pending_handle.size()) && pending_handle[handle]; };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    // What the step's tail reads, or a wait on something still pending, needs the pending completed.
    bool needs = in.phase == ir::Phase::Step || (in.kind == OpKind::Wait && is_pending(in.handle));
    while (needs && !pending.empty()) complete_oldest();
    // Past the window, the oldest completes before whatever follows a run of launches: a rank
    // launches the reductions one op's backward completes together, in its gradient hooks, and
    // reaches the program's next instructions only after them.
    if (!in_a_launch(in) && !hands_gradient_back(in))
      while (pending.size() > static_cast<size_t>(inputs.reductions_in_flight)) complete_oldest();
    order.push_back(i);
    if (!ir::launches_reduction(in)) continue;
    std::vector<size_t> completion;
    std::vector<int> chain_handles;  // a few: the collectives that follow the launch
    while (i + 1 < p.instrs.size() && completes(p.instrs[i + 1], in, chain_handles)) {
      const Instr& next = p.instrs[++i];
      if (next.kind != OpKind::Wait && next.handle >= 0) chain_handles.push_back(next.handle);
      completion.push_back(i);
    }
    if (completion.empty()) continue;
    pending.push_back(std::move(completion));
    for (int h : chain_handles)
      if (h < static_cast<int>(pending_handle.size())) pending_handle[h] = 1;
  }
  while (!pending.empty()) complete_oldest();
  bool changed = false;
  for (size_t k = 0; k < order.size() && !changed; ++k) changed = order[k] != k;
  if (!changed) return false;
  std::vector<Instr> out;
  out.reserve(order.size());
  for (size_t k : order) out.push_back(std::move(p.instrs[k]));
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
