#include "backend/cost/instruction_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>

#include "backend/cost/step_estimate.h"
#include "backend/lower/mesh_layout.h"
#include "lang/diagnostics.h"

namespace loom {

ClusterCost::ClusterCost(Cluster cluster, Precision precision, int devices_per_node, StateBytes state_bytes)
    : cluster_(std::move(cluster)), precision_(precision), devices_per_node_(devices_per_node), state_bytes_(state_bytes) {
  if (!cluster_.intra_node_beside_compute) return;
  beside_compute_ = cluster_;
  beside_compute_->intra_node = *cluster_.intra_node_beside_compute;
}

namespace {
// One hash of a cache key's parts.
size_t hash_of_parts(std::initializer_list<int64_t> parts) {
  size_t h = 0;
  for (int64_t part : parts) h = h * 1000003u ^ std::hash<int64_t>()(part);
  return h;
}
}  // namespace

size_t ClusterCost::SpanKeyHash::operator()(const SpanKey& k) const {
  return hash_of_parts({int64_t{k.tp}, int64_t{k.pp}, int64_t{k.dp}, int64_t{k.spacing}, int64_t{k.stage}, static_cast<int64_t>(k.role),
                        int64_t{k.size}, int64_t{k.next}});
}

size_t ClusterCost::PriceKeyHash::operator()(const PriceKey& k) const {
  return hash_of_parts({static_cast<int64_t>(reinterpret_cast<intptr_t>(k.op)), k.bytes, int64_t{k.span.nodes}, int64_t{k.span.per_node},
                        int64_t{k.beside_compute}});
}

double ClusterCost::priced_collective(const char* op, int64_t bytes, GroupSpan span, bool beside_compute) const {
  PriceKey key{op, bytes, span, beside_compute};
  if (auto known = prices_.find(key); known != prices_.end()) return known->second;
  double seconds = loom::collective_seconds(beside_compute ? *beside_compute_ : cluster_, op, bytes, span);
  prices_.emplace(key, seconds);
  return seconds;
}

GroupSpan ClusterCost::span(const ir::Program& p, const ir::Instr& in) const {
  // The key holds only what work_out_span() reads for the role, so plans that differ elsewhere
  // share it: the world's ranks are its size alone, s_p spaces only a shard's peers.
  ir::Role role = in.group.role;
  bool next = role == ir::Role::StagePair && ir::with_next_stage(in);
  bool spaced = role == ir::Role::Replicas || role == ir::Role::Grads || role == ir::Role::Optim;
  SpanKey key = role == ir::Role::World
                    ? SpanKey{0, 0, 0, 0, 0, role, in.group.size, false}
                    : SpanKey{p.mesh.tp, p.mesh.pp, p.sharding.dp, spaced ? p.sharding.params : 0, p.mesh.stage, role, in.group.size, next};
  if (last_span_ && last_span_->first == key) return last_span_->second;  // a program's collectives come in runs
  auto known = spans_.find(key);
  if (known == spans_.end()) known = spans_.emplace(key, work_out_span(p, in)).first;
  last_span_ = *known;
  return known->second;
}

GroupSpan ClusterCost::work_out_span(const ir::Program& p, const ir::Instr& in) const {
  int tp = p.mesh.tp, pp = p.mesh.pp, dp = p.sharding.dp, s_p = p.sharding.params, stage = p.mesh.stage;
  MeshLayout at = MeshLayout::of(tp * dp * pp, 0, tp, pp);
  ir::Role role = in.group.role;
  int n = in.group.size;
  // The group's ranks as backend/comm/shard_groups.cpp and mesh_groups.cpp make them, for the
  // stage's first rank: sharding groups among its dp ranks (tp apart), replicas and peers of a
  // shard s_p dp ranks apart, the model group a block of dp ranks across every stage.
  std::vector<int> ranks;
  ranks.reserve(static_cast<size_t>(n));
  if (role == ir::Role::Tp) {
    for (int t = 0; t < n; ++t) ranks.push_back(at.rank_at(stage, 0, t));
  } else if (role == ir::Role::World) {
    for (int r = 0; r < n; ++r) ranks.push_back(r);
  } else if (role == ir::Role::Replicas || role == ir::Role::Grads || role == ir::Role::Optim) {
    for (int d = 0; d < n; ++d) ranks.push_back(at.rank_at(stage, d * s_p, 0));
  } else if (role == ir::Role::Pipeline) {
    for (int s = 0; s < n; ++s) ranks.push_back(at.rank_at(s, 0, 0));
  } else if (role == ir::Role::StagePair) {
    ranks = {at.rank_at(stage, 0, 0), at.rank_at(ir::with_next_stage(in) ? stage + 1 : stage - 1, 0, 0)};
  } else if (role == ir::Role::Model) {
    for (int s = 0; s < pp; ++s)
      for (int d = 0; d < n / (tp * pp); ++d)
        for (int t = 0; t < tp; ++t) ranks.push_back(at.rank_at(s, d, t));
  } else {  // params, optim_block, dp: consecutive dp ranks
    for (int d = 0; d < n; ++d) ranks.push_back(at.rank_at(stage, d, 0));
  }
  return span_of_ranks(ranks, devices_per_node_);
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
      return compute_seconds(cluster_.device, 0, static_cast<int64_t>(state_bytes_.optimizer_step_bytes(optimized_elements(p))), precision_);
    }
    case OpKind::Offload:
    case OpKind::Reload:
    case OpKind::OffloadStates:
    case OpKind::ReloadStates: return host_copy_seconds(cluster_, in.bytes);
    case OpKind::Send:
    case OpKind::Recv: return point_to_point_seconds(cluster_, in.bytes, span(p, in).nodes > 1);
    default: break;
  }
  const char* op = ir::issued_collective(in);
  if (!op) return 0;
  return priced_collective(op, in.bytes, span(p, in), false);
}

double ClusterCost::collective_seconds(const ir::Program& p, const ir::Instr& in, bool beside_compute) const {
  // A pipeline's sends and receives go on the point-to-point model (no profile times them beside compute).
  const char* op = ir::issued_collective(in);
  if (!beside_compute || !beside_compute_ || !op || in.kind == ir::OpKind::Send || in.kind == ir::OpKind::Recv) return seconds(p, in);
  return priced_collective(op, in.bytes, span(p, in), true);
}

double ClusterCost::own_seconds(const ir::Program& p, const ir::Instr& in) const {
  // The gradient norm reads the rank's part of every gradient (its optimizer slices), and the
  // clipping reads and writes it again: memory-bound, as the optimizer step.
  if (in.kind == ir::OpKind::GradNorm)
    return compute_seconds(cluster_.device, 0, static_cast<int64_t>(state_bytes_.grad_norm_bytes(optimized_elements(p))), precision_);
  if (in.kind != ir::OpKind::Wait || in.unpack_bytes <= 0) return 0;
  return compute_seconds(cluster_.device, 0, 2 * in.unpack_bytes, precision_);
}

double ClusterCost::optimized_elements(const ir::Program& p) const {
  double elements = 0;
  for (const ir::TracedParam& param : p.params) elements += static_cast<double>(param.numel) / p.sharding.optim;
  return elements;
}

ProfileCost::ProfileCost(const std::vector<ir::Program>& stages, const Profile& profile, const std::string& origin) {
  for (const ir::Program& program : stages) {
    StepEstimate& estimate = estimates_.emplace_back(estimate_step(program, profile, origin));
    std::vector<double>& seconds = seconds_.emplace_back();
    for (size_t i = 0; i < estimate.instruction_ms.size(); ++i) {
      double ms = estimate.instruction_ms[i] - estimate.instruction_own_ms[i];  // its own work is own_seconds'
      const ir::Instr& in = program.instrs[i];
      // A collective the profile never measured would cost nothing: refuse rather than flatter.
      if (ms < 0 && ir::issued_collective(in))
        throw UserError(SourceRange{}, origin + " has no measurement of " + ir::issued_collective(in) + " on the `" + ir::role_name(in.group.role) +
                                           "` group (instruction " + std::to_string(i) + ")",
                        "measure this schedule with `loom profile`");
      seconds.push_back(ms > 0 ? ms / 1000 : 0);  // what a profile does not time costs nothing
    }
    programs_.push_back(&program);
  }
  memory_.resize(programs_.size());
}

void ProfileCost::calibrate_memory(std::vector<MemoryCalibration> by_program) {
  if (by_program.size() != programs_.size()) throw InternalError("a memory calibration for each priced program was expected");
  memory_ = std::move(by_program);
}

size_t ProfileCost::index_of(const ir::Program& program) const {
  for (size_t s = 0; s < programs_.size(); ++s)
    if (programs_[s] == &program) return s;
  throw InternalError("a profile's costs were asked for another program than the ones it priced");
}

namespace {
// Where `in`, one of the program's own instructions, stands in it.
size_t position(const ir::Program& program, const ir::Instr& in) { return static_cast<size_t>(&in - program.instrs.data()); }
}  // namespace

double ProfileCost::seconds(const ir::Program& program, const ir::Instr& in) const {
  return seconds_[index_of(program)].at(position(program, in));
}

double ProfileCost::own_seconds(const ir::Program& program, const ir::Instr& in) const {
  return estimates_[index_of(program)].instruction_own_ms.at(position(program, in)) / 1000;
}

double ProfileCost::host_seconds(const ir::Program& program, const ir::Instr& in) const {
  double ms = estimates_[index_of(program)].instruction_host_ms.at(position(program, in));
  return ms < 0 ? -1 : ms / 1000;
}

int64_t ProfileCost::workspace_bytes(const ir::Program& program, const ir::Instr& in) const {
  return estimates_[index_of(program)].instruction_workspace_bytes.at(position(program, in));
}

int64_t ProfileCost::activation_bytes(const ir::Program& program, const ir::Instr& in) const {
  return std::llround(static_cast<double>(in.activation_bytes) * memory_[index_of(program)].activation_scale);
}

int64_t ProfileCost::outside_bytes(const ir::Program& program) const { return memory_[index_of(program)].outside_bytes; }

}  // namespace loom
