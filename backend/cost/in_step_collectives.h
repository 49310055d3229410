// Collectives as they ran in measured steps (issue #15 §5): how long they kept a rank's
// collective stream busy, the measure `loom profile` sets its collective prices' in-step scale
// by. On CPU a collective queued in a step beside compute and other collectives takes longer
// than the sweep, timed one at a time, says (gloo's threads wait for cores the ranks' compute
// holds). Torch-free.
#pragma once

#include <vector>

#include "backend/cost/profile.h"
#include "backend/ir/ir.h"

namespace loom {

// One collective (or one process-group work of it: gloo's all-gather is a broadcast per rank):
// when a rank launched it and when its transfer completed (milliseconds on one clock), and the
// role of its group.
struct CollectiveSpan {
  double launched_ms = 0;
  double completed_ms = 0;
  ir::Role role = ir::Role::None;
};

// The time the collectives kept one stream busy, each served one at a time in the order they
// completed, from its launch or the previous one's completion, whichever is later: close to
// what the simulator's collective stream charges (backend/sim/simulator.cpp serves them in
// program order, from their issue or the stream's last end). Any order of `spans`.
double serial_busy_ms(std::vector<CollectiveSpan> spans);

// Which collectives an in-step scale is measured on and applied to, never a pipeline's sends
// and receives (not on the collective stream). A one-stage program: all of them. A pipeline
// measures two scales: one on the groups inside a stage (data- and tensor-parallel, the
// sharding's), whose ranks run the same program, so that their spans time the transfers as the
// step runs them (on a link that the stages share, one stage's all-reduce alone or beside the
// other's, where the sweep times every stage's group at once); and one on the groups across
// stages (the shared gradients' sum, the norm, the loss), where a span includes waiting for the
// other stage, which the simulator models itself: of those, the rank that reaches them last
// waits for no one, so their scale is the least over the ranks (mean_in_step_scales).
enum class InStepGroups { All, InsideStage, AcrossStages };

// The groups a program's scales are measured on: All for one stage, else both of the others.
std::vector<InStepGroups> in_step_groups(const ir::Program& program);

// Whether `groups` holds the collectives of `role` (`collective` as a profile names it).
bool measured_in_step(ir::Role role, const std::string& collective, InStepGroups groups);

// The in-step scale of `profile`'s collectives in `groups` for `program`: how long those
// collectives of a measured step (`spans`) kept the stream busy, over what the profile's sweeps
// price the program's collectives in `groups` at; the median over the steps, so that a step in
// which this rank waited long for a late peer (its spans then include the wait) does not set
// it. A rank that steadily leads its peers still has some of their lateness in its spans, which
// a simulation of each rank (simulate_each_rank) adds again: not separated yet
// (docs/simulate.md). `step_starts`: when each measured step began, on the spans' clock; a span
// belongs to the step it was launched in. 0 when it cannot be told: nothing measured or priced
// (a pipeline without data or tensor parallelism has nothing inside a stage), or the profile
// lacks a collective the program issues.
double in_step_scale(const ir::Program& program, const Profile& profile, const std::vector<CollectiveSpan>& spans,
                     const std::vector<double>& step_starts, InStepGroups groups = InStepGroups::All);

// Sets `scale` on the profile's collectives in `groups`.
void apply_in_step_scale(Profile& profile, double scale, InStepGroups groups);

// The scale apply_in_step_scale set on `profile`'s collectives in `groups`: the first one's
// (1 where it set none).
double applied_in_step_scale(const Profile& profile, InStepGroups groups = InStepGroups::All);

}  // namespace loom
