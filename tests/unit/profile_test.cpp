// The profiler's torch-free half: the collective cost model (alpha-beta fit and table
// interpolation), the profile's JSON form, and the cache key and path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cost/collective_cost.h"
#include "backend/cost/in_step_collectives.h"
#include "backend/cost/instruction_cost.h"
#include "backend/cost/profile.h"
#include "backend/cost/module_profile_cost.h"
#include "backend/cost/step_estimate.h"
#include "backend/sim/profile_simulation.h"
#include "lang/diagnostics.h"
#include "helpers.h"

using namespace loom;

TEST_CASE("collectives in a step keep the stream busy one at a time, in the order they complete") {
  // Launched at 0, 1 and 2 ms, done at 3, 5 and 5.5: served 0-3, 3-5, 5-5.5.
  CHECK(serial_busy_ms({{2, 5.5}, {0, 3}, {1, 5}}) == doctest::Approx(5.5));
  // An idle gap (the third launched after the second completed) is not busy: 0-3, 3-5, 7-8.
  CHECK(serial_busy_ms({{0, 3}, {1, 5}, {7, 8}}) == doctest::Approx(6.0));
  CHECK(serial_busy_ms({}) == 0);
}

TEST_CASE("the alpha-beta fit recovers an exact line, and is least squares on noise") {
  // 50 us latency, 1 GB/s: 1e-6 ms per byte.
  std::vector<CollectiveSample> line;
  for (int64_t b : {4096, 65536, 1 << 20, 16 << 20}) line.push_back({b, 0.05 + 1e-6 * static_cast<double>(b)});
  AlphaBeta fit = fit_alpha_beta(line);
  CHECK(fit.alpha_ms == doctest::Approx(0.05).epsilon(1e-9));
  CHECK(fit.beta_ms_per_byte == doctest::Approx(1e-6).epsilon(1e-9));

  // Worked by hand: mean x 1.5, mean y 2.55, Sxy = Sxx = 5, so slope 1 and intercept 1.05.
  std::vector<CollectiveSample> noisy{{0, 1.2}, {1, 1.9}, {2, 2.9}, {3, 4.2}};
  AlphaBeta n = fit_alpha_beta(noisy);
  CHECK(n.beta_ms_per_byte == doctest::Approx(1.0));
  CHECK(n.alpha_ms == doctest::Approx(1.05));

  CHECK_THROWS_AS(fit_alpha_beta({{1024, 1.0}}), std::invalid_argument);
  CHECK_THROWS_AS(fit_alpha_beta({{1024, 1.0}, {1024, 2.0}}), std::invalid_argument);
  // A falling line is noise: latency and bandwidth are never negative.
  AlphaBeta falling = fit_alpha_beta({{0, 2.0}, {10, 1.0}});
  CHECK(falling.beta_ms_per_byte == 0);
}

TEST_CASE("a spike at a small size is lowered to the time of a larger one") {
  std::vector<CollectiveSample> s{{256, 0.3}, {4096, 4.5}, {16384, 0.4}, {65536, 0.6}, {262144, 0.5}, {1048576, 2.0}};
  drop_spikes(s);
  std::vector<double> ms;
  for (auto& x : s) ms.push_back(x.ms);
  CHECK(ms == std::vector<double>{0.3, 0.4, 0.4, 0.5, 0.5, 2.0});
}

TEST_CASE("predictions interpolate the table inside the sweep and follow the line outside it, capped below it") {
  std::vector<CollectiveSample> table{{1000, 1.0}, {2000, 3.0}, {4000, 4.0}};
  AlphaBeta fit{0.5, 0.001};
  CHECK(predict_ms(table, fit, 1000) == doctest::Approx(1.0));
  CHECK(predict_ms(table, fit, 1500) == doctest::Approx(2.0));
  CHECK(predict_ms(table, fit, 3000) == doctest::Approx(3.5));
  CHECK(predict_ms(table, fit, 4000) == doctest::Approx(4.0));
  CHECK(predict_ms(table, fit, 500) == doctest::Approx(1.0));      // 0.5 + 0.001 * 500
  CHECK(predict_ms(table, fit, 10000) == doctest::Approx(10.5));   // 0.5 + 0.001 * 10000
  CHECK(predict_ms({}, fit, 2000) == doctest::Approx(2.5));
  // An intercept above the smallest measurement (a fit dominated by large sizes): a smaller
  // message takes no longer than the smallest measured.
  AlphaBeta steep_start{3.0, 0.001};
  CHECK(predict_ms(table, steep_start, 500) == doctest::Approx(1.0));
  CHECK(predict_ms(table, steep_start, 10000) == doctest::Approx(13.0));
}

namespace {
// A profile of one op and one collective (an all-gather on `params`, timed alone).
Profile one_op_profile(const std::string& module) {
  Profile p;
  p.key = "k";
  p.device = "cpu";
  p.measured_steps = 3;
  p.optimizer_step_ms = 2.5;
  p.ops.push_back({module, 0.5, 1.25, 100, 200, 300, 400, {}, {}});
  CollectiveProfile c;
  c.collective = "all_gather";
  c.group = "params";
  c.group_size = 2;
  c.samples = {{4096, 0.1}, {8192, 0.2}};
  c.fit = fit_alpha_beta(c.samples);
  p.collectives.push_back(c);
  return p;
}
}  // namespace

TEST_CASE("a profile round-trips through JSON, and a foreign file is refused with a hint") {
  Profile p = one_op_profile("h.0.mlp.c_fc");
  CollectiveProfile c = p.collectives[0];
  c.beside_compute = true;  // the same collective timed beside compute: slower
  c.samples = {{4096, 0.3}, {8192, 0.6}};
  c.fit = fit_alpha_beta(c.samples);
  p.collectives.push_back(c);
  Profile q = Profile::from_json(p.to_json(), "p.json");
  CHECK(q.key == "k");
  CHECK(q.measured_steps == 3);
  CHECK(q.optimizer_step_ms == 2.5);
  CHECK(q.measured_step_ms == -1);  // not recorded
  p.measured_step_ms = 41.5;
  CHECK(Profile::from_json(p.to_json(), "p.json").measured_step_ms == 41.5);
  REQUIRE(q.ops.size() == 1);
  CHECK(q.ops[0].module == "h.0.mlp.c_fc");
  CHECK(q.ops[0].backward_ms == 1.25);
  CHECK(q.ops[0].backward_peak_bytes == 400);
  REQUIRE(q.collective("all_gather", "params", false) != nullptr);
  CHECK(q.collective("all_gather", "params", false)->predict_ms(6144) == doctest::Approx(0.15));
  CHECK(q.collective("all_gather", "params", true)->predict_ms(6144) == doctest::Approx(0.45));
  CHECK(q.collective("all_reduce", "params", false) == nullptr);
  q.collectives.pop_back();  // a profile of one regime (a GPU's) answers for both
  CHECK(q.collective("all_gather", "params", true)->predict_ms(6144) == doctest::Approx(0.15));
  // The measured steps' scale multiplies every prediction, and round-trips.
  p.collectives[0].in_step_scale = 2.5;
  Profile scaled = Profile::from_json(p.to_json(), "p.json");
  CHECK(scaled.collective("all_gather", "params", false)->in_step_scale == 2.5);
  CHECK(scaled.collective("all_gather", "params", false)->predict_ms(6144) == doctest::Approx(0.375));
  p.collectives[0].in_step_scale = 0;
  try {
    Profile::from_json(p.to_json(), "zero.json");
    FAIL("a scale of 0 was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message == "zero.json: `collectives[0] (all_gather on params).in_step_scale` must be positive, not 0.0");
    CHECK(e.diagnostic().hint == "write it again with `loom profile`");
  }

  try {
    Profile::from_json(R"({"format": "something-else"})", "other.json");
    FAIL("a foreign file was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message == "other.json is not a Loom profile of format 9");
    CHECK(e.diagnostic().hint == "write it again with `loom profile`");
  }
  CHECK_THROWS_WITH_AS(Profile::from_json("{", "broken.json"), doctest::Contains("broken.json is not a readable Loom profile"),
                       UserError);
}

TEST_CASE("a hostile profile (nested deeper than the stack, megabytes long, a directory) is refused, never a crash") {
  std::string good = one_op_profile("h.0.attn").to_json();
  auto refusal = [](const std::string& text) {
    try {
      Profile::from_json(text, "p.json");
    } catch (const UserError& e) {
      return e.diagnostic().message;
    }
    return std::string("accepted");
  };
  auto with = [&good](const std::string& from, const std::string& to) {
    size_t at = good.find(from);
    REQUIRE(at != std::string::npos);
    return good.substr(0, at) + to + good.substr(at + from.size());
  };
  REQUIRE(refusal(good) == "accepted");
  // Printed whole, a module nested 200,000 deep overflowed the stack (dump() recurses).
  std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK(refusal(with("\"h.0.attn\"", deep)).find("must be a string, not a list of 1 entry") != std::string::npos);
  std::string many = "[0";
  for (int i = 0; i < 100000; ++i) many += ",0";
  std::string elements = "\"optimizer_elements\": ";
  size_t at = good.find(elements);
  REQUIRE(at != std::string::npos);
  size_t end = good.find_first_of(",\n}", at + elements.size());
  CHECK(refusal(good.substr(0, at) + elements + many + "]" + good.substr(end)) ==
        "p.json: `optimizer_elements` must be a whole number of elements (0 or more), not a list of 100001 entries");
  CHECK(refusal(good.substr(0, at) + elements + "\"" + std::string(100000, 'x') + "\"" + good.substr(end)) ==
        "p.json: `optimizer_elements` must be a whole number of elements (0 or more), not \"" + std::string(60, 'x') + "\"...");
  CHECK(refusal(with("\"memory_limit_bytes\": 0", "\"memory_limit_bytes\": 18446744073709551615")) ==
        "p.json: `memory_limit_bytes` must be at most 9223372036854775807, not 18446744073709551615");
  // The parser's words, without nlohmann's tag.
  std::string broken = refusal("{");
  CHECK(broken.rfind("p.json is not a readable Loom profile: parse error at line 1, column 2: syntax error", 0) == 0);
  CHECK(broken.find("[json.exception") == std::string::npos);
  std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH_AS(load_profile(dir), ("the profile '" + dir + "' is a directory").c_str(), UserError);
}

TEST_CASE("a profile keeps each rank's own op times beside the slowest rank's, and times a copy on one rank") {
  Profile p;
  p.key = "k";
  p.device = "cpu";
  p.ops.push_back({"a", 3, 4, 10, 20, 30, 40, {3, 1}, {2, 4}});  // rank 0 is late in forward, rank 1 in backward
  p.ops.push_back({"b", 2, 2, 10, 20, 30, 40, {1, 2}, {2, 1}});
  Profile q = Profile::from_json(p.to_json(), "p.json");
  CHECK(q.ranks_timed() == 2);
  CHECK(q.ops[1].backward_ms_by_rank == std::vector<double>{2, 1});
  Profile on_rank_1 = q.as_timed_on(1);
  CHECK(on_rank_1.ops[0].forward_ms == 1);
  CHECK(on_rank_1.ops[0].backward_ms == 4);
  CHECK(on_rank_1.ops[1].forward_ms == 2);
  CHECK(on_rank_1.ops[0].backward_peak_bytes == 40);  // the memory figures stay the maxima
  CHECK_THROWS_AS(q.as_timed_on(2), InternalError);
  // Without every op's times on every rank (one rank, or an older profile) only the slowest's count.
  q.ops[1].forward_ms_by_rank.clear();
  CHECK(q.ranks_timed() == 0);
  Profile one_rank;
  one_rank.ops.push_back({"a", 3, 4, 10, 20, 30, 40, {}, {}});
  CHECK(Profile::from_json(one_rank.to_json(), "p.json").ranks_timed() == 0);
  CHECK(on_rank_1.ops[0].forward_ms_by_rank.empty());  // one rank's copy keeps no other rank's times

  // A file whose times by rank do not cover its world, op by op, is refused.
  p.key = "loom-profile-5 model=gpt:tiny world=2";
  p.ops[1].backward_ms_by_rank = {2};
  try {
    Profile::from_json(p.to_json(), "short.json");
    FAIL("times of one rank for a world of two were accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message ==
          "short.json: op 1 (`b`) has 2 forward and 1 backward times by rank, where every op needs 2 of each (one per rank of its world)");
    CHECK(e.diagnostic().hint == "write it again with `loom profile`");
  }
  p.ops[1].backward_ms_by_rank = {2, 1};
  p.key = "loom-profile-5 model=gpt:tiny world=4";
  CHECK_THROWS_WITH_AS(Profile::from_json(p.to_json(), "world4.json"),
                       doctest::Contains("world4.json: op 0 (`a`) has 2 forward and 2 backward times by rank, where every op needs 4"),
                       UserError);
}

TEST_CASE("each rank is simulated where the profile timed each and every collective spans them all") {
  Profile p;
  p.key = "k";
  p.device = "cpu";
  p.ops.push_back({"h.0.mlp.c_fc", 1, 2, 0, 0, 0, 0, {1, 0.5}, {2, 1}});
  auto program = [](int dp, ir::GroupRef group, int tp = 1) {
    ir::Program prog;
    prog.sharding.dp = dp;
    prog.mesh.tp = tp;
    ir::Instr in;
    in.kind = ir::OpKind::AllReduce;
    in.group = group;
    in.handle = 0;
    prog.instrs.push_back(in);
    return prog;
  };
  ir::Program data_parallel = program(2, {ir::Role::World, 2});
  CHECK(each_rank_simulable({data_parallel}, p));
  CHECK_FALSE(each_rank_simulable({data_parallel, data_parallel}, p));             // a pipeline's stages
  CHECK_FALSE(each_rank_simulable({program(4, {ir::Role::Params, 2})}, p));        // a sub-group, and a world of 4
  CHECK_FALSE(each_rank_simulable({program(2, {ir::Role::World, 2}, 2)}, p));      // tp 2 x dp 2: four ranks, two timed
  CHECK_FALSE(each_rank_simulable({program(2, {ir::Role::World, 1})}, p));         // no collective to meet at
  Profile older = p;
  older.ops[0].forward_ms_by_rank.clear();
  older.ops[0].backward_ms_by_rank.clear();
  CHECK_FALSE(each_rank_simulable({data_parallel}, older));  // only the slowest rank's times
  Profile many = p;
  many.ops[0].forward_ms_by_rank.assign(kMaxRanksSimulatedEach + 1, 1);
  many.ops[0].backward_ms_by_rank.assign(kMaxRanksSimulatedEach + 1, 1);
  int past_cap = kMaxRanksSimulatedEach + 1;
  CHECK_FALSE(each_rank_simulable({program(past_cap, {ir::Role::World, past_cap})}, many));  // too many: the representative
}

TEST_CASE("the cache key changes with everything the figures depend on, and names its file") {
  ProfileKeyInputs base{"gpt:tiny", "fsdp()", 2, 2, 4, 128, 1, "cpu", "fp32", 1};
  std::string key = profile_key(base);
  CHECK(key == profile_key(base));
  for (auto change : std::vector<std::function<void(ProfileKeyInputs&)>>{
           [](ProfileKeyInputs& k) { k.model = "gpt:50m"; }, [](ProfileKeyInputs& k) { k.schedule = "zero(stage=2)"; },
           [](ProfileKeyInputs& k) { k.world = 4; }, [](ProfileKeyInputs& k) { k.seq = 64; },
           [](ProfileKeyInputs& k) { k.micro_batch = 8; }, [](ProfileKeyInputs& k) { k.accum = 2; },
           [](ProfileKeyInputs& k) { k.device = "cuda"; }, [](ProfileKeyInputs& k) { k.threads = 2; },
           [](ProfileKeyInputs& k) { k.build = "another loom"; }, [](ProfileKeyInputs& k) { k.memory_limit = 1 << 30; }}) {
    ProfileKeyInputs k = base;
    change(k);
    CHECK(profile_key(k) != key);
  }
  std::string path = profile_cache_path("/c", "gpt:tiny", 2, key);
  CHECK(path.rfind("/c/gpt-tiny-w2-", 0) == 0);
  CHECK(path.size() == std::string("/c/gpt-tiny-w2-").size() + 16 + 5);

  // A cached profile is used only for its own key; a damaged one is measured again.
  auto dir = std::filesystem::temp_directory_path() / ("loom_profile_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Profile p;
  p.key = key;
  std::ofstream((dir / "p.json").string()) << p.to_json();
  CHECK(load_cached_profile((dir / "p.json").string(), key).has_value());
  CHECK(!load_cached_profile((dir / "p.json").string(), key + "x").has_value());
  std::ofstream((dir / "bad.json").string()) << "{";
  CHECK(!load_cached_profile((dir / "bad.json").string(), key).has_value());
  CHECK(!load_cached_profile((dir / "missing.json").string(), key).has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a profile prices a step's instructions: ops by forward order, collectives by role and bytes") {
  auto compute = [](const char* module, ir::Phase phase) {
    ir::Instr in;
    in.kind = ir::OpKind::Compute, in.phase = phase, in.module = module;
    return in;
  };
  ir::Program step;
  step.instrs = {compute("a", ir::Phase::Forward), compute("b", ir::Phase::Forward), compute("b", ir::Phase::Backward)};
  ir::Instr gather;
  gather.kind = ir::OpKind::AllGather, gather.phase = ir::Phase::Backward, gather.group = {ir::Role::Params, 2}, gather.bytes = 1500;
  step.instrs.push_back(gather);
  ir::Instr reduce = gather;
  reduce.kind = ir::OpKind::AllReduce, reduce.group = {ir::Role::Dp, 2};  // the profile has no world role: unpriced
  step.instrs.push_back(reduce);
  step.instrs.push_back(compute("a", ir::Phase::Backward));

  Profile p;
  p.ops = {{"a", 1.0, 10.0, 0, 0, 0, 0}, {"b", 2.0, 20.0, 0, 0, 0, 0}};
  CollectiveProfile c;
  c.collective = "all_gather", c.group = "params", c.group_size = 2;
  c.samples = {{1000, 1.0}, {2000, 2.0}};
  c.fit = fit_alpha_beta(c.samples);
  p.collectives.push_back(c);
  StepEstimate e = estimate_step(step, p, "p.json");
  REQUIRE(e.instruction_ms.size() == 6);
  CHECK(e.instruction_ms[0] == 1.0);
  CHECK(e.instruction_ms[1] == 2.0);
  CHECK(e.instruction_ms[2] == 20.0);
  CHECK(e.instruction_ms[3] == doctest::Approx(1.5));
  CHECK(e.instruction_ms[4] == -1);
  CHECK(e.instruction_ms[5] == 10.0);
  CHECK(e.forward_compute_ms == 3.0);
  CHECK(e.backward_compute_ms == 30.0);
  CHECK(e.collective_ms == doctest::Approx(1.5));
  CHECK(e.optimizer_ms == 0);

  // The in-step scale: two measured steps, from 0 and 10 ms, whose collectives kept the stream
  // busy 4 ms (0-2, then 2-4 for the one launched at 1 ms) and 2 ms (10-12), against the 1.5 ms
  // priced: the median of 2.67 and 1.33, 2. A pipeline's send, priced by the profile too, is not
  // on the collective stream: it does not count. Nothing measured: 0.
  ir::Instr send = gather;
  send.kind = ir::OpKind::Send, send.group = {ir::Role::StagePair, 2};
  step.instrs.push_back(send);
  CollectiveProfile transfer = c;
  transfer.collective = "send", transfer.group = "stage_pair";
  p.collectives.push_back(transfer);
  CHECK(estimate_step(step, p, "p.json").collective_ms == doctest::Approx(3.0));
  CHECK(in_step_scale(step, p, {{0, 2}, {1, 4}, {10, 12}}, {0, 10}, InStepGroups::All) == doctest::Approx(2.0));
  CHECK(in_step_scale(step, p, {}, {0, 10}, InStepGroups::All) == 0);
  // A step in which this rank waited 60 ms for a late peer does not set it: the median of 1.33,
  // 1.33 and 40.
  CHECK(in_step_scale(step, p, {{0, 2}, {10, 12}, {20, 80}}, {0, 10, 20}, InStepGroups::All) == doctest::Approx(2 / 1.5));
  // Applied to every collective but the transfers it left out.
  Profile scaled = p;
  apply_in_step_scale(scaled, 2.0, InStepGroups::All);
  CHECK(scaled.collectives[0].in_step_scale == 2.0);
  CHECK(scaled.collectives[1].in_step_scale == 1.0);
  CHECK(applied_in_step_scale(scaled, InStepGroups::All) == 2.0);
  step.instrs.pop_back();
  p.collectives.pop_back();

  // The optimizer step at its measured time, once a profile has one.
  ir::Instr update;
  update.kind = ir::OpKind::OptimizerStep, update.phase = ir::Phase::Step;
  step.instrs.push_back(update);
  CHECK(estimate_step(step, p, "p.json").instruction_ms.back() == -1);
  p.optimizer_step_ms = 4.0;
  e = estimate_step(step, p, "p.json");
  CHECK(e.instruction_ms.back() == 4.0);
  CHECK(e.optimizer_ms == 4.0);

  // The gradient norm: its own measured work, then its all-reduce where it has one (the 1,500
  // bytes here priced at 1.5 ms on `params`); unmeasured, only the all-reduce.
  CollectiveProfile all_reduce = c;
  all_reduce.collective = "all_reduce";
  p.collectives.push_back(all_reduce);
  ir::Instr norm;
  norm.kind = ir::OpKind::GradNorm, norm.phase = ir::Phase::Step, norm.group = {ir::Role::Params, 2}, norm.bytes = 1500;
  step.instrs.push_back(norm);
  CHECK(estimate_step(step, p, "p.json").instruction_ms.back() == doctest::Approx(1.5));
  double collectives_ms = estimate_step(step, p, "p.json").collective_ms;
  p.grad_norm_ms = 3.0;
  e = estimate_step(step, p, "p.json");
  CHECK(e.instruction_ms.back() == doctest::Approx(4.5));
  CHECK(e.instruction_own_ms.back() == 3.0);
  CHECK(e.grad_norm_ms == 3.0);
  CHECK(e.collective_ms == doctest::Approx(collectives_ms));  // the all-reduce alone
  CHECK(e.optimizer_ms == 4.0);
  CHECK(ModuleProfileCost(p).seconds(step, step.instrs.back()) == doctest::Approx(4.5e-3));
  // The in-step scale compares the collectives' measured busy time with their prices, not with
  // the norm's own work: 2 x (1.5 + 1.5) ms busy in one step is a scale of 2 with or without it.
  CHECK(in_step_scale(step, p, {{0, 6}}, {0}, InStepGroups::All) == doctest::Approx(2.0));
  step.instrs.back().group = {ir::Role::Params, 1};  // a group of one (data parallelism): the norm alone
  CHECK(estimate_step(step, p, "p.json").instruction_ms.back() == 3.0);
  CHECK(ModuleProfileCost(p).seconds(step, step.instrs.back()) == doctest::Approx(3e-3));
  CHECK(Profile::from_json(p.to_json(), "p.json").grad_norm_ms == 3.0);
  Profile unmeasured = p;
  unmeasured.grad_norm_ms = -1;  // --clip 0, or NCCL
  CHECK(Profile::from_json(unmeasured.to_json(), "p.json").grad_norm_ms == -1);
  step.instrs.pop_back();
  p.grad_norm_ms = -1;
  p.collectives.pop_back();

  // A wait that unpacks: its bytes at the profile's measured rate (4 MB at 2 GB/s: 2 ms), its own
  // work; where the profile measured none, nothing.
  ir::Instr unpacking;
  unpacking.kind = ir::OpKind::Wait, unpacking.phase = ir::Phase::Backward, unpacking.unpack_bytes = 4'000'000;
  step.instrs.push_back(unpacking);
  CHECK(estimate_step(step, p, "p.json").instruction_ms.back() == -1);
  p.unpack_gb_per_s = 2.0;
  p.unpack_bytes_per_step = 4'000'000;
  e = estimate_step(step, p, "p.json");
  CHECK(e.instruction_ms.back() == doctest::Approx(2.0));
  CHECK(e.instruction_own_ms.back() == doctest::Approx(2.0));
  CHECK(e.unpack_ms == doctest::Approx(2.0));
  // The simulator's cost: the wait's own host work, once (its collective's time is the collective's).
  std::vector<ir::Program> stages{step};
  std::vector<ir::Instr>& kept = stages[0].instrs;  // without its collectives, which this profile does not all measure
  kept.erase(std::remove_if(kept.begin(), kept.end(), [](const ir::Instr& in) { return ir::issued_collective(in) != nullptr; }), kept.end());
  ProfileCost priced(stages, p, "p.json");
  CHECK(priced.seconds(stages[0], stages[0].instrs.back()) == 0);
  CHECK(priced.own_seconds(stages[0], stages[0].instrs.back()) == doctest::Approx(2e-3));
  p.optimizer_elements = 123'456;
  Profile read = Profile::from_json(p.to_json(), "p.json");
  CHECK(read.optimizer_elements == 123'456);
  CHECK(read.unpack_gb_per_s == 2.0);
  CHECK(read.unpack_bytes_per_step == 4'000'000);
  // The limit the measured program was planned within: kept, and a whole number of bytes.
  p.memory_limit_bytes = 5'000'000;
  CHECK(Profile::from_json(p.to_json(), "p.json").memory_limit_bytes == 5'000'000);
  p.memory_limit_bytes = -1;
  CHECK(testing::refusal_of([&] { Profile::from_json(p.to_json(), "p.json"); }, "write it again with `loom profile`") ==
        "p.json: `memory_limit_bytes` must be a whole number of bytes (0 or more), not -1");
  p.memory_limit_bytes = 0;
  step.instrs.pop_back();
  p.unpack_gb_per_s = -1;

  std::swap(p.ops[0], p.ops[1]);
  try {
    estimate_step(step, p, "p.json");
    FAIL("a profile of other ops was accepted");
  } catch (const UserError& err) {
    CHECK(err.diagnostic().message == "p.json was measured for other compute ops: the step's op 0 is `a`, the profile's is `b`");
    CHECK(err.diagnostic().hint == "measure this model and schedule with `loom profile`");
  }
  std::swap(p.ops[0], p.ops[1]);
  // A profile of a longer or a shorter model: its ops past the step's, or the step's past its.
  auto refused = [&](const Profile& other) {
    return testing::refusal_of([&] { estimate_step(step, other, "p.json"); }, "measure this model and schedule with `loom profile`");
  };
  CHECK(refused(p) == "accepted");
  Profile longer = p;
  longer.ops.push_back(longer.ops.back());
  CHECK(refused(longer) == "p.json has 3 compute ops, the step 2");
  Profile shorter = p;
  shorter.ops.pop_back();
  CHECK(refused(shorter) == "p.json was measured for other compute ops: the step's op 1 is `b`, the profile's is `(none)`");
}

TEST_CASE("a pipeline measures two in-step scales: its groups inside a stage, and those across stages") {
  // A stage that gathers on a group inside it and sums on one across stages, each priced 1.5 ms,
  // and sends to the next stage (not on the collective stream).
  auto collective = [](ir::OpKind kind, ir::Role role) {
    ir::Instr in;
    in.kind = kind, in.phase = ir::Phase::Backward, in.group = {role, 2}, in.bytes = 1500;
    return in;
  };
  ir::Program stage;
  stage.mesh.pp = 2;
  stage.instrs = {collective(ir::OpKind::AllGather, ir::Role::Params), collective(ir::OpKind::AllReduce, ir::Role::Pipeline),
                  collective(ir::OpKind::Send, ir::Role::StagePair)};
  CollectiveProfile gather;
  gather.collective = "all_gather", gather.group = "params", gather.group_size = 2;
  gather.samples = {{1000, 1.0}, {2000, 2.0}};
  gather.fit = fit_alpha_beta(gather.samples);
  CollectiveProfile sum = gather, send = gather, peers = gather, world = gather;
  sum.collective = "all_reduce", sum.group = "pipeline";
  send.collective = "send", send.group = "stage_pair";
  peers.group = "grad_peers";  // the sweep's name of the grads role: inside a stage
  world.collective = "all_reduce", world.group = "world";
  Profile p;
  p.collectives = {gather, sum, send, peers, world};

  REQUIRE(in_step_groups(stage) == std::vector<InStepGroups>{InStepGroups::InsideStage, InStepGroups::AcrossStages});
  ir::Program one_stage = stage;
  one_stage.mesh.pp = 1;
  REQUIRE(in_step_groups(one_stage) == std::vector<InStepGroups>{InStepGroups::All});
  // Inside the stage: 4 ms busy (0-2, 2-4) in the step from 0 and 2 ms in the one from 10, the
  // median of 2.67 and 1.33. Across stages, whose spans include waiting for the other stage: 6
  // and 1 ms, the median of 4 and 0.67.
  std::vector<CollectiveSpan> spans = {{0, 2, ir::Role::Params}, {1, 4, ir::Role::Params}, {4, 10, ir::Role::Pipeline},
                                       {10, 12, ir::Role::Params}, {13, 14, ir::Role::World}};
  CHECK(in_step_scale(stage, p, spans, {0, 10}, InStepGroups::InsideStage) == doctest::Approx(2.0));
  CHECK(in_step_scale(stage, p, spans, {0, 10}, InStepGroups::AcrossStages) == doctest::Approx(7.0 / 3));
  CHECK_THROWS_AS(in_step_scale(stage, p, spans, {0, 10}, InStepGroups::All), InternalError);
  // Nothing inside a stage priced (a pipeline without data or tensor parallelism): not told.
  ir::Program across_only = stage;
  across_only.instrs.erase(across_only.instrs.begin());
  CHECK(in_step_scale(across_only, p, spans, {0, 10}, InStepGroups::InsideStage) == 0);

  CHECK(ir::role_named("optim_block") == ir::Role::OptimBlock);  // a profile's group names its role
  CHECK(ir::role_named("nodes") == ir::Role::None);
  CHECK(measured_in_step(ir::Role::World, InStepGroups::All));
  CHECK_FALSE(measured_in_step(ir::Role::World, InStepGroups::InsideStage));
  CHECK(measured_in_step(ir::Role::World, InStepGroups::AcrossStages));
  CHECK(measured_in_step(ir::Role::Dp, InStepGroups::InsideStage));
  CHECK_FALSE(measured_in_step(ir::Role::Dp, InStepGroups::AcrossStages));
  for (InStepGroups g : {InStepGroups::All, InStepGroups::InsideStage, InStepGroups::AcrossStages})
    CHECK_FALSE(measured_in_step(ir::Role::StagePair, g));

  // Each scale on its groups' collectives; the transfers keep the sweep's prices.
  apply_in_step_scale(p, 0.5, InStepGroups::InsideStage);
  apply_in_step_scale(p, 0.25, InStepGroups::AcrossStages);
  CHECK(p.collectives[0].in_step_scale == 0.5);   // params
  CHECK(p.collectives[1].in_step_scale == 0.25);  // pipeline
  CHECK(p.collectives[2].in_step_scale == 1.0);   // send
  CHECK(p.collectives[3].in_step_scale == 0.5);   // grad_peers
  CHECK(p.collectives[4].in_step_scale == 0.25);  // world
  CHECK(applied_in_step_scale(p, InStepGroups::InsideStage) == 0.5);
  CHECK(applied_in_step_scale(p, InStepGroups::AcrossStages) == 0.25);
  Profile transfers_only;
  transfers_only.collectives = {send};
  CHECK_FALSE(applied_in_step_scale(transfers_only, InStepGroups::InsideStage).has_value());
}

TEST_CASE("a GPU profile prices each compute's host part: its op's host time, a recompute's ops' sum; -1 where not measured") {
  auto instr = [](ir::OpKind kind, const char* module, ir::Phase phase) {
    ir::Instr in;
    in.kind = kind, in.phase = phase, in.module = module;
    return in;
  };
  std::vector<ir::Program> stages(1);
  stages[0].instrs = {instr(ir::OpKind::Compute, "h.a", ir::Phase::Forward), instr(ir::OpKind::Compute, "h.b", ir::Phase::Forward),
                      instr(ir::OpKind::Recompute, "h", ir::Phase::Backward), instr(ir::OpKind::Compute, "h.b", ir::Phase::Backward),
                      instr(ir::OpKind::Compute, "h.a", ir::Phase::Backward)};
  Profile p;
  p.device = "cuda";
  p.ops = {{"h.a", 1.0, 10.0, 0, 0, 0, 0}, {"h.b", 2.0, 20.0, 0, 0, 0, 0}};
  p.ops[0].forward_host_ms = 0.5, p.ops[0].backward_host_ms = -1;  // not seen (closed on another thread)
  p.ops[1].forward_host_ms = 3.0, p.ops[1].backward_host_ms = 4.0;
  ProfileCost priced(stages, p, "p.json");
  const std::vector<ir::Instr>& in = stages[0].instrs;
  CHECK(priced.seconds(stages[0], in[0]) == doctest::Approx(1e-3));  // the kernels' time stays the op's
  CHECK(priced.host_seconds(stages[0], in[0]) == doctest::Approx(0.5e-3));
  CHECK(priced.host_seconds(stages[0], in[1]) == doctest::Approx(3e-3));
  CHECK(priced.host_seconds(stages[0], in[2]) == doctest::Approx(3.5e-3));  // h.a's and h.b's forwards again
  CHECK(priced.host_seconds(stages[0], in[3]) == doctest::Approx(4e-3));
  CHECK(priced.host_seconds(stages[0], in[4]) == -1);  // the host holds for it, as on a CPU
  p.ops[1].forward_host_ms = -1;
  CHECK(ProfileCost(stages, p, "p.json").host_seconds(stages[0], in[2]) == -1);  // one op unseen: the sum is unknown
  // Written and read back; a CPU profile has none.
  Profile read = Profile::from_json(p.to_json(), "p.json");
  CHECK(read.ops[0].forward_host_ms == 0.5);
  CHECK(read.ops[0].backward_host_ms == -1);
  CHECK(read.ops[1].backward_host_ms == 4.0);
  Profile cpu;
  cpu.ops = {{"h.a", 1.0, 10.0, 0, 0, 0, 0}};
  CHECK(Profile::from_json(cpu.to_json(), "p.json").ops[0].forward_host_ms == -1);
  CHECK(cpu.to_json().find("host_ms") == std::string::npos);
}

TEST_CASE("a profile of a pipeline prices each stage: its ops found among every stage's, its transfers and mesh groups by role") {
  auto instr = [](ir::OpKind kind, const char* module, ir::Phase phase, ir::GroupRef group = {}, int64_t bytes = 0) {
    ir::Instr in;
    in.kind = kind, in.phase = phase, in.module = module, in.group = group, in.bytes = bytes;
    return in;
  };
  // The second of two stages: it runs the embedding (every stage does) and the last block.
  ir::Program stage;
  stage.mesh.tp = 2, stage.mesh.pp = 2, stage.mesh.stage = 1;
  stage.instrs = {instr(ir::OpKind::Compute, "emb", ir::Phase::Forward),
                  instr(ir::OpKind::Recv, "h.1", ir::Phase::Forward, {ir::Role::StagePair, 2}, 1000),
                  instr(ir::OpKind::Compute, "h.1", ir::Phase::Forward),
                  instr(ir::OpKind::TpAllReduce, "h.1", ir::Phase::Forward, {ir::Role::Tp, 2}, 2000),
                  instr(ir::OpKind::Compute, "h.1", ir::Phase::Backward),
                  instr(ir::OpKind::AllReduce, "", ir::Phase::Step, {ir::Role::Dp, 2}, 1000)};
  Profile p;
  p.ops = {{"emb", 1.0, 10.0, 0, 0, 0, 0}, {"h.0", 2.0, 20.0, 0, 0, 0, 0}, {"h.1", 3.0, 30.0, 0, 0, 0, 0}};
  auto line = [](const char* collective, const char* group, double ms_per_kb) {
    CollectiveProfile c;
    c.collective = collective, c.group = group, c.group_size = 2;
    c.samples = {{1000, ms_per_kb}, {2000, 2 * ms_per_kb}};
    c.fit = fit_alpha_beta(c.samples);
    return c;
  };
  p.collectives = {line("recv", "stage_pair", 1.0), line("all_reduce", "tp", 2.0), line("all_reduce", "world", 3.0)};
  StepEstimate e = estimate_step(stage, p, "p.json");
  CHECK(e.instruction_ms[0] == 1.0);
  CHECK(e.instruction_ms[1] == doctest::Approx(1.0));
  CHECK(e.instruction_ms[2] == 3.0);  // h.1, after h.0 which the first stage runs
  CHECK(e.instruction_ms[3] == doctest::Approx(4.0));
  CHECK(e.instruction_ms[4] == 30.0);
  CHECK(e.instruction_ms[5] == doctest::Approx(3.0));  // no dp group measured: the world plays it
  p.collectives.push_back(line("all_reduce", "dp", 5.0));
  CHECK(estimate_step(stage, p, "p.json").instruction_ms[5] == doctest::Approx(5.0));  // the mesh's own dp group

  // An op the profile does not have after the stage's earlier ones is another schedule's.
  stage.instrs[2].module = "h.2";
  try {
    estimate_step(stage, p, "p.json");
    FAIL("a profile without the stage's op was accepted");
  } catch (const UserError& err) {
    CHECK(err.diagnostic().message == "p.json was measured for other compute ops: the step's op 1 is `h.2`, the profile's is `h.0`");
  }
}

TEST_CASE("a profile whose figures no measurement gives is refused, naming the field") {
  nlohmann::json good = nlohmann::json::parse(one_op_profile("h.0.attn").to_json());
  auto refusal = [&good](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    try {
      Profile::from_json(j.dump(), "p.json");
    } catch (const UserError& e) {
      CHECK(e.diagnostic().hint == "write it again with `loom profile`");
      return e.diagnostic().message;
    }
    return std::string("accepted");
  };
  CHECK(refusal([](nlohmann::json&) {}) == "accepted");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0]["forward_ms"] = -5; }) ==
        "p.json: `ops[0] (h.0.attn).forward_ms` must be a number of 0 or more, not -5");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0]["backward_ms"] = "fast"; }) ==
        "p.json: `ops[0] (h.0.attn).backward_ms` must be a number of 0 or more, not \"fast\"");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0]["forward_peak_bytes"] = -1; }) ==
        "p.json: `ops[0] (h.0.attn).forward_peak_bytes` must be a whole number of bytes (0 or more), not -1");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0]["forward_host_ms"] = -5; }) ==
        "p.json: `ops[0] (h.0.attn).forward_host_ms` must be a number of 0 or more (or -1: not measured), not -5");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0]["forward_host_ms"] = -1; }) == "accepted");
  CHECK(refusal([](nlohmann::json& j) { j["optimizer_step_ms"] = -100; }) ==
        "p.json: `optimizer_step_ms` must be a number of 0 or more (or -1: not measured), not -100");
  CHECK(refusal([](nlohmann::json& j) { j["optimizer_elements"] = 1.5; }) ==
        "p.json: `optimizer_elements` must be a whole number of elements (0 or more), not 1.5");
  CHECK(refusal([](nlohmann::json& j) { j.erase("optimizer_elements"); }) == "accepted");  // written before it was recorded
  CHECK(refusal([](nlohmann::json& j) { j["measured_step_ms"] = -3; }) ==
        "p.json: `measured_step_ms` must be a number of 0 or more (or -1: not measured), not -3");
  CHECK(refusal([](nlohmann::json& j) { j.erase("measured_step_ms"); }) == "accepted");  // written before it was recorded
  CHECK(refusal([](nlohmann::json& j) { j.erase("ops"); }) == "p.json: `ops` is missing");
  CHECK(refusal([](nlohmann::json& j) { j["ops"][0] = 3; }) == "p.json: `ops[0]` must be a JSON object, not number");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["collective"] = "broadcastx"; }) ==
        "p.json: `collectives[0].collective` must be one of all_gather, reduce_scatter, all_reduce, send, recv, not \"broadcastx\"");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["group"] = "paramz"; }) ==
        "p.json: `collectives[0].group` must be one of params, grads, grad_peers, replicas, optim, optim_peers, optim_block, dp, world, "
        "tp, model, pipeline, stage_pair, not \"paramz\"");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["group_size"] = 0; }) ==
        "p.json: `collectives[0] (all_gather on params).group_size` must be a whole number of at least 1, not 0");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["samples_bytes_ms"] = {{8192, 0.2}, {4096, 0.1}}; }) ==
        "p.json: `collectives[0] (all_gather on params).samples_bytes_ms` is not sorted by bytes ([4096,0.1] comes after a larger sample)");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["samples_bytes_ms"][1][1] = -0.2; }) ==
        "p.json: `collectives[0] (all_gather on params).samples_bytes_ms ([8192,-0.2])` must be a number of 0 or more, not -0.2");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"][0]["beside_compute"] = 1; }) ==
        "p.json: `collectives[0] (all_gather on params).beside_compute` must be true or false, not 1");
  CHECK(refusal([](nlohmann::json& j) { j["ops"] = nlohmann::json::object(); }) == "p.json: `ops` must be a list, not {}");
  CHECK(refusal([](nlohmann::json& j) { j["collectives"] = 3; }) == "p.json: `collectives` must be a list, not 3");
  for (const char* sample : {"[4096]", "[-1,0.1]", "[1.5,0.1]", "3"})
    CHECK(refusal([&](nlohmann::json& j) { j["collectives"][0]["samples_bytes_ms"][0] = nlohmann::json::parse(sample); }) ==
          std::string("p.json: `collectives[0] (all_gather on params).samples_bytes_ms` holds ") + sample +
              ": each sample is [bytes, ms], bytes a whole number of 0 or more");
}
