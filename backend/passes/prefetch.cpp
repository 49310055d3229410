#include "backend/passes/prefetch.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// The first prefetch request whose block contains a module ("h.3" contains "h.3.attn.c_attn"):
// found among the module's ancestors, by path, rather than by comparing every request.
class BlockFinder {
 public:
  explicit BlockFinder(const std::vector<PrefetchRequest>& requests) : requests_(requests) {
    for (size_t i = 0; i < requests_.size(); ++i) first_.try_emplace(requests_[i].module, i);
  }
  const PrefetchRequest* block_of(const std::string& module) const {
    size_t best = requests_.size();
    for (std::string_view path(module); !path.empty();) {  // the module, then each ancestor
      auto at = first_.find(path);
      if (at != first_.end()) best = std::min(best, at->second);
      size_t dot = path.rfind('.');
      path = dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
    }
    return best < requests_.size() ? &requests_[best] : nullptr;
  }

 private:
  const std::vector<PrefetchRequest>& requests_;
  std::unordered_map<std::string_view, size_t> first_;  // a request's module -> its first index
};

// The gathers of `phase` to move ahead, as (insert before this index, gather index).
void plan_hoists(const ir::Program& p, ir::Phase phase, const std::vector<PrefetchRequest>& requests,
                 std::vector<std::pair<size_t, size_t>>& moves) {
  // Segment the phase into runs of instructions belonging to one block (by the compute ops).
  struct Block {
    const PrefetchRequest* request = nullptr;
    size_t first_compute = 0;
    std::vector<size_t> gathers;  // all-gathers placed before this block's computes
  };
  std::vector<Block> blocks;
  std::vector<size_t> loose_gathers;
  BlockFinder finder(requests);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase) continue;
    if (in.kind == OpKind::AllGather) loose_gathers.push_back(i);
    if (!ir::runs_module(in.kind)) continue;
    const PrefetchRequest* r = finder.block_of(in.module);
    if (blocks.empty() || blocks.back().request != r || !r) {
      blocks.push_back({r, i, {}});
    }
    for (size_t g : loose_gathers) blocks.back().gathers.push_back(g);
    loose_gathers.clear();
  }
  // Move block b's gathers in front of block b-k's first compute, k blocks ahead as the budget allows.
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
    for (size_t g : blocks[b].gathers) moves.push_back({blocks[target].first_compute, g});
  }
}

// Moves the gathers, both phases' at once.
void hoist(ir::Program& p, std::vector<std::pair<size_t, size_t>>& moves) {
  std::sort(moves.begin(), moves.end());  // by place, then in program order
  std::vector<bool> moved(p.instrs.size(), false);
  for (auto& [before, g] : moves) moved[g] = true;
  std::vector<Instr> out;
  out.reserve(p.instrs.size());
  auto next = moves.begin();
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    for (; next != moves.end() && next->first == i; ++next) out.push_back(std::move(p.instrs[next->second]));
    if (!moved[i]) out.push_back(std::move(p.instrs[i]));
  }
  p.instrs = std::move(out);
}

}  // namespace

bool prefetch(ir::Program& p, const PassInputs& inputs) {
  // Under a memory limit, budget=auto is proactive_prefetch's.
  std::vector<PrefetchRequest> requests;
  for (const PrefetchRequest& r : inputs.prefetch)
    if (r.budget > 0 || inputs.memory.limit <= 0) requests.push_back(r);
  if (p.sharding.params <= 1 || requests.empty()) return false;
  std::vector<std::pair<size_t, size_t>> moves;
  plan_hoists(p, ir::Phase::Forward, requests, moves);
  plan_hoists(p, ir::Phase::Backward, requests, moves);
  if (moves.empty()) return false;
  hoist(p, moves);
  return true;
}

}  // namespace loom::passes
