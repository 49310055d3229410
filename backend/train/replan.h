// The two-level loop of deepcompile.txt §3 (Fig. 3) inside `loom run --replan-at K`: the run
// starts on the program planned without instruction times (the base placement, the memory-aware
// passes planning by sizes alone), measures its ops and optimizer step in steps 2..K (after the
// first, when the optimizer's states exist, as DeepCompile waits for), times the collectives of
// its own process groups, and lowers the step again with those times and the memory measured
// (profile_planning.h): buckets sized for overlap, gathers fused where a fused one is cheaper,
// parameters kept gathered where they fit. Every rank plans from the same
// measurements (reduced over the ranks) and checks that it got the same program; the executor
// switches to it between steps, on every rank at the same step, when the simulator, on those
// measurements, predicts it faster than the program it runs (for tests, LOOM_REPLAN_SWITCH=always:
// whenever it changed; =never: never). Rank 0 logs what moved and the predicted and measured step time
// and peak. The passes that read times come in groups (TimedGroup, pass.h: prefetching and
// bucketing, then unsharding); as deepcompile.txt's inner loop re-profiles after each, the k-th
// re-plan plans the k-th group of the schedule's from measurements, the groups before it as the
// running program planned them and the later ones by sizes, and without --replan-every the loop
// re-plans once per group, kInnerRoundSteps apart.
// With --replan-every E it goes on to the end of the run (the outer loop): after steps K + E,
// K + 2E, ... it re-plans again on the steps measured since the last re-plan (not the first of
// them, the new program's warm-up), with the collectives timed again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/train/rank_run.h"

namespace loom {

// Steps between the inner loop's rounds without --replan-every: the new program's warm-up and
// two measured steps.
constexpr int64_t kInnerRoundSteps = 3;

// Whether the loop can act on this run, and may: sharded, no mesh, not resumed, profiled or
// recorded (an explicit --replan-at with the last three is refused before the run starts).
bool can_replan(const TrainOptions& o, const RuntimePlan& plan);

// The groups of passes (TimedGroup) of this schedule that plan from measured times, in the
// order the loop plans them: Overlap where bucket(size=auto) is, or prefetch(budget=auto) under
// a limit (its fusion rule); Unshard where unshard(auto) is under a limit.
std::vector<TimedGroup> timed_groups_of(const RuntimePlan& plan, int64_t memory_limit);

// Why a run of `plan` has nothing for the loop to re-plan (it is not sharded, or has a mesh), or
// "" where it has: what a --replan-at given says at set-up, before the run keeps its program.
std::string nothing_to_replan(const RuntimePlan& plan);

// Resolves the loop into `o` at set-up: o.replan_at (default_replan_at; 0 on a run the loop
// cannot act on, can_replan, whatever --replan-at says) and, without
// --replan-every, on a run the loop can act on, the inner loop: a round per group of
// timed_groups_of (at least one), kInnerRoundSteps apart (o.replan_every, o.replan_rounds), as
// many as leave each new program a warm-up step and two to run on. With --replan-every the
// rounds have no end.
void plan_replan_rounds(TrainOptions& o, const RuntimePlan& plan, int64_t memory_limit);

// The last group the re-plan after `steps_done` plans from measurements: the k-th group of
// `groups` on the k-th re-plan, every group on the run's last re-plan and after the k-th.
TimedGroup timed_through(const TrainOptions& o, const std::vector<TimedGroup>& groups, int64_t steps_done);

// The groups an earlier round of the inner loop settled, which the re-plan after `steps_done`
// plans as the running program planned them (MemoryPlanning::settled; deepcompile.txt §3: a
// pass is planned on the profile of the program the passes before it left, and not again):
// the first k - 1 groups on the k-th re-plan while there are groups left to time, none after
// (the outer loop, --replan-every, plans every group again on each round's measurements). A
// round the run did not switch to settles nothing: its group stays as the running program has
// it (in the default loop, prefetching and bucketing by sizes where the first round was
// predicted slower), and the next round's group is planned on that program's measurements.
std::vector<TimedGroup> settled_groups(const TrainOptions& o, const std::vector<TimedGroup>& groups, int64_t steps_done);

// The step after which a run whose --replan-at is unset (kReplanByDefault) re-plans: 3 when
// the run can re-plan (sharded, no mesh, not resumed, not profiling or recording), a pass of
// its schedule plans from measured times (timed_groups_of: prefetch(budget=auto) or
// unshard(auto) under a memory limit, bucket(size=auto) with or without one; not
// offload("optimizer", budget=auto), which plans from the memory walk alone) and the run is
// long enough to use the new program (6 steps: measured 2-3, the new program's warm-up, two
// to run it); else 0. A --replan-at given is returned as it is.
int64_t default_replan_at(const TrainOptions& o, const RuntimePlan& plan, int64_t memory_limit);

// The header's line on the loop: when it re-plans, and what each round plans from measurements.
std::string describe_replan_rounds(const TrainOptions& o, const std::vector<TimedGroup>& groups);

// Whether the run re-plans after `steps_done` steps: K, and with a round every E steps (the
// inner loop's, or --replan-every's), K + E, K + 2E, ... while o.replan_rounds lasts; never
// after the run's last step.
bool replans_after(const TrainOptions& o, int64_t steps_done);

// After `steps_done` steps (replans_after holds). `result` holds the steps so far. Returns
// whether every rank switched to a new program; either way the next round measures afresh.
bool replan(RankRun& r, int64_t steps_done, const TrainResult& result);

// Rank 0's last word on a re-planned run: the measured step time and peak after the switch
// against before it; "" when the run did not switch programs (result.replanned_at).
std::string describe_replan_outcome(const TrainResult& result);

// Whether the op profiler measures this step (0-based): `loom profile`'s steps after its
// warm-up; a re-planning run's steps 2..K, then those of each round after its first; none
// after the last round.
bool measures_step(const TrainOptions& o, int64_t step);

// The steps done when the round that `steps_done` ends began: 0 for the first round (to K),
// else the re-plan before it. Its measured steps are round_start + 2 .. steps_done (1-based).
int64_t round_start(const TrainOptions& o, int64_t steps_done);

}  // namespace loom
