// What one run of an IR instruction costs, in seconds, for the simulator (backend/sim/): an
// interface, so that a measured profile and the analytic model of a cluster
// (analytic_cost.h) price the same program. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "backend/cost/analytic_cost.h"
#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/cost/step_estimate.h"
#include "backend/ir/ir.h"

namespace loom {

class InstructionCost {
 public:
  virtual ~InstructionCost() = default;
  // Seconds one run of `in` (an instruction of `program`) takes on its stream; 0 for those that
  // take no time (waits, releases).
  virtual double seconds(const ir::Program& program, const ir::Instr& in) const = 0;
  // Seconds of the rank's own work that `in` does around its collective: the gradient norm's
  // norm and clipping before its all-reduce (measured by a profile), a wait's unpacking after
  // its collective ends (ir::Instr::unpack_bytes); 0 where the model does not know.
  virtual double own_seconds(const ir::Program& program, const ir::Instr& in) const { return 0; }
  // Seconds a collective takes when the simulator knows whether it runs `beside_compute` (its
  // rank issues other work before waiting for it, or it is issued while another is in flight:
  // contended_collectives). A model that does not tell the two apart, or tells them apart in
  // seconds() already (a profile): seconds().
  virtual double collective_seconds(const ir::Program& program, const ir::Instr& in, bool beside_compute) const {
    return seconds(program, in);
  }
  // Whether collective_seconds() depends on `beside_compute` (else the simulator need not work it out).
  virtual bool prices_beside_compute() const { return false; }
  // The host's part of a compute instruction on a device whose kernels run behind the host (a
  // GPU): the host dispatches them in this time and goes on while they run. -1 where the host
  // runs the work itself, or the model does not know (seconds() then holds the host too).
  virtual double host_seconds(const ir::Program& program, const ir::Instr& in) const { return -1; }
  // Bytes `in` allocates while it runs and frees by its end, beyond what it saves (a backward's
  // input gradients and temporaries): measured by a profile; 0 where the model does not know.
  virtual int64_t workspace_bytes(const ir::Program& program, const ir::Instr& in) const { return 0; }
  // The bytes a compute or recompute saves for backward: the traced ones, unless a measurement
  // says otherwise.
  virtual int64_t activation_bytes(const ir::Program& program, const ir::Instr& in) const { return in.activation_bytes; }
  // Bytes held for the whole step beyond the model's states (a GPU library's workspaces).
  virtual int64_t outside_bytes(const ir::Program& program) const { return 0; }
};

// The analytic model on a cluster: compute from FLOPs and bytes on its device, each collective
// on the links its group spans. Ranks are numbered node by node, `devices_per_node` to a node
// (the run's --local-world, or the cluster's), in the mesh's layout (tp fastest, then dp, then
// stages: backend/lower/mesh_layout.h). Remembers the spans and collective prices it worked out:
// one object per thread.
class ClusterCost : public InstructionCost {
 public:
  ClusterCost(Cluster cluster, Precision precision, int devices_per_node, StateBytes state_bytes = StateBytes::loom_adamw());
  double seconds(const ir::Program& program, const ir::Instr& in) const override;
  // A wait's unpacking: memory-bound, each byte read and written once on the device; the
  // gradient norm's pass over the rank's gradients and their clipping, likewise.
  double own_seconds(const ir::Program& program, const ir::Instr& in) const override;
  // Beside compute, on a cluster with an intra_node_beside_compute link: on that link.
  double collective_seconds(const ir::Program& program, const ir::Instr& in, bool beside_compute) const override;
  bool prices_beside_compute() const override { return beside_compute_.has_value(); }
  // Where the ranks of the group `in` runs on sit, for the program's stage (its first rank's
  // groups: every rank of the stage has groups shaped alike).
  GroupSpan span(const ir::Program& program, const ir::Instr& in) const;
  const Cluster& cluster() const { return cluster_; }
  Precision precision() const { return precision_; }

 private:
  Cluster cluster_;
  std::optional<Cluster> beside_compute_;  // the cluster with its intra-node link beside compute, where it has one
  Precision precision_;
  int devices_per_node_;
  StateBytes state_bytes_;
  // span() by what decides it: the mesh, the group's role and size and, for point-to-point, the
  // direction.
  struct SpanKey {
    int tp, pp, dp, spacing, stage;
    ir::Role role;
    int size;
    bool next;
    bool operator==(const SpanKey& o) const {
      return tp == o.tp && pp == o.pp && dp == o.dp && spacing == o.spacing && stage == o.stage && role == o.role && size == o.size &&
             next == o.next;
    }
  };
  struct SpanKeyHash {
    size_t operator()(const SpanKey& k) const;
  };
  mutable std::unordered_map<SpanKey, GroupSpan, SpanKeyHash> spans_;
  mutable std::optional<std::pair<SpanKey, GroupSpan>> last_span_;  // the last looked up
  GroupSpan work_out_span(const ir::Program& program, const ir::Instr& in) const;
  // A collective's seconds by what decides them (a planner prices the same few thousands of
  // times: every block's collectives alike); `beside_compute` on that cluster's links.
  struct PriceKey {
    const char* op;  // ir::collective_op's name
    int64_t bytes;
    GroupSpan span;
    bool beside_compute;
    bool operator==(const PriceKey& o) const {
      return op == o.op && bytes == o.bytes && span.nodes == o.span.nodes && span.per_node == o.span.per_node &&
             beside_compute == o.beside_compute;
    }
  };
  struct PriceKeyHash {
    size_t operator()(const PriceKey& k) const;
  };
  mutable std::unordered_map<PriceKey, double, PriceKeyHash> prices_;
  double priced_collective(const char* op, int64_t bytes, GroupSpan span, bool beside_compute) const;
  // The elements of the program's parameters this rank updates (and clips): 1/s_os of each.
  double optimized_elements(const ir::Program& program) const;
};

// A measured profile (`loom profile`) prices the programs of one step (a program per pipeline
// stage): each compute op at its measured time, each collective at its role's fitted line, the
// optimizer step and the gradient norm's own work at theirs (step_estimate.h). Only for the
// programs it was built with. Throws UserError when the profile was measured for other ops.
class ProfileCost : public InstructionCost {
 public:
  ProfileCost(const std::vector<ir::Program>& stages, const Profile& profile, const std::string& origin);
  double seconds(const ir::Program& program, const ir::Instr& in) const override;
  double own_seconds(const ir::Program& program, const ir::Instr& in) const override;
  double host_seconds(const ir::Program& program, const ir::Instr& in) const override;
  int64_t workspace_bytes(const ir::Program& program, const ir::Instr& in) const override;
  int64_t activation_bytes(const ir::Program& program, const ir::Instr& in) const override;
  int64_t outside_bytes(const ir::Program& program) const override;
  // What the profile measured of each program's memory (backend/sim/memory_calibration.h),
  // one per program in the order they were given; without it the traced bytes stand.
  void calibrate_memory(std::vector<MemoryCalibration> by_program);

 private:
  std::vector<const ir::Program*> programs_;
  std::vector<MemoryCalibration> memory_;  // by program
  std::vector<StepEstimate> estimates_;  // by program
  std::vector<std::vector<double>> seconds_;  // by program, by instruction
  size_t index_of(const ir::Program& program) const;
};

}  // namespace loom
