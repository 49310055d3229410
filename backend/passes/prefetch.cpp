#include "backend/passes/prefetch.h"

#include <map>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// The prefetch request whose block contains `module` ("h.3" contains "h.3.attn.c_attn").
const PrefetchRequest* block_of(const std::string& module, const PassInputs& in) {
  for (auto& r : in.prefetch)
    if (ir::within(module, r.module)) return &r;
  return nullptr;
}

void hoist(ir::Program& p, ir::Phase phase, const PassInputs& inputs, bool& changed) {
  // Segment the phase into runs of instructions belonging to one block (by the compute ops).
  struct Block {
    const PrefetchRequest* request = nullptr;
    size_t first_compute = 0;
    std::vector<size_t> gathers;  // all-gathers placed before this block's computes
  };
  std::vector<Block> blocks;
  std::vector<size_t> loose_gathers;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase) continue;
    if (in.kind == OpKind::AllGather) loose_gathers.push_back(i);
    if (!ir::runs_module(in.kind)) continue;
    const PrefetchRequest* r = block_of(in.module, inputs);
    if (blocks.empty() || blocks.back().request != r || !r) {
      blocks.push_back({r, i, {}});
    }
    for (size_t g : loose_gathers) blocks.back().gathers.push_back(g);
    loose_gathers.clear();
  }
  // Move block b's gathers in front of block b-k's first compute, k blocks ahead as the budget allows.
  std::map<size_t, size_t> move_to;  // gather index -> insert before this index
  for (size_t b = 1; b < blocks.size(); ++b) {
    if (!blocks[b].request || blocks[b].gathers.empty()) continue;
    int64_t bytes = 0;
    for (size_t g : blocks[b].gathers) bytes += p.instrs[g].bytes;
    int64_t budget = blocks[b].request->budget;
    size_t target = b - 1;
    if (budget > 0) {
      // Go further ahead while the gathered bytes of the blocks in between fit in the budget.
      int64_t ahead = bytes;
      while (target > 0 && blocks[target].request) {
        int64_t more = 0;
        for (size_t g : blocks[target].gathers) more += p.instrs[g].bytes;
        if (ahead + more > budget) break;
        ahead += more;
        --target;
      }
      if (bytes > budget) continue;
    }
    for (size_t g : blocks[b].gathers) move_to[g] = blocks[target].first_compute;
  }
  if (move_to.empty()) return;
  std::map<size_t, std::vector<Instr>> inserted;
  for (auto& [g, before] : move_to) inserted[before].push_back(p.instrs[g]);
  std::vector<Instr> out;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (inserted.count(i))
      for (auto& in : inserted[i]) out.push_back(in);
    if (!move_to.count(i)) out.push_back(p.instrs[i]);
  }
  p.instrs = std::move(out);
  changed = true;
}

}  // namespace

bool prefetch(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1 || inputs.prefetch.empty()) return false;
  bool changed = false;
  hoist(p, ir::Phase::Forward, inputs, changed);
  hoist(p, ir::Phase::Backward, inputs, changed);
  return changed;
}

}  // namespace loom::passes
