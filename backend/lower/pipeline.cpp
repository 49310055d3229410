// Pipeline parallelism (slapo.txt §3.3.2): pipeline_split() puts stage boundaries after list
// entries; the stage plan is made here so it fails before any rank starts; and a stage's
// program is lowered here, as backend/exec/pipeline_stage.h runs it.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "backend/lower/directive_lowering.h"
#include "backend/lower/pipeline_stages.h"
#include "backend/lower/step_program.h"

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

// The traced ops by module, with their places.
struct StageMap {
  std::unordered_map<std::string, Place> place;
  std::unordered_map<std::string, const ir::TracedOp*> op_of;
  std::string list;  // the split list's path

  StageMap(const PipelineStages& stages, const ir::OpTrace& trace) : list(stages.list) {
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
  }
  bool entry(const Instr& in) const { return in.kind == OpKind::Compute && place.at(in.module).where == Place::Entry; }
  // The list entry an op of it lies in: "h.2" for "h.2.attn.c_attn".
  std::string entry_of(const ir::TracedOp& op) const {
    size_t end = op.module.find('.', list.size() + 1);
    return op.module.substr(0, end);
  }
};

// The instructions of this stage's ops: every stage runs the ops before the list (their output
// is replaced by what arrives), but only the first one runs their backward; the last one runs
// the ops after the list.
std::vector<Instr> stage_ops(ir::Program& p, const StageMap& map, int pp) {
  int stage = p.mesh.stage;
  std::vector<Instr> kept;
  for (Instr& in : p.instrs) {
    if (in.kind == OpKind::Compute) {
      const Place& at = map.place.at(in.module);
      bool runs = at.where == Place::Entry   ? at.stage == stage
                  : at.where == Place::After ? stage == pp - 1
                                             : in.phase == Phase::Forward || stage == 0;
      if (!runs) continue;
      if (at.where == Place::Before && stage != 0) {
        in.activation_bytes = 0;  // its output is replaced by what arrives: nothing it saves lives on
        kept.push_back(std::move(in));
        continue;
      }
    }
    kept.push_back(std::move(in));
  }
  return kept;
}

// The activation from the previous stage before the first entry, on to the next after the
// last; in backward, their gradients the other way (blocking point-to-point on the pair). Each
// names the entry it is of: a recv the one it feeds, a send the one whose output it carries
// (the pipeline stage's executor receives and sends there).
std::vector<Instr> exchange_activations(ir::Program& p, std::vector<Instr>& kept, const StageMap& map, int pp) {
  bool first = p.mesh.stage == 0, last = p.mesh.stage == pp - 1;
  const ir::TracedOp *first_entry = nullptr, *last_entry = nullptr;
  for (const Instr& in : kept)
    if (map.entry(in) && in.phase == Phase::Forward) {
      if (!first_entry) first_entry = map.op_of.at(in.module);
      last_entry = map.op_of.at(in.module);
    }
  std::vector<Instr> out;
  out.reserve(kept.size() + 8);
  auto blocking = [&](OpKind kind, Phase phase, int64_t bytes, const ir::TracedOp* entry) {
    Instr in = ir::scalar_collective(p, kind, phase, {ir::Role::StagePair, 2});
    in.module = map.entry_of(*entry);
    in.bytes = bytes;
    out.push_back(in);
    out.push_back(ir::wait_for(in.handle, phase));
  };
  bool received = false, backward_started = false;
  Phase previous = Phase::Forward;  // the phase of the instruction before (kept's are moved out)
  for (size_t i = 0; i < kept.size(); ++i) {
    Instr& in = kept[i];
    if (!first && !received && map.entry(in) && in.phase == Phase::Forward) {
      blocking(OpKind::Recv, Phase::Forward, first_entry->input_bytes, first_entry);
      received = true;
    }
    if (!last && !backward_started && in.phase == Phase::Backward) {
      blocking(OpKind::Recv, Phase::Backward, last_entry->output_bytes, last_entry);  // the gradient of what it sent
      backward_started = true;
    }
    if (!first && in.phase == Phase::Step && (i == 0 || previous != Phase::Step))
      blocking(OpKind::Send, Phase::Backward, first_entry->input_bytes, first_entry);  // the gradient of what it received
    bool sends = !last && map.entry(in) && in.phase == Phase::Forward && map.op_of.at(in.module) == last_entry;
    previous = in.phase;
    out.push_back(std::move(in));
    if (sends) blocking(OpKind::Send, Phase::Forward, last_entry->output_bytes, last_entry);
  }
  return out;
}

// The stage holds its ops' parameters and those outside the list: the program's parameters
// become those (another stage's are none of its business), renumbered.
void keep_held_parameters(ir::Program& p, std::vector<Instr>& instrs, const StageMap& map) {
  std::set<int> held;
  for (const Instr& in : instrs)
    if (in.kind == OpKind::Compute) held.insert(in.params.begin(), in.params.end());
  for (const auto& [module, at] : map.place)
    if (at.where != Place::Entry)
      for (const std::string& name : map.op_of.at(module)->params)
        for (size_t q = 0; q < p.params.size(); ++q)
          if (p.params[q].name == name) held.insert(static_cast<int>(q));
  std::map<int, int> renumbered;
  std::vector<ir::TracedParam> params;
  for (int q : held) {
    renumbered[q] = static_cast<int>(params.size());
    params.push_back(p.params[q]);
  }
  for (Instr& in : instrs) {
    std::vector<int> mine;
    for (int q : in.params)
      if (renumbered.count(q)) mine.push_back(renumbered[q]);
    in.params = mine;  // renumbered; the optimizer step's drop the parameters the stage does not hold
  }
  p.params = std::move(params);
}

// The gradients of the parameters outside the list: every stage sums them over the pipeline
// (zeros where it used none) before the norm reads them; with sharded optimizer states, the
// slices each rank updates.
void sum_shared_gradients(ir::Program& p, std::vector<Instr>& instrs, const StageMap& map, int pp) {
  std::set<int> shared;
  for (const auto& [module, at] : map.place)
    if (at.where != Place::Entry)
      for (const std::string& name : map.op_of.at(module)->params)
        for (size_t q = 0; q < p.params.size(); ++q)
          if (p.params[q].name == name) shared.insert(static_cast<int>(q));
  Instr sum = ir::scalar_collective(p, OpKind::AllReduce, Phase::Step, {ir::Role::Pipeline, pp});
  sum.params.assign(shared.begin(), shared.end());
  sum.bytes = ir::shared_gradient_bytes(p, sum.params);
  auto tail = std::find_if(instrs.begin(), instrs.end(), [](const Instr& in) { return in.phase == Phase::Step; });
  instrs.insert(tail, {sum, ir::wait_for(sum.handle, Phase::Step)});
}

}  // namespace

void pipeline_split(const Directive& d, const Schedule&, RuntimePlan& plan) { plan.pipeline_splits.push_back(d.target); }

void plan_stages(const Schedule& schedule, RuntimePlan& plan) {
  // Throws when the list is too short for pp stages: before any rank starts.
  if (plan.pp > 1) plan.stages = plan_pipeline_stages(schedule.tree(), plan.pipeline_splits, plan.pp);
}

void lower_pipeline_stage(const RuntimePlan& plan, const ir::OpTrace& trace, ir::Program& p) {
  if (plan.pp <= 1) return;
  StageMap map(plan.stages, trace);
  std::vector<Instr> kept = stage_ops(p, map, plan.pp);
  std::vector<Instr> instrs = exchange_activations(p, kept, map, plan.pp);
  keep_held_parameters(p, instrs, map);
  sum_shared_gradients(p, instrs, map, plan.pp);
  p.instrs = std::move(instrs);
}

}  // namespace loom::lowering
