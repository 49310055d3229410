// Collectives as they ran in measured steps (issue #15 §5): how long they kept a rank's
// collective stream busy, the measure `loom profile` sets its collective prices' in-step scale
// by. On CPU a collective queued in a step beside compute and other collectives takes longer
// than the sweep, timed one at a time, says (gloo's threads wait for cores the ranks' compute
// holds). Torch-free.
#pragma once

#include <optional>
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

// The collectives an in-step scale is measured on and applied to; never a pipeline's sends and
// receives, which are not on the collective stream. Why a pipeline has two: docs/simulate.md.
enum class InStepGroups {
  All,          // a one-stage program: every collective
  InsideStage,  // a pipeline's groups inside one stage (tp, dp, the sharding's): the mean over the ranks
  AcrossStages  // a pipeline's groups across stages (the shared gradients', the norm's, the loss's): the
                // least over the ranks, the closest to a figure without waiting for another stage
};

// The groups a program's scales are measured on: All for one stage, else both of the others.
std::vector<InStepGroups> in_step_groups(const ir::Program& program);

// Whether `groups` holds the collectives on a group of `role`.
bool measured_in_step(ir::Role role, InStepGroups groups);

// The in-step scale of `profile`'s collectives in `groups` for `program`: how long those
// collectives of a measured step (`spans`) kept the stream busy, over what the profile's sweeps
// price the program's collectives in `groups` at; the median over the steps, so that a step in
// which this rank waited long for a late peer (its spans then include the wait) does not set
// it. A rank that steadily leads its peers still has some of their lateness in its spans, which
// a simulation of each rank (simulate_each_rank) adds again: not separated yet
// (docs/simulate.md). `step_starts`: when each measured step began, on the spans' clock; a span
// belongs to the step it was launched in. 0 when it cannot be told: nothing measured or priced
// (a pipeline without data or tensor parallelism has nothing inside a stage), or the profile
// lacks a collective the program issues. InternalError for All on a pipeline.
double in_step_scale(const ir::Program& program, const Profile& profile, const std::vector<CollectiveSpan>& spans,
                     const std::vector<double>& step_starts, InStepGroups groups);

// Sets `scale` on the profile's collectives in `groups`.
void apply_in_step_scale(Profile& profile, double scale, InStepGroups groups);

// The scale apply_in_step_scale set on `profile`'s collectives in `groups`: the first one's;
// none where the profile has no collective in `groups`.
std::optional<double> applied_in_step_scale(const Profile& profile, InStepGroups groups);

}  // namespace loom
