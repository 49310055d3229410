#include "backend/passes/bucket.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// The collectives one bucket merges: one kind, in one phase, on one group, in the same micro-batches.
struct Family {
  ir::Phase phase;
  OpKind kind;
  ir::Role role;
  ir::MicroBatches runs_in;
  bool operator<(const Family& o) const {
    return std::tie(phase, kind, role, runs_in) < std::tie(o.phase, o.kind, o.role, o.runs_in);
  }
};

// Merges the collectives of `family` whose parameters are all members into one: into the
// first (gathers) or the last (reductions). Of their waits the first one after the merged
// collective stays, waiting for it; the others go.
bool merge(ir::Program& p, const std::function<bool(int)>& member, const Family& family, bool into_first) {
  std::vector<size_t> found;
  std::set<int> seen;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != family.phase || in.kind != family.kind || in.group.role != family.role ||
        in.runs_in != family.runs_in || in.params.empty())
      continue;
    bool inside = std::all_of(in.params.begin(), in.params.end(), member);
    if (!inside) continue;
    for (int q : in.params)
      if (!seen.insert(q).second) return false;  // a member twice in this phase: left alone
    found.push_back(i);
  }
  if (found.size() < 2) return false;
  size_t anchor = into_first ? found.front() : found.back();
  Instr merged = p.instrs[anchor];
  merged.params.clear();
  merged.bytes = 0;
  std::set<int> handles;
  for (size_t i : found) {
    const Instr& in = p.instrs[i];
    merged.params.insert(merged.params.end(), in.params.begin(), in.params.end());
    merged.bytes += in.bytes;
    handles.insert(in.handle);
  }
  std::set<size_t> dropped(found.begin(), found.end());
  dropped.erase(anchor);
  bool waited = false;
  std::vector<Instr> out;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (dropped.count(i)) continue;
    Instr in = i == anchor ? merged : p.instrs[i];
    if (in.kind == OpKind::Wait && handles.count(in.handle)) {
      if (waited || i < anchor) continue;
      in.handle = merged.handle;
      waited = true;
    }
    out.push_back(in);
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace

bool merge_collectives(ir::Program& p, const std::function<bool(int)>& member, const ir::Phase* phase) {
  std::set<Family> families;
  std::set<int> compressed;  // TAGC reduces these gradients (its compress, then their replica sums) one by one
  for (const Instr& in : p.instrs) {
    if (in.kind == OpKind::Compress) compressed.insert(in.params.begin(), in.params.end());
    if (phase && in.phase != *phase) continue;
    bool gather = in.kind == OpKind::AllGather && in.phase != ir::Phase::Step;
    bool reduction = (in.kind == OpKind::ReduceScatter || in.kind == OpKind::AllReduce) && in.phase == ir::Phase::Backward;
    if (gather || reduction) families.insert({in.phase, in.kind, in.group.role, in.runs_in});
  }
  // A reduction bucket leaves them out: its replica sum must name the members its reduce-scatter
  // does, which the executor matches it to.
  auto reduced_member = [&](int q) { return member(q) && !compressed.count(q); };
  bool changed = false;
  for (const Family& family : families) {
    bool gathers = family.kind == OpKind::AllGather;
    changed |= merge(p, gathers ? member : std::function<bool(int)>(reduced_member), family, gathers);
  }
  return changed;
}

bool bucket(ir::Program& p, const PassInputs& inputs) {
  bool changed = false;
  for (const std::string& module : inputs.buckets)
    changed |= merge_collectives(p, [&](int q) { return ir::within(p.params[static_cast<size_t>(q)].name, module); });
  return changed;
}

}  // namespace loom::passes
