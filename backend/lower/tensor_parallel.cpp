// Tensor parallelism's directives (slapo.txt §3.2.2, Megatron-LM): mesh() sets the group
// sizes, shard() splits Linear layers, sync() adds the collective that makes them whole.
#include <algorithm>
#include <unordered_map>

#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void mesh(const Directive& d, const Schedule&, RuntimePlan& plan) {
  plan.tp = static_cast<int>(d.arg("tp")->as_int());
  plan.pp = static_cast<int>(d.arg("pp")->as_int());
}

void shard(const Directive& d, const Schedule& schedule, RuntimePlan& plan) {
  const std::string& type = schedule.tree().node(schedule.tree().find(d.target)).type;
  if (type != "Linear")
    unsupported(d, "tensor parallelism splits Linear layers; `" + d.target + "` is a " + type,
                "shard the Linear layers inside it instead (`loom tree --model " + schedule.tree().model_name() + "` lists them)");
  TensorShard s{d.target, {}, static_cast<int>(d.arg("axis")->as_int())};
  const Value& params = *d.arg("params");
  if (params.is(ValueKind::String)) s.params.push_back(params.as_string());
  else for (const Value& p : params.as_list()) s.params.push_back(p.as_string());
  plan.shards.push_back(std::move(s));
}

void sync(const Directive& d, const Schedule& schedule, RuntimePlan& plan) {
  SyncRequest s{d.target, d.arg("mode")->as_string(), d.arg("op")->as_string()};
  // The step program places a sync after its module's compute op: a module that computes with
  // parameters of its own (a traced op), not a container of such modules.
  const ModuleTree& tree = schedule.tree();
  if (tree.node(tree.find(d.target)).params.empty())
    unsupported(d, "sync() runs its collective after a module that computes with parameters of its own; `" + d.target +
                       "` holds none directly",
                "sync the layers inside it that you shard (`loom tree --model " + tree.model_name() + "` lists them)");
  bool runs = (s.mode == "fwd_post" && (s.op == "all_reduce" || s.op == "all_gather")) ||
              (s.mode == "bwd_post" && s.op == "all_reduce");
  if (!runs)
    unsupported(d, "sync(mode=\"" + s.mode + "\", op=\"" + s.op + "\") is not built; the runtime has fwd_post "
                   "all_reduce or all_gather, and bwd_post all_reduce (Megatron-LM's row- and column-parallel layers)",
                "use one of those syncs");
  plan.syncs.push_back(std::move(s));
}

namespace {

// A split layer multiplies by its slice: 1/tp of the FLOPs. What it saves for backward: a
// column-split layer (axis 0, output features) its whole input and a slice of what follows its
// output (the attention's heads, the activation function's input); a row-split layer (axis 1,
// input features) a slice of everything, its input first.
void slice_compute(ir::Instr& in, const ir::TracedOp& op, int axis, int tp) {
  in.flops /= tp;
  if (axis == 0) {
    int64_t input = std::min(op.input_bytes, in.activation_bytes);
    in.activation_bytes = input + (in.activation_bytes - input) / tp;
  } else {
    in.activation_bytes /= tp;
  }
}

}  // namespace

void lower_tensor_parallel(const RuntimePlan& plan, const ir::OpTrace& trace, ir::Program& p) {
  if (plan.tp <= 1) return;
  std::unordered_map<std::string, ir::TracedParam*> param_named;
  for (ir::TracedParam& param : p.params) param_named[param.name] = &param;
  std::unordered_map<std::string, int> split_axis;  // module -> the axis its weight is split on
  for (const TensorShard& s : plan.shards) {
    split_axis.emplace(s.module, s.axis);
    for (const std::string& name : s.params) {
      auto param = param_named.find(s.module + "." + name);
      if (param != param_named.end()) param->second->numel /= plan.tp;  // this rank's slice
    }
  }
  std::unordered_map<std::string, std::vector<const SyncRequest*>> syncs_of;
  for (const SyncRequest& s : plan.syncs) syncs_of[s.module].push_back(&s);
  std::unordered_map<std::string, const ir::TracedOp*> op_of;
  for (const ir::TracedOp& op : trace.forward) op_of[op.module] = &op;
  std::vector<ir::Instr> out;
  out.reserve(p.instrs.size() + 2 * plan.syncs.size());
  for (ir::Instr& in : p.instrs) {
    auto axis = in.kind == ir::OpKind::Compute ? split_axis.find(in.module) : split_axis.end();
    if (axis != split_axis.end()) slice_compute(in, *op_of.at(in.module), axis->second, plan.tp);
    bool forward = in.phase == ir::Phase::Forward;
    auto syncs = in.kind == ir::OpKind::Compute && in.phase != ir::Phase::Step ? syncs_of.find(in.module) : syncs_of.end();
    out.push_back(std::move(in));
    if (syncs == syncs_of.end()) continue;
    const std::string& module = syncs->first;
    for (const SyncRequest* s : syncs->second) {
      if (forward != (s->mode == "fwd_post")) continue;
      const ir::TracedOp& op = *op_of.at(module);
      ir::OpKind kind = s->op == "all_gather" ? ir::OpKind::TpAllGather : ir::OpKind::TpAllReduce;
      ir::Phase phase = forward ? ir::Phase::Forward : ir::Phase::Backward;
      ir::Instr sync = ir::scalar_collective(p, kind, phase, {ir::Role::Tp, plan.tp});
      sync.module = module;
      // Forward: the module's whole output; backward: the gradient at its input.
      sync.bytes = forward ? op.output_bytes : op.input_bytes;
      out.push_back(sync);
      out.push_back(ir::wait_for(sync.handle, phase));
    }
  }
  p.instrs = std::move(out);
}

}  // namespace loom::lowering
