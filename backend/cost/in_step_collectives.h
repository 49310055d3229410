// Collectives as they ran in measured steps (issue #15 §5): how long they kept a rank's
// collective stream busy, the measure `loom profile` sets its collective prices' in-step scale
// by. On CPU a collective queued in a step beside compute and other collectives takes longer
// than the sweep, timed one at a time, says (gloo's threads wait for cores the ranks' compute
// holds). Torch-free.
#pragma once

#include <vector>

namespace loom {

// One collective: when a rank launched it and when its transfer completed (milliseconds on
// one clock).
struct CollectiveSpan {
  double launched_ms = 0;
  double completed_ms = 0;
};

// The time the collectives kept one stream busy, each served one at a time in the order they
// completed, from its launch or the previous one's completion, whichever is later: what the
// simulator's collective stream charges (backend/sim/simulator.cpp). Any order of `spans`.
double serial_busy_ms(std::vector<CollectiveSpan> spans);

}  // namespace loom
