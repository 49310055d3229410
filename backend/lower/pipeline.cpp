// Pipeline parallelism (slapo.txt §3.3.2): pipeline_split() puts stage boundaries after list
// entries; the stage plan is made here so it fails before any rank starts; and a stage's
// program is lowered here, as backend/exec/pipeline_stage.h runs it.
#include <map>
#include <set>

#include "backend/lower/directive_lowering.h"
#include "backend/lower/pipeline_stages.h"

namespace loom::lowering {
namespace {

using ir::Instr;
using ir::OpKind;
using ir::Phase;

// Where an op sits: before the split list, in it (at an entry), or after it.
struct Place {
  enum { Before, Entry, After } where = Before;
  int stage = -1;  // Entry: the stage running it
};

Instr exchange(ir::Program& p, OpKind kind, Phase phase, int64_t bytes) {
  Instr in = ir::scalar_collective(p, kind, phase, {"stage_pair", 2});
  in.bytes = bytes;
  return in;
}

}  // namespace

void pipeline_split(const Directive& d, const Schedule&, RuntimePlan& plan) { plan.pipeline_splits.push_back(d.target); }

void plan_stages(const Schedule& schedule, RuntimePlan& plan) {
  // Throws when the list is too short for pp stages: before any rank starts.
  if (plan.pp > 1) plan.stages = plan_pipeline_stages(schedule.tree(), plan.pipeline_splits, plan.pp);
}

void lower_pipeline_stage(const RuntimePlan& plan, const ir::OpTrace& trace, ir::Program& p) {
  if (plan.pp <= 1) return;
  const PipelineStages& stages = plan.stages;
  int stage = p.mesh.stage;
  bool first = stage == 0, last = stage == plan.pp - 1;
  std::map<std::string, Place> place;
  std::map<std::string, const ir::TracedOp*> op_of;
  bool seen_list = false;
  std::string prefix = stages.list + ".";
  for (const ir::TracedOp& op : trace.forward) {
    op_of[op.module] = &op;
    Place at;
    if (op.module.rfind(prefix, 0) == 0) {
      at.where = Place::Entry;
      at.stage = stages.stage_of_entry(std::stoi(op.module.substr(prefix.size())));
      seen_list = true;
    } else {
      at.where = seen_list ? Place::After : Place::Before;
    }
    place[op.module] = at;
  }
  auto runs = [&](const Instr& in) {
    const Place& at = place.at(in.module);
    if (at.where == Place::Entry) return at.stage == stage;
    if (at.where == Place::After) return last;
    return in.phase == Phase::Forward || first;  // later stages' embeddings feed nothing back
  };
  // This stage's ops, and where its activation arrives and leaves.
  std::vector<Instr> kept;
  const ir::TracedOp *first_entry = nullptr, *last_entry = nullptr;
  for (const Instr& in : p.instrs) {
    if (in.kind == OpKind::Compute && !runs(in)) continue;
    if (in.kind == OpKind::Compute && in.phase == Phase::Forward && place.at(in.module).where == Place::Entry) {
      if (!first_entry) first_entry = op_of.at(in.module);
      last_entry = op_of.at(in.module);
    }
    kept.push_back(in);
  }
  std::vector<Instr> out;
  auto blocking = [&](OpKind kind, Phase phase, int64_t bytes) {
    Instr in = exchange(p, kind, phase, bytes);
    out.push_back(in);
    out.push_back(ir::wait_for(in.handle, phase));
  };
  bool received = false, backward_started = false;
  for (size_t i = 0; i < kept.size(); ++i) {
    const Instr& in = kept[i];
    bool entry_compute = in.kind == OpKind::Compute && place.at(in.module).where == Place::Entry;
    if (!first && !received && entry_compute && in.phase == Phase::Forward) {
      blocking(OpKind::Recv, Phase::Forward, first_entry->input_bytes);
      received = true;
    }
    if (!last && !backward_started && in.phase == Phase::Backward) {
      blocking(OpKind::Recv, Phase::Backward, last_entry->output_bytes);  // the gradient of what it sent
      backward_started = true;
    }
    if (!first && in.phase == Phase::Step && (i == 0 || kept[i - 1].phase != Phase::Step))
      blocking(OpKind::Send, Phase::Backward, first_entry->input_bytes);  // the gradient of what it received
    out.push_back(in);
    if (!last && entry_compute && in.phase == Phase::Forward && op_of.at(in.module) == last_entry)
      blocking(OpKind::Send, Phase::Forward, last_entry->output_bytes);
  }
  // The parameters it holds: its ops', and those outside the list, whose gradients are summed
  // over the pipeline before the step (zeros where a stage did not use one).
  std::set<int> held, shared;
  for (const Instr& in : out)
    if (in.kind == OpKind::Compute) held.insert(in.params.begin(), in.params.end());
  for (const auto& [module, at] : place)
    if (at.where != Place::Entry)
      for (const std::string& name : op_of.at(module)->params)
        for (size_t q = 0; q < p.params.size(); ++q)
          if (p.params[q].name == name) shared.insert(static_cast<int>(q)), held.insert(static_cast<int>(q));
  std::vector<Instr> with_sum;
  for (Instr in : out) {
    if (in.kind == OpKind::OptimizerStep) {
      Instr sum = ir::scalar_collective(p, OpKind::AllReduce, Phase::Step, {"pipeline", plan.pp});
      sum.params.assign(shared.begin(), shared.end());
      sum.bytes = 0;
      for (int q : shared) sum.bytes += ir::param_bytes(p, q);
      // Before the norm: find where the tail starts.
      auto tail = with_sum.begin();
      while (tail != with_sum.end() && tail->phase != Phase::Step) ++tail;
      size_t at = static_cast<size_t>(tail - with_sum.begin());
      with_sum.insert(with_sum.begin() + static_cast<long>(at), {sum, ir::wait_for(sum.handle, Phase::Step)});
      in.params.assign(held.begin(), held.end());
    }
    with_sum.push_back(in);
  }
  p.instrs = std::move(with_sum);
}

}  // namespace loom::lowering
