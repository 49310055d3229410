// Activation checkpointing: checkpoint() recomputes a module's forward in backward; the step
// program says where, with a `recompute` instruction.
#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void checkpoint(const Directive& d, const Schedule& schedule, RuntimePlan& plan) {
  const ModuleTree& tree = schedule.tree();
  // The step program recomputes the ops that own parameters; a module without any has none.
  if (tree.parameter_count(tree.find(d.target)) == 0)
    unsupported(d, "`" + d.target + "` holds no parameters, so the step has no op of it to recompute",
                "checkpoint the block around it instead");
  if (std::find(plan.checkpoint.begin(), plan.checkpoint.end(), d.target) == plan.checkpoint.end())
    plan.checkpoint.push_back(d.target);  // twice is once (the primitive warned)
}

void check_checkpoint(const Directive& d, const Schedule&, const RuntimePlan& plan) {
  // A stage recomputes only what it runs: a module around the split list spans stages.
  if (plan.pp > 1 && (d.target.empty() || ir::within(plan.stages.list, d.target)))
    unsupported(d, "`" + (d.target.empty() ? std::string("the model") : d.target) + "` holds the pipeline's list `" +
                       plan.stages.list + "`, whose entries run on different stages",
                "checkpoint the list's entries instead: for b in sch[\"" + plan.stages.list + ".*\"] { b.checkpoint() }");
}

namespace {

bool forward_tp_collective(const ir::Instr& in) {
  return in.phase == ir::Phase::Forward && (in.kind == ir::OpKind::TpAllReduce || in.kind == ir::OpKind::TpAllGather);
}

// What recomputing module `m` puts before the backward of its first op, or nothing where this
// program runs no backward of it (another stage's module): the recompute, then the forward's
// tensor-parallel collectives inside it, which the recomputation issues again. `inside`: the
// indices of the program's instructions within `m`, in order.
std::vector<ir::Instr> recomputation_of(const std::string& m, const std::vector<size_t>& inside, ir::Program& p, size_t& first_backward) {
  ir::Instr recompute;
  recompute.kind = ir::OpKind::Recompute;
  recompute.phase = ir::Phase::Backward;
  recompute.module = m;
  std::set<int> params;
  std::vector<ir::Instr> replayed;
  first_backward = p.instrs.size();
  for (size_t i : inside) {
    ir::Instr& in = p.instrs[i];
    if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Forward) {
      params.insert(in.params.begin(), in.params.end());
      recompute.flops += in.flops;
      recompute.activation_bytes += in.activation_bytes;
      in.activation_bytes = 0;  // dropped in forward: the recomputation saves them again
    } else if (forward_tp_collective(in)) {
      ir::Instr again = ir::scalar_collective(p, in.kind, ir::Phase::Backward, in.group);
      again.module = in.module;
      again.bytes = in.bytes;
      replayed.push_back(again);
      replayed.push_back(ir::wait_for(again.handle, ir::Phase::Backward));
    } else if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward && first_backward == p.instrs.size()) {
      first_backward = i;
    }
  }
  if (first_backward == p.instrs.size()) return {};
  recompute.params.assign(params.begin(), params.end());
  replayed.insert(replayed.begin(), recompute);
  return replayed;
}

// The checkpointed module `path` lies in (itself or the nearest enclosing one), or none.
const std::string* enclosing(std::string_view path, const std::unordered_map<std::string_view, const std::string*>& modules) {
  for (size_t end = path.size();;) {
    auto found = modules.find(path.substr(0, end));
    if (found != modules.end()) return found->second;
    size_t dot = end == 0 ? std::string_view::npos : path.rfind('.', end - 1);
    if (dot == std::string_view::npos) return nullptr;
    end = dot;
  }
}

}  // namespace

void insert_recomputation(const std::vector<std::string>& checkpointed, ir::Program& p) {
  std::set<std::string> requested(checkpointed.begin(), checkpointed.end());
  // The outermost modules: one nested in another is recomputed with it.
  std::unordered_map<std::string_view, const std::string*> outermost;
  for (const std::string& m : requested) {
    bool nested = false;
    for (const std::string& other : requested) nested = nested || (other != m && ir::within(m, other));
    if (!nested) outermost[m] = &m;
  }
  if (outermost.empty()) return;
  std::map<std::string, std::vector<size_t>> inside;  // by module, in name order (the handles' order)
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (const std::string* m = enclosing(p.instrs[i].module.str(), outermost)) inside[*m].push_back(i);
  std::map<size_t, std::vector<ir::Instr>> before;  // recomputations by the instruction they precede
  for (const auto& [m, indices] : inside) {
    size_t first_backward = 0;
    std::vector<ir::Instr> recomputation = recomputation_of(m, indices, p, first_backward);
    if (!recomputation.empty()) before[first_backward] = std::move(recomputation);
  }
  std::vector<ir::Instr> out;
  out.reserve(p.instrs.size() + 2 * before.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    auto at = before.find(i);
    if (at != before.end())
      for (ir::Instr& in : at->second) out.push_back(std::move(in));
    out.push_back(std::move(p.instrs[i]));
  }
  p.instrs = std::move(out);
}

}  // namespace loom::lowering
