#include "backend/passes/bucket.h"

#include <algorithm>
#include <set>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

bool in_bucket(const std::string& param, const std::string& module) {
  return param.rfind(module + ".", 0) == 0;
}

// Merges the `kind` collectives of `phase` whose parameters all lie in `module` into one:
// into the first (gathers) or the last (reductions). Of their waits the first one after the
// merged collective stays, waiting for it; the others go.
bool merge(ir::Program& p, const std::string& module, ir::Phase phase, OpKind kind, bool into_first) {
  std::vector<size_t> found;
  std::set<int> seen;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase || in.kind != kind || in.params.empty()) continue;
    bool inside = std::all_of(in.params.begin(), in.params.end(), [&](int q) { return in_bucket(p.params[q].name, module); });
    if (!inside) continue;
    for (int q : in.params)
      if (!seen.insert(q).second) return false;  // a member twice in this phase: left alone
    found.push_back(i);
  }
  if (found.size() < 2) return false;
  // Collectives of one kind on different groups (reduce-scatter then all-reduce) are separate kinds here.
  for (size_t i : found)
    if (p.instrs[i].group.role != p.instrs[found[0]].group.role) return false;
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
  bool changed = false;
  for (const std::string& module : inputs.buckets) {
    for (ir::Phase phase : {ir::Phase::Forward, ir::Phase::Backward})
      changed |= merge(p, module, phase, OpKind::AllGather, true);
    changed |= merge(p, module, ir::Phase::Backward, OpKind::ReduceScatter, false);
    changed |= merge(p, module, ir::Phase::Backward, OpKind::AllReduce, false);
  }
  return changed;
}

}  // namespace loom::passes
