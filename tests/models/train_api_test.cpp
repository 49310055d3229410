// Training is a library call: run_training takes typed options and returns what the run did;
// the user's mistakes are UserErrors, not exit codes.
#include "doctest_torch.h"

#include <cmath>

#include "backend/train/launcher.h"
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
