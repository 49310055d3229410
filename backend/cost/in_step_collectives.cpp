#include "backend/cost/in_step_collectives.h"

#include <algorithm>

#include "backend/cost/sample_statistics.h"
#include "backend/cost/step_estimate.h"
#include "lang/diagnostics.h"

namespace loom {

double serial_busy_ms(std::vector<CollectiveSpan> spans) {
  std::sort(spans.begin(), spans.end(), [](const CollectiveSpan& a, const CollectiveSpan& b) { return a.completed_ms < b.completed_ms; });
  double busy = 0, free_at = -1e300;
  for (const CollectiveSpan& s : spans) {
    busy += s.completed_ms - std::max(s.launched_ms, free_at);
    free_at = s.completed_ms;
  }
  return busy;
}

namespace {

// The role of a profile's group: the one it names, or whose sweep alias it is.
ir::Role role_of_group(const std::string& group) {
  for (ir::Role aliased : {ir::Role::Grads, ir::Role::Optim})
    if (group == sweep_group_alias(aliased)) return aliased;
  return ir::role_named(group);
}

}  // namespace

std::vector<InStepGroups> in_step_groups(const ir::Program& program) {
  if (program.mesh.pp > 1) return {InStepGroups::InsideStage, InStepGroups::AcrossStages};
  return {InStepGroups::All};
}

bool measured_in_step(ir::Role role, InStepGroups groups) {
  if (role == ir::Role::StagePair) return false;  // a pipeline's sends and receives
  if (groups == InStepGroups::All) return true;
  return ir::inside_one_stage(role) == (groups == InStepGroups::InsideStage);
}

double in_step_scale(const ir::Program& program, const Profile& profile, const std::vector<CollectiveSpan>& spans,
                     const std::vector<double>& step_starts, InStepGroups groups) {
  if (groups == InStepGroups::All && program.mesh.pp > 1)
    throw InternalError("in_step_scale: a pipeline's groups inside and across stages are measured apart");
  if (spans.empty() || step_starts.empty()) return 0;
  StepEstimate priced;
  try {
    priced = estimate_step(program, profile, "the profile being written");
  } catch (const UserError&) {
    return 0;
  }
  double priced_ms = 0;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    double collective_ms = priced.instruction_ms[i] - priced.instruction_own_ms[i];  // not the norm's own work
    if (!ir::issued_collective(in) || !measured_in_step(in.group.role, groups) || collective_ms <= 0) continue;
    priced_ms += collective_ms * static_cast<double>(ir::times_per_step(program, in));
  }
  if (!(priced_ms > 0)) return 0;
  std::vector<std::vector<CollectiveSpan>> by_step(step_starts.size());
  for (const CollectiveSpan& s : spans) {
    if (!measured_in_step(s.role, groups)) continue;
    auto after = std::upper_bound(step_starts.begin(), step_starts.end(), s.launched_ms);
    by_step[after == step_starts.begin() ? 0 : static_cast<size_t>(after - step_starts.begin() - 1)].push_back(s);
  }
  std::vector<double> scales;
  for (const auto& step : by_step) scales.push_back(serial_busy_ms(step) / priced_ms);
  return median(scales);
}

void apply_in_step_scale(Profile& profile, double scale, InStepGroups groups) {
  for (CollectiveProfile& c : profile.collectives)
    if (measured_in_step(role_of_group(c.group), groups)) c.in_step_scale = scale;
}

std::optional<double> applied_in_step_scale(const Profile& profile, InStepGroups groups) {
  for (const CollectiveProfile& c : profile.collectives)
    if (measured_in_step(role_of_group(c.group), groups)) return c.in_step_scale;
  return std::nullopt;
}

}  // namespace loom
