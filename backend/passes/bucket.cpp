#include "backend/passes/bucket.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

bool in_bucket(const std::string& param, const std::string& module) {
  return ir::within(param, module);
}

// The collectives one bucket merges: one kind, in one phase, on one group, in the same micro-batches.
struct Family {
  ir::Phase phase;
  OpKind kind;
  std::string role;
  ir::MicroBatches runs_in;
  bool operator<(const Family& o) const {
    return std::tie(phase, kind, role, runs_in) < std::tie(o.phase, o.kind, o.role, o.runs_in);
  }
};

// Merges the collectives of `family` whose parameters all lie in `module` into one: into the
// first (gathers) or the last (reductions). Of their waits the first one after the merged
// collective stays, waiting for it; the others go.
bool merge(ir::Program& p, const std::string& module, const Family& family, bool into_first) {
  std::vector<size_t> found;
  std::set<int> seen;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != family.phase || in.kind != family.kind || in.group.role != family.role ||
        in.runs_in != family.runs_in || in.params.empty())
      continue;
    bool inside = std::all_of(in.params.begin(), in.params.end(), [&](int q) { return in_bucket(p.params[q].name, module); });
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

bool bucket(ir::Program& p, const PassInputs& inputs) {
  std::set<Family> families;
  for (const Instr& in : p.instrs) {
    bool gather = in.kind == OpKind::AllGather && in.phase != ir::Phase::Step;
    bool reduction = (in.kind == OpKind::ReduceScatter || in.kind == OpKind::AllReduce) && in.phase == ir::Phase::Backward;
    if (gather || reduction) families.insert({in.phase, in.kind, in.group.role, in.runs_in});
  }
  bool changed = false;
  for (const std::string& module : inputs.buckets)
    for (const Family& family : families) changed |= merge(p, module, family, family.kind == OpKind::AllGather);
  return changed;
}

}  // namespace loom::passes
