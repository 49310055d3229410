#include "backend/passes/insert_gather_release.h"

#include <vector>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

std::vector<Instr> place(ir::Program& p, std::vector<Instr>& phase_instrs, ir::Phase phase) {
  // Per instruction: the parameters first used there (in parameter order) and last used there.
  constexpr size_t kUnused = static_cast<size_t>(-1);
  std::vector<size_t> first(p.params.size(), kUnused), last(p.params.size(), kUnused);
  for (size_t i = 0; i < phase_instrs.size(); ++i)
    if (ir::runs_module(phase_instrs[i].kind))
      for (int q : phase_instrs[i].params) {
        if (first[q] == kUnused) first[q] = i;
        last[q] = i;
      }
  std::vector<std::vector<int>> first_at(phase_instrs.size()), last_at(phase_instrs.size());
  for (size_t q = 0; q < p.params.size(); ++q)
    if (first[q] != kUnused) {
      first_at[first[q]].push_back(static_cast<int>(q));
      last_at[last[q]].push_back(static_cast<int>(q));
    }
  std::vector<Instr> out;
  out.reserve(2 * phase_instrs.size() + 3 * p.params.size());
  for (size_t i = 0; i < phase_instrs.size(); ++i) {
    for (int q : first_at[i]) {
      Instr gather = ir::collective(p, OpKind::AllGather, phase, q, {ir::Role::Params, p.sharding.params}, ir::param_bytes(p, q));
      int handle = gather.handle;
      out.push_back(std::move(gather));
      out.push_back(ir::wait_for(handle, phase));
    }
    out.push_back(std::move(phase_instrs[i]));
    for (int q : last_at[i]) out.push_back(ir::release_of(p, q, phase));
  }
  return out;
}

}  // namespace

bool insert_gather_release(ir::Program& p, const PassInputs&) {
  p.gathers_placed = true;  // replicated parameters need none
  if (p.sharding.params <= 1) return false;
  std::vector<Instr> fwd, bwd, rest;
  fwd.reserve(p.instrs.size());
  bwd.reserve(p.instrs.size());
  for (auto& in : p.instrs)
    (in.phase == ir::Phase::Forward ? fwd : in.phase == ir::Phase::Backward ? bwd : rest).push_back(std::move(in));
  std::vector<Instr> out = place(p, fwd, ir::Phase::Forward);
  for (auto& in : place(p, bwd, ir::Phase::Backward)) out.push_back(std::move(in));
  for (auto& in : rest) out.push_back(std::move(in));
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
