// tune() and constrain(): defaults, --set, and the search space as data (Slapo Fig. 6).
#include <doctest/doctest.h>

#include "autotuner/space.h"
#include "helpers.h"

using namespace loom;
using loom::testing::evaluate;

namespace {
const char* kFig6 = R"(let bs = tune("micro_batch", [1, 2, 4, 8])
let ratio = tune("ckpt_ratio", [0.0, 0.25, 0.5, 0.75, 1.0])
constrain(bs * ratio <= 4)
)";
}

TEST_CASE("a knob takes its first value without a tuner") {
  auto e = evaluate(std::string(kFig6) + "print(bs, ratio)\n");
  CHECK(e->printed == "1 0.0\n");
  REQUIRE(e->schedule->knobs().knobs().size() == 2);
  CHECK(e->schedule->knobs().knobs()[1].domain.size() == 5);
  REQUIRE(e->schedule->knobs().constraints().size() == 1);
  CHECK(e->schedule->knobs().constraints()[0].text == "bs * ratio <= 4");
}

TEST_CASE("--set picks a value from the domain; a value outside it is refused") {
  auto s = std::make_unique<Schedule>(testing::fixture_tree("gpt2"));
  s->knobs().set_override("micro_batch", "4");
  s->knobs().set_override("ckpt_ratio", "0.5");
  SourceManager sources;
  std::ostringstream out;
  InterpreterOptions o;
  o.print_to = &out;
  Interpreter(*s, sources, o).run_source("t.sched", std::string(kFig6) + "print(bs, ratio)\n");
  CHECK(out.str() == "4 0.5\n");

  auto bad = std::make_unique<Schedule>(testing::fixture_tree("gpt2"));
  bad->knobs().set_override("micro_batch", "3");
  CHECK_THROWS_WITH_AS(Interpreter(*bad, sources, o).run_source("t.sched", kFig6),
                       "--set micro_batch=3 is not in the knob's domain [1, 2, 4, 8]", UserError);
}

TEST_CASE("a violated constraint is an error naming the knob values") {
  auto s = std::make_unique<Schedule>(testing::fixture_tree("gpt2"));
  s->knobs().set_override("micro_batch", "8");
  s->knobs().set_override("ckpt_ratio", "1.0");
  SourceManager sources;
  CHECK_THROWS_WITH_AS(Interpreter(*s, sources).run_source("t.sched", kFig6),
                       "constraint 'bs * ratio <= 4' does not hold for micro_batch=8, ckpt_ratio=1.0", ConstraintViolation);
}

TEST_CASE("the search space is a polygon: constraints prune, dependent domains are honoured") {
  auto space_of = [](const std::string& text) {
    size_t pruned = 0;
    auto configs = tune::SearchSpace(
        [&](KnobSpace& knobs) {
          Schedule s(testing::fixture_tree("gpt2"));
          s.knobs() = knobs;
          SourceManager sources;
          std::ostringstream sink;
          InterpreterOptions o;
          o.print_to = &sink;
          try {
            Interpreter(s, sources, o).run_source("t.sched", text);
          } catch (...) {
            knobs = s.knobs();
            throw;
          }
          knobs = s.knobs();
        })
        .points(1000, &pruned);
    return std::make_pair(configs, pruned);
  };
  // 4 x 5 = 20 points; bs * ratio <= 4 removes (8, 0.75) and (8, 1.0).
  auto [configs, pruned] = space_of(kFig6);
  CHECK(configs.size() == 18);
  CHECK(pruned == 2);
  // A domain that depends on an earlier knob: ratios offered shrink as the batch grows.
  auto [dependent, none_pruned] = space_of(R"(let bs = tune("bs", [1, 2, 4])
let ratio = tune("ratio", range(0, 5 - bs))
)");
  CHECK(dependent.size() == 4 + 3 + 1);
  CHECK(none_pruned == 0);
}

TEST_CASE("--set of an undeclared knob lists the declared ones") {
  auto s = std::make_unique<Schedule>(testing::fixture_tree("gpt2"));
  s->knobs().set_override("nosuch", "1");
  SourceManager sources;
  std::ostringstream out;
  InterpreterOptions o;
  o.print_to = &out;
  Interpreter(*s, sources, o).run_source("t.sched", kFig6);
  try {
    s->knobs().check_overrides_used();
    FAIL("an undeclared knob was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message == "--set names knob 'nosuch', which the schedule never declares with tune(...)");
    CHECK(e.diagnostic().hint == "declared knobs: [\"micro_batch\", \"ckpt_ratio\"]");
  }
  auto none = std::make_unique<Schedule>(testing::fixture_tree("gpt2"));
  none->knobs().set_override("bs", "1");
  CHECK_THROWS_WITH_AS(none->knobs().check_overrides_used(),
                       "--set names knob 'bs', which the schedule never declares with tune(...)", UserError);
}
