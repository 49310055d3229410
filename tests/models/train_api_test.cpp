// Training is a library call: run_training takes typed options and returns what the run did;
// the user's mistakes are UserErrors, not exit codes.
#include "doctest_torch.h"

#include <cmath>

#include "backend/train/launcher.h"
#include "backend/train/replan.h"
#include "backend/train/trainer.h"
#include "lang/diagnostics.h"

using namespace loom;

namespace {
RankEnv one_rank() {
  RankEnv env;
  env.master_port = pick_free_port();
  return env;
}

TrainOptions tiny_run(int64_t steps, int64_t seq) {
  TrainOptions o;
  o.model = "gpt:tiny";
  o.steps = steps;
  o.seq = seq;
  o.micro_batch = 2;
  o.threads = 1;
  return o;
}
}  // namespace

TEST_CASE("run_training returns each step's metrics, the tokens, the time and the peak memory") {
  TrainOptions o = tiny_run(3, 16);
  TrainResult r = run_training(o, one_rank());
  REQUIRE(r.steps.size() == 3);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    CHECK(r.steps[i].step == static_cast<int64_t>(i) + 1);
    CHECK(std::isfinite(r.steps[i].loss));
    CHECK(r.steps[i].grad_norm > 0);  // clipping is on by default, so the norm is measured
    CHECK(r.steps[i].lr == doctest::Approx(learning_rate(o, static_cast<int64_t>(i))));
  }
  CHECK(r.final_loss() == r.steps.back().loss);
  CHECK(r.tokens == 3 * 2 * 16);
  CHECK(r.seconds > 0);
  CHECK(r.peak_bytes > 0);
  CHECK(r.checkpoint.empty());
}

TEST_CASE("run_training throws the user's mistakes as UserErrors") {
  TrainOptions o = tiny_run(1, 4096);
  CHECK_THROWS_WITH_AS(run_training(o, one_rank()), "--seq 4096 is longer than model gpt:tiny's context of 256 tokens", UserError);
}

TEST_CASE("--replan-every: which steps re-plan and which the op profiler measures, by hand") {
  TrainOptions o;
  o.replan_at = 3;
  o.replan_every = 3;
  std::vector<int64_t> replans, measured;
  for (int64_t s = 0; s < 12; ++s) {
    if (replans_after(o, s + 1)) replans.push_back(s + 1);
    if (measures_step(o, s)) measured.push_back(s);  // 0-based step indices
  }
  CHECK(replans == std::vector<int64_t>{3, 6, 9, 12});
  // 1-based steps 2-3, then 5-6, 8-9, 11-12: each round's first step (4, 7, 10) is the warm-up.
  CHECK(measured == std::vector<int64_t>{1, 2, 4, 5, 7, 8, 10, 11});
  CHECK(round_start(o, 3) == 0);
  CHECK(round_start(o, 6) == 3);
  CHECK(round_start(o, 9) == 6);
  o.replan_every = 0;  // once
  replans.clear(), measured.clear();
  for (int64_t s = 0; s < 12; ++s) {
    if (replans_after(o, s + 1)) replans.push_back(s + 1);
    if (measures_step(o, s)) measured.push_back(s);
  }
  CHECK(replans == std::vector<int64_t>{3});
  CHECK(measured == std::vector<int64_t>{1, 2});
}

TEST_CASE("the loop's rounds: one per group of passes the schedule plans from measurements, each timing one more group") {
  TrainOptions o;
  o.steps = 12;
  const int64_t limit = int64_t{600} << 20;
  RuntimePlan zero3;  // ZeRO-3 at world 2 with prefetch(budget=auto) and unshard(auto)
  zero3.factors.params = zero3.factors.grads = zero3.factors.optim = 2;
  zero3.prefetch.push_back(PrefetchRequest{});
  zero3.unshard.push_back(UnshardRequest{"h.0", true});
  std::vector<TimedGroup> groups = timed_groups_of(zero3, limit);
  CHECK((groups == std::vector<TimedGroup>{TimedGroup::Overlap, TimedGroup::Unshard}));
  CHECK(timed_groups_of(zero3, 0).empty());  // without a limit neither plans from times
  auto replans = [](const TrainOptions& run) {
    std::vector<int64_t> at;
    for (int64_t s = 1; s <= run.steps; ++s)
      if (replans_after(run, s)) at.push_back(s);
    return at;
  };
  // The inner loop: after step 3 prefetching and bucketing from measurements, after step 6
  // unsharding too, on the measurements of the program the first round chose; then no more.
  TrainOptions inner = o;
  plan_replan_rounds(inner, zero3, limit);
  CHECK(inner.replan_at == 3);
  CHECK(replans(inner) == std::vector<int64_t>{3, 6});
  CHECK(timed_through(inner, groups, 3) == TimedGroup::Overlap);
  CHECK(timed_through(inner, groups, 6) == kLastTimedGroup);
  // The second round plans unsharding alone: prefetching and bucketing as the first settled them.
  CHECK(settled_groups(inner, groups, 3).empty());
  CHECK((settled_groups(inner, groups, 6) == std::vector<TimedGroup>{TimedGroup::Overlap}));
  std::vector<int64_t> measured;
  for (int64_t s = 0; s < inner.steps; ++s)
    if (measures_step(inner, s)) measured.push_back(s);
  CHECK(measured == std::vector<int64_t>{1, 2, 4, 5});  // 1-based 2-3 and 5-6; nothing after the last round
  CHECK(describe_replan_rounds(inner, groups).find("after steps 3 and 6,") != std::string::npos);
  // Too short for the second round to leave its program a warm-up step and two to run on (9
  // steps): the one re-plan times every group.
  for (int64_t steps : {6, 7, 8}) {
    CAPTURE(steps);
    TrainOptions short_run = o;
    short_run.steps = steps;
    plan_replan_rounds(short_run, zero3, limit);
    CHECK(replans(short_run) == std::vector<int64_t>{3});
    CHECK(timed_through(short_run, groups, 3) == kLastTimedGroup);
    CHECK(settled_groups(short_run, groups, 3).empty());
    CHECK(describe_replan_rounds(short_run, groups).find("after step 3,") != std::string::npos);
  }
  TrainOptions nine = o;
  nine.steps = 9;
  plan_replan_rounds(nine, zero3, limit);
  CHECK(replans(nine) == std::vector<int64_t>{3, 6});
  // A run the loop cannot act on (a mesh; a recording run) does not re-plan, whatever
  // --replan-at says (set-up says why for a mesh: nothing_to_replan).
  RuntimePlan mesh = zero3;
  mesh.tp = 2;
  TrainOptions asked = o;
  asked.replan_at = 3;
  plan_replan_rounds(asked, mesh, limit);
  CHECK(replans(asked).empty());
  CHECK(nothing_to_replan(mesh) == "meshes are not re-planned yet");
  TrainOptions recording = o;
  recording.replan_at = 3, recording.record = "records";
  plan_replan_rounds(recording, zero3, limit);
  CHECK(replans(recording).empty());  // no profiler measures its steps: a re-plan would have none
  // --replan-every 4: a group more each round, then every group, to the end of the run.
  TrainOptions outer = o;
  outer.replan_at = 3, outer.replan_every = 4;
  plan_replan_rounds(outer, zero3, limit);
  CHECK(replans(outer) == std::vector<int64_t>{3, 7, 11});
  CHECK(timed_through(outer, groups, 3) == TimedGroup::Overlap);
  CHECK(timed_through(outer, groups, 7) == kLastTimedGroup);
  // Once every group is timed, each round plans every group again on its own measurements.
  CHECK((settled_groups(outer, groups, 7) == std::vector<TimedGroup>{TimedGroup::Overlap}));
  CHECK(settled_groups(outer, groups, 11).empty());
  // One group (bucket(size=auto) alone): one round, as before.
  RuntimePlan buckets;
  buckets.factors = zero3.factors;
  buckets.sized_buckets.push_back(BucketRequest{"h.0", 0, true});
  TrainOptions once = o;
  plan_replan_rounds(once, buckets, 0);
  CHECK((timed_groups_of(buckets, 0) == std::vector<TimedGroup>{TimedGroup::Overlap}));
  CHECK(replans(once) == std::vector<int64_t>{3});
}

TEST_CASE("--replan-at unset: the loop runs where a pass of the schedule plans from measurements, by hand") {
  TrainOptions o;
  o.steps = 10;
  RuntimePlan zero3;  // ZeRO-3 at world 2 with prefetch(budget=auto)
  zero3.factors.params = zero3.factors.grads = zero3.factors.optim = 2;
  zero3.prefetch.push_back(PrefetchRequest{});  // budget 0: auto
  const int64_t limit = int64_t{600} << 20;
  CHECK(default_replan_at(o, zero3, limit) == 3);
  // prefetch(budget=auto) without a limit prefetches one block ahead: nothing to measure for.
  CHECK(default_replan_at(o, zero3, 0) == 0);
  // bucket(size=auto) sizes its buckets for overlap from measured times, limit or none.
  RuntimePlan buckets = zero3;
  buckets.sized_buckets.push_back(BucketRequest{});
  buckets.sized_buckets.back().automatic = true;
  CHECK(default_replan_at(o, buckets, 0) == 3);
  // Too short to run the new program: re-plan after 3, its warm-up, two steps on it.
  o.steps = 5;
  CHECK(default_replan_at(o, zero3, limit) == 0);
  o.steps = 6;
  CHECK(default_replan_at(o, zero3, limit) == 3);
  // Runs the loop cannot act on, or must not: not sharded, a mesh, a resume, a profile, a record.
  RuntimePlan replicated = zero3;
  replicated.factors = ir::Sharding{};
  CHECK(default_replan_at(o, replicated, limit) == 0);
  RuntimePlan mesh = zero3;
  mesh.tp = 2;
  CHECK(default_replan_at(o, mesh, limit) == 0);
  TrainOptions resumed = o, profiled = o, recorded = o;
  resumed.resume = "ckpt";
  profiled.profile_out = "profile.json";
  recorded.record = "records";
  CHECK(default_replan_at(resumed, zero3, limit) == 0);
  CHECK(default_replan_at(profiled, zero3, limit) == 0);
  CHECK(default_replan_at(recorded, zero3, limit) == 0);
  // A schedule without an auto pass.
  RuntimePlan plain = zero3;
  plain.prefetch.clear();
  CHECK(default_replan_at(o, plain, limit) == 0);
  // offload("optimizer", budget=auto) plans from the memory walk, no times: nothing to measure for.
  RuntimePlan offloaded = plain;
  offloaded.offload = offloaded.offload_automatic = true;
  CHECK(default_replan_at(o, offloaded, limit) == 0);
  // Given, it is kept: 0 turns the loop off, K re-plans after K.
  o.replan_at = 0;
  CHECK(default_replan_at(o, zero3, limit) == 0);
  o.replan_at = 4;
  CHECK(default_replan_at(o, plain, 0) == 4);
}
