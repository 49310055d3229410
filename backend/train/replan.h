// The two-level loop of deepcompile.txt §3 (Fig. 3) inside `loom run --replan-at K`: the run
// starts on the program planned without instruction times (the base placement, the memory-aware
// passes planning by sizes alone), measures its ops and optimizer step in steps 2..K (after the
// first, when the optimizer's states exist, as DeepCompile waits for), times the collectives of
// its own process groups, and lowers the step again with those times (profile_times.h): buckets
// sized for overlap, gathers fused where a fused one is cheaper. Every rank plans from the same
// measurements (reduced over the ranks) and checks that it got the same program; the executor
// switches to it between steps, on every rank at the same step, when the simulator, on those
// measurements, predicts it faster than the program it runs (LOOM_REPLAN_SWITCH=always, for
// tests: whenever it changed). Rank 0 logs what moved and the predicted and measured step time
// and peak. With --replan-every E the loop goes on: after steps K + E, K + 2E, ... it re-plans
// again on the steps measured since the last re-plan (not the first of them, the new program's
// warm-up), with the collectives timed again.
#pragma once

#include <cstdint>
#include <string>

#include "backend/train/rank_run.h"

namespace loom {

// The step after which a run whose --replan-at is unset (kReplanByDefault) re-plans: 3 when
// the run can re-plan (sharded, no mesh, not resumed, not profiling or recording), a pass of
// its schedule plans from measurements (prefetch(budget=auto), unshard(auto) or
// offload("optimizer", budget=auto) under a memory limit, bucket(size=auto) with or without
// one) and the run is long enough to use the new program (6 steps: measured 2-3, the new
// program's warm-up, two to run it); else 0. A --replan-at given is returned as it is.
int64_t default_replan_at(const TrainOptions& o, const RuntimePlan& plan, int64_t memory_limit);

// Whether the run re-plans after `steps_done` steps: K, and with --replan-every E, K + E, K + 2E, ...
bool replans_after(const TrainOptions& o, int64_t steps_done);

// After `steps_done` steps (replans_after holds). `result` holds the steps so far. Returns
// whether every rank switched to a new program; either way the next round measures afresh.
bool replan(RankRun& r, int64_t steps_done, const TrainResult& result);

// Rank 0's last word on a re-planned run: the measured step time and peak after the switch
// against before it; "" when the run did not switch programs (result.replanned_at).
std::string describe_replan_outcome(const TrainResult& result);

// Whether the op profiler measures this step (0-based): `loom profile`'s steps after its
// warm-up; a re-planning run's steps 2..K, then those of each round after its first.
bool measures_step(const TrainOptions& o, int64_t step);

// The steps done when the round that `steps_done` ends began: 0 for the first round (to K),
// else the re-plan before it. Its measured steps are round_start + 2 .. steps_done (1-based).
int64_t round_start(const TrainOptions& o, int64_t steps_done);

}  // namespace loom
