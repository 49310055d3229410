#include "backend/lower/step_program.h"

#include <unordered_map>

#include "lang/diagnostics.h"

namespace loom::ir {

Program lower(const OpTrace& trace, const Sharding& sharding, bool grad_norm, int64_t micro_batches, const MeshPosition& mesh) {
  Program p;
  p.mesh = mesh;
  p.micro_batches = micro_batches;
  p.model = trace.model;
  p.shape = trace.shape;
  p.sharding = sharding;
  p.params = trace.params;
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < p.params.size(); ++i) index[p.params[i].name] = static_cast<int>(i);
  auto compute = [&](const TracedOp& op, Phase phase) {
    Instr in;
    in.kind = OpKind::Compute;
    in.phase = phase;
    in.module = op.module;
    in.flops = phase == Phase::Forward ? op.flops : 2 * op.flops;  // gradients of both operands
    in.activation_bytes = op.activation_bytes;
    for (auto& name : op.params) {
      auto it = index.find(name);
      if (it == index.end()) throw InternalError("traced op " + op.module + " uses unknown parameter " + name);
      in.params.push_back(it->second);
    }
    return in;
  };
  p.instrs.reserve(2 * trace.forward.size() + 5);
  for (auto& op : trace.forward) p.instrs.push_back(compute(op, Phase::Forward));
  for (auto it = trace.forward.rbegin(); it != trace.forward.rend(); ++it) p.instrs.push_back(compute(*it, Phase::Backward));
  // With optimizer states sharded, each of the s_os ranks of a block holds its part of every
  // gradient: the norm's squares are summed over them. Otherwise every rank holds them all and
  // measures the norm alone (a group of one: no communication). Under a mesh the block's model
  // ranks (tensor-parallel slices, stages) hold their parts too. Clipping follows the norm.
  if (grad_norm) {
    Instr norm = scalar_collective(p, OpKind::GradNorm, Phase::Step, gradient_norm_group(mesh, sharding.optim));
    p.instrs.push_back(norm);
    p.instrs.push_back(wait_for(norm.handle, Phase::Step));
  }
  Instr step;
  step.kind = OpKind::OptimizerStep;
  step.phase = Phase::Step;
  for (size_t i = 0; i < p.params.size(); ++i) step.params.push_back(static_cast<int>(i));
  p.instrs.push_back(step);
  int world = sharding.dp * mesh.model_parallel();
  if (world > 1) {
    Instr loss = scalar_collective(p, OpKind::LossReduce, Phase::Step, {ir::Role::World, world});
    p.instrs.push_back(loss);
    p.instrs.push_back(wait_for(loss.handle, Phase::Step));
  }
  return p;
}

GroupRef gradient_norm_group(const MeshPosition& mesh, int optim_shards) {
  return mesh.model_parallel() > 1 ? GroupRef{Role::Model, mesh.model_parallel() * optim_shards} : GroupRef{Role::OptimBlock, optim_shards};
}

int64_t shared_gradient_bytes(const Program& p, const std::vector<int>& params) {
  int64_t bytes = 0;
  for (int q : params) bytes += param_bytes(p, q) / p.sharding.optim;
  return bytes;
}

void size_by_optimizer_shards(Program& p) {
  for (Instr& in : p.instrs) {
    if (in.kind == OpKind::GradNorm) in.group = gradient_norm_group(p.mesh, p.sharding.optim);
    if (in.kind == OpKind::AllReduce && in.phase == Phase::Step && in.group.role == Role::Pipeline)
      in.bytes = shared_gradient_bytes(p, in.params);
  }
}

}  // namespace loom::ir
