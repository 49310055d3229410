#include "backend/cost/instruction_cost.h"

#include <algorithm>
#include <string>

#include "backend/cost/step_estimate.h"
#include "lang/diagnostics.h"

namespace loom {

ClusterCost::ClusterCost(Cluster cluster, Precision precision, int devices_per_node, StateBytes state_bytes)
    : cluster_(std::move(cluster)), precision_(precision), devices_per_node_(devices_per_node), state_bytes_(state_bytes) {}

GroupSpan ClusterCost::span(const ir::Program& p, const ir::GroupRef& group) const {
  int tp = p.mesh.tp, dp = p.sharding.dp, s_p = p.sharding.params;
  const std::string& role = group.role;
  // How far apart a group's ranks are (backend/comm/shard_groups.h, mesh_groups.h): sharding
  // groups lie inside a stage's dp ranks, tp apart; replicas and peers hold the same shard, s_p
  // of those apart; a pipeline's ranks are a stage apart.
  int stride = 1;
  if (role == "tp" || role == "world") stride = 1;
  else if (role == "replicas" || role == "grads" || role == "optim") stride = tp * s_p;
  else if (role == "pipeline" || role == "stage_pair") stride = tp * dp;
  else if (role == "model") {
    // tp consecutive ranks of each stage (and optimizer block), the stages a node or more apart
    // unless the whole mesh fits in one node.
    if (tp * dp * p.mesh.pp <= devices_per_node_) return {group.size, 1};
    int per_node = std::min(tp, devices_per_node_);
    return {per_node, std::max(1, group.size / per_node)};
  }
  else stride = tp;  // params, optim_block, dp
  return span_of(group.size, stride, devices_per_node_);
}

double ClusterCost::seconds(const ir::Program& p, const ir::Instr& in) const {
  using ir::OpKind;
  switch (in.kind) {
    case OpKind::Compute:
    case OpKind::Recompute:
      // Saved activations stand in for the bytes an op moves (written in forward, read back).
      return compute_seconds(cluster_.device, in.flops, in.activation_bytes, precision_);
    case OpKind::OptimizerStep: {
      // AdamW reads and writes every state of the elements it updates: memory-bound.
      double elements = 0;
      for (int q : in.params) elements += static_cast<double>(p.params[static_cast<size_t>(q)].numel) / p.sharding.optim;
      double per_element = state_bytes_.param + state_bytes_.grad + state_bytes_.optim;
      return compute_seconds(cluster_.device, 0, static_cast<int64_t>(2 * elements * per_element), precision_);
    }
    case OpKind::Offload:
    case OpKind::Reload: return host_copy_seconds(cluster_, in.bytes);
    case OpKind::Send:
    case OpKind::Recv: return point_to_point_seconds(cluster_, in.bytes, span(p, in.group).nodes > 1);
    default: break;
  }
  const char* op = ir::issued_collective(in);
  if (!op) return 0;
  return collective_seconds(cluster_, op, in.bytes, span(p, in.group));
}

ProfileCost::ProfileCost(const ir::Program& program, const Profile& profile, const std::string& origin) : program_(&program) {
  for (double ms : estimate_step(program, profile, origin).instruction_ms) seconds_.push_back(ms > 0 ? ms / 1000 : 0);
}

double ProfileCost::seconds(const ir::Program& program, const ir::Instr& in) const {
  if (&program != program_) throw InternalError("a profile's costs were asked for another program than the one it priced");
  return seconds_.at(static_cast<size_t>(&in - program.instrs.data()));
}

}  // namespace loom
