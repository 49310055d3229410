#include "backend/passes/unshard.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "lang/diagnostics.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::MicroBatches;
using ir::OpKind;
using ir::Phase;

// Moves `in`'s parameters that `kept` marks out of it into the returned list (its bytes follow its members).
std::vector<int> take_kept(const ir::Program& p, Instr& in, const std::vector<bool>& kept) {
  std::vector<int> taken;
  auto is_kept = [&](int q) { return kept[static_cast<size_t>(q)]; };
  std::copy_if(in.params.begin(), in.params.end(), std::back_inserter(taken), is_kept);
  in.params.erase(std::remove_if(in.params.begin(), in.params.end(), is_kept), in.params.end());
  in.bytes = ir::total_param_bytes(p, in.params);  // a bucket's members differ in size: by bytes, not by count
  return taken;
}

// With accumulation the parameters `across` marks stay gathered across the step's micro-batches
// as well (deepcompile.txt §4.3: they are not updated until the step ends): their forward
// all-gather and its wait run in the first micro-batch only, their backward release in the
// last only. A bucket's gather that also holds other parameters keeps those, and the marked
// members get a gather of their own before it.
void keep_across_micro_batches(ir::Program& p, const std::vector<bool>& across) {
  std::vector<Instr> out;
  out.reserve(p.instrs.size());
  std::set<int> first_only;           // gathers whose members are all kept: their waits run once too
  std::map<int, Instr> waits_before;  // a split gather's handle: its kept members' wait, which goes before its own
  for (Instr& in : p.instrs) {
    bool forward_gather = in.phase == Phase::Forward && in.kind == OpKind::AllGather;
    bool backward_release = in.phase == Phase::Backward && in.kind == OpKind::Release;
    if (in.kind == OpKind::Wait) {
      if (auto w = waits_before.find(in.handle); w != waits_before.end()) out.push_back(w->second);
      if (first_only.count(in.handle)) in.runs_in = MicroBatches::First;
      out.push_back(std::move(in));
      continue;
    }
    if (!(forward_gather || backward_release) || in.runs_in != MicroBatches::All) {
      out.push_back(std::move(in));
      continue;
    }
    MicroBatches once = forward_gather ? MicroBatches::First : MicroBatches::Last;
    size_t members = in.params.size();
    Instr alone = in;
    alone.params = take_kept(p, in, across);
    if (alone.params.empty()) {
      out.push_back(std::move(in));
    } else if (alone.params.size() == members) {  // every member kept: the instruction itself runs once
      alone.runs_in = once;
      if (forward_gather) first_only.insert(alone.handle);
      out.push_back(std::move(alone));
    } else {  // a bucket's gather (a release holds one parameter, ir::release_of): the kept gather first
      if (!forward_gather) throw InternalError("keep_gathered: a release of several parameters, which no pass makes");
      alone.bytes = ir::total_param_bytes(p, alone.params);
      alone.runs_in = once;
      alone.handle = p.new_handle();
      waits_before.emplace(in.handle, ir::wait_for(alone.handle, Phase::Forward, once));
      out.push_back(std::move(alone));
      out.push_back(std::move(in));
    }
  }
  p.instrs = std::move(out);
}

}  // namespace

void keep_gathered(ir::Program& p, const std::vector<bool>& kept, const std::vector<bool>& across) {
  std::set<int> dropped_handles;
  std::vector<Instr> out;
  out.reserve(p.instrs.size());
  for (Instr& in : p.instrs) {
    bool forward_release = in.phase == Phase::Forward && in.kind == OpKind::Release;
    bool backward_gather = in.phase == Phase::Backward && in.kind == OpKind::AllGather;
    if (forward_release || backward_gather) {
      take_kept(p, in, kept);
      if (in.params.empty()) {
        if (backward_gather) dropped_handles.insert(in.handle);
        continue;
      }
    }
    if (in.kind == OpKind::Wait && dropped_handles.count(in.handle)) continue;
    out.push_back(std::move(in));
  }
  p.instrs = std::move(out);
  if (p.micro_batches > 1 && std::find(across.begin(), across.end(), true) != across.end()) keep_across_micro_batches(p, across);
}

bool unshard(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1) return false;
  std::vector<bool> kept(p.params.size(), false);
  bool any = false;
  for (size_t q = 0; q < p.params.size(); ++q)
    for (const UnshardRequest& r : inputs.unshard)
      if (!r.automatic && ir::within(p.params[q].name, r.module)) kept[q] = any = true;
  if (!any) return false;
  keep_gathered(p, kept, kept);  // asked for outright: across the micro-batches too
  return true;
}

}  // namespace loom::passes
