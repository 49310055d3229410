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
// when a rank launched it and when its transfer completed (milliseconds on one clock).
struct CollectiveSpan {
  double launched_ms = 0;
  double completed_ms = 0;
};

// The time the collectives kept one stream busy, each served one at a time in the order they
// completed, from its launch or the previous one's completion, whichever is later: close to
// what the simulator's collective stream charges (backend/sim/simulator.cpp serves them in
// program order, from their issue or the stream's last end). Any order of `spans`.
double serial_busy_ms(std::vector<CollectiveSpan> spans);

// The in-step scale of `profile`'s collectives for `program`: how long the collectives of a
// measured step (`spans`, pipeline sends and receives not among them) kept the stream busy,
// over what the profile's sweeps price the program's collectives at (sends and receives left
// out alike); the median over the steps, so that a step in which this rank waited long for a
// late peer (its spans then include the wait) does not set it. A rank that steadily leads its
// peers still has some of their lateness in its spans, which a simulation of each rank
// (simulate_each_rank) adds again: not separated yet (docs/simulate.md). `step_starts`: when each
// measured step began, on the spans' clock; a span belongs to the step it was launched in. 0
// when it cannot be told: nothing measured or priced, the profile lacks a collective the program
// issues, or a pipeline's stage (its spans include waiting for the other stages, which the
// simulator models itself).
double in_step_scale(const ir::Program& program, const Profile& profile, const std::vector<CollectiveSpan>& spans,
                     const std::vector<double>& step_starts);

// Sets `scale` on the profile's collectives, the pipeline's sends and receives excepted (what
// in_step_scale measured, and what it did not).
void apply_in_step_scale(Profile& profile, double scale);

}  // namespace loom
