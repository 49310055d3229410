#include "backend/sim/memory_calibration.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "backend/sim/memory_walk.h"

namespace loom::memory {
namespace {

// The profile's op of `module`: its first call in forward, or (`last`) its last, whose backward
// comes first (as estimate_step matches them).
const OpProfile* measured(const Profile& profile, const std::string& module, bool last) {
  const OpProfile* found = nullptr;
  for (const OpProfile& op : profile.ops)
    if (op.module == module) {
      found = &op;
      if (!last) break;
    }
  return found;
}

// The walk's memory in use before the first forward and the first backward compute, as the
// op profiler reads it (the most over the step's runs of each, as it keeps the most over an
// op's calls), and the activations the first micro-batch saves between them.
struct WalkPoints {
  const ir::Instr* first_forward = nullptr;
  const ir::Instr* first_backward = nullptr;
  int64_t w0 = 0, w1 = 0, saved = 0;
};

std::optional<WalkPoints> walk_points(const ir::Program& p, const StateBytes& state_bytes, const std::set<std::string>& shared) {
  WalkPoints points;
  for (const ir::Instr& in : p.instrs) {
    if (in.kind != ir::OpKind::Compute || shared.count(in.module)) continue;
    const ir::Instr*& first = in.phase == ir::Phase::Forward ? points.first_forward : points.first_backward;
    if (!first) first = &in;
  }
  if (!points.first_forward || !points.first_backward) return std::nullopt;
  int64_t in_use = resident_bytes(p, state_bytes);
  points.w0 = points.w1 = std::numeric_limits<int64_t>::min();
  bool saving = false;  // the first micro-batch, from its first forward compute to its first backward one
  StepMemory memory(p, nullptr);
  for (const Run& run : runs_of(p)) {
    const ir::Instr& in = p.instrs[run.instr];
    bool first_micro_batch = run.micro_batch == 0;
    if (&in == points.first_forward) {
      points.w0 = std::max(points.w0, in_use);
      saving = saving || first_micro_batch;
    }
    if (&in == points.first_backward) {
      points.w1 = std::max(points.w1, in_use);
      if (first_micro_batch) saving = false;
    }
    bool saves = (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Forward) || in.kind == ir::OpKind::Recompute;
    if (saving && first_micro_batch && saves) points.saved += in.activation_bytes;
    in_use += memory.effect(in, run.micro_batch).change;
  }
  if (points.w0 == std::numeric_limits<int64_t>::min() || points.w1 == std::numeric_limits<int64_t>::min()) return std::nullopt;
  return points;
}

}  // namespace

MemoryCalibration measured_memory_calibration(const ir::Program& p, const Profile& profile, const StateBytes& state_bytes,
                                              const std::set<std::string>& shared) {
  if (profile.device != "cuda") return {};
  std::optional<WalkPoints> walk = walk_points(p, state_bytes, shared);
  if (!walk) return {};
  const OpProfile* first = measured(profile, walk->first_forward->module, false);
  const OpProfile* last = measured(profile, walk->first_backward->module, true);
  if (!first || !last) return {};
  int64_t m0 = first->memory_before_bytes, m1 = last->backward_before_bytes;
  MemoryCalibration calibration{1, m0 - walk->w0};
  if (walk->saved > 0) {
    double scale = 1 + static_cast<double>((m1 - m0) - (walk->w1 - walk->w0)) / static_cast<double>(walk->saved);
    if (scale > 0) calibration.activation_scale = scale;
  }
  return calibration;
}

std::vector<MemoryCalibration> measured_calibrations(const std::vector<ir::Program>& stages, const Profile& profile,
                                                     const StateBytes& state_bytes) {
  // A pipeline runs the modules outside its split list (embeddings, head) on every stage, and
  // the profile keeps the most any rank measured of each: another stage's memory, for some.
  std::map<std::string, std::set<size_t>> stages_of;
  for (size_t s = 0; s < stages.size(); ++s)
    for (const ir::Instr& in : stages[s].instrs)
      if (in.kind == ir::OpKind::Compute) stages_of[in.module].insert(s);
  std::set<std::string> shared;
  for (const auto& [module, on] : stages_of)
    if (on.size() > 1) shared.insert(module);
  std::vector<MemoryCalibration> by_program;
  for (const ir::Program& p : stages) by_program.push_back(measured_memory_calibration(p, profile, state_bytes, shared));
  return by_program;
}

}  // namespace loom::memory
