#include "backend/passes/insert_gather_release.h"

#include <map>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

std::vector<Instr> place(ir::Program& p, const std::vector<Instr>& phase_instrs, ir::Phase phase) {
  std::map<int, size_t> first, last;
  for (size_t i = 0; i < phase_instrs.size(); ++i)
    if (ir::runs_module(phase_instrs[i].kind))
      for (int q : phase_instrs[i].params) {
        if (!first.count(q)) first[q] = i;
        last[q] = i;
      }
  std::vector<Instr> out;
  for (size_t i = 0; i < phase_instrs.size(); ++i) {
    for (auto& [q, f] : first) {
      if (f != i) continue;
      Instr gather = ir::collective(p, OpKind::AllGather, phase, q, {"params", p.sharding.params}, ir::param_bytes(p, q));
      out.push_back(gather);
      out.push_back(ir::wait_for(gather.handle, phase));
    }
    out.push_back(phase_instrs[i]);
    for (auto& [q, l] : last) {
      if (l == i) out.push_back(ir::release_of(p, q, phase));
    }
  }
  return out;
}

}  // namespace

bool insert_gather_release(ir::Program& p, const PassInputs&) {
  p.gathers_placed = true;  // replicated parameters need none
  if (p.sharding.params <= 1) return false;
  std::vector<Instr> fwd, bwd, rest;
  for (auto& in : p.instrs) (in.phase == ir::Phase::Forward ? fwd : in.phase == ir::Phase::Backward ? bwd : rest).push_back(in);
  std::vector<Instr> out = place(p, fwd, ir::Phase::Forward);
  for (auto& in : place(p, bwd, ir::Phase::Backward)) out.push_back(in);
  for (auto& in : rest) out.push_back(in);
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
