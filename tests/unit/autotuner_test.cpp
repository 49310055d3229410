// The autotuner's parts (issue #16 §2) on Slapo's Fig. 6 space and a synthetic evaluator whose
// best point is known: the space, the strategies, the tuner's budget and database, and the
// database surviving a sweep killed mid-write.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "autotuner/tuner.h"
#include "helpers.h"

using namespace loom;
using namespace loom::tune;

namespace {

const char* kFig6 = R"(let bs = tune("micro_batch", [1, 2, 4, 8])
let ratio = tune("ckpt_ratio", [0.0, 0.25, 0.5, 0.75, 1.0])
constrain(bs * ratio <= 4)
)";

SearchSpace space_of(const std::string& text) {
  return SearchSpace([text](KnobSpace& knobs) {
    Schedule s(testing::fixture_tree("gpt2"));
    s.knobs() = knobs;
    SourceManager sources;
    try {
      Interpreter(s, sources).run_source("t.sched", text);
    } catch (...) {
      knobs = s.knobs();
      throw;
    }
    knobs = s.knobs();
  });
}

double knob(const Point& p, const std::string& name) {
  for (const auto& [n, v] : p)
    if (n == name) return v.as_number();
  return NAN;
}

// Best at micro_batch 4, ratio 0.5; a micro-batch of 8 at ratio 0 is over the memory limit.
class Synthetic : public Evaluator {
 public:
  std::string context() const override { return "synthetic"; }
  Trial evaluate(const Point& p) override {
    ++calls;
    Trial t;
    t.knobs = p;
    double bs = knob(p, "micro_batch"), r = knob(p, "ckpt_ratio");
    if (bs == 8 && r == 0) {
      t.status = TrialStatus::Infeasible;
      return t;
    }
    t.status = TrialStatus::Ok;
    t.objective = 100 - (std::log2(bs) - 2) * (std::log2(bs) - 2) * 10 - (r - 0.5) * (r - 0.5) * 40;
    return t;
  }
  int calls = 0;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_tune_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("the search space: Fig. 6's polygon, enumerated lazily; a pruned point resolves to nothing") {
  SearchSpace space = space_of(kFig6);
  size_t pruned = 0;
  std::vector<Point> points = space.points(SIZE_MAX, &pruned);
  CHECK(points.size() == 18);
  CHECK(pruned == 2);
  CHECK(point_text(points.front()) == "micro_batch=1, ckpt_ratio=0.0");
  CHECK(point_text(points.back()) == "micro_batch=8, ckpt_ratio=0.5");
  CHECK(point_settings(points.back()) == std::vector<std::string>{"micro_batch=8", "ckpt_ratio=0.5"});
  int visited = 0;
  space.for_each_point([&](const Point&) { return ++visited < 3; });
  CHECK(visited == 3);  // stopped when asked: the rest were never evaluated
  CHECK(!space.resolve({{"micro_batch", Value::integer(8)}, {"ckpt_ratio", Value::floating(1.0)}}).has_value());
  auto r = space.resolve({{"micro_batch", Value::integer(2)}});
  REQUIRE(r.has_value());
  CHECK(point_text(r->point) == "micro_batch=2, ckpt_ratio=0.0");  // an unnamed knob takes its first value
  CHECK(r->domains[1].size() == 5);
}

TEST_CASE("strategies: exhaustive and random measure every point (random in the seed's order); coordinate descent finds the best with fewer") {
  SearchSpace space = space_of(kFig6);
  TrialDatabase memory("", nullptr);
  Synthetic all;
  TuneResult exhaustive = run_tuner(space, all, memory, {"exhaustive", 0, 0});
  CHECK(exhaustive.evaluations == 18);
  REQUIRE(exhaustive.best.has_value());
  CHECK(point_text(exhaustive.best->knobs) == "micro_batch=4, ckpt_ratio=0.5");

  auto order = [&](uint64_t seed) {
    TrialDatabase db("", nullptr);
    Synthetic e;
    std::vector<std::string> out;
    for (const Trial& t : run_tuner(space, e, db, {"random", seed, 0}).trials) out.push_back(point_text(t.knobs));
    return out;
  };
  std::vector<std::string> seven = order(7);
  CHECK(seven == order(7));
  CHECK(seven != order(8));
  CHECK(std::set<std::string>(seven.begin(), seven.end()).size() == 18);

  for (uint64_t seed = 0; seed < 5; ++seed) {
    TrialDatabase db("", nullptr);
    Synthetic e;
    TuneResult cd = run_tuner(space, e, db, {"coordinate-descent", seed, 0});
    INFO("seed " << seed);
    REQUIRE(cd.best.has_value());
    CHECK(point_text(cd.best->knobs) == "micro_batch=4, ckpt_ratio=0.5");
    CHECK(cd.evaluations < 18);
    CHECK(static_cast<size_t>(e.calls) == cd.evaluations);  // a point asked for twice is evaluated once
  }
}

TEST_CASE("the tuner stops at --max-trials; a second sweep on the same database evaluates nothing again") {
  SearchSpace space = space_of(kFig6);
  std::string path = temp_path("budget.jsonl");
  std::filesystem::remove(path);
  {
    TrialDatabase db(path, nullptr);
    Synthetic e;
    TuneResult r = run_tuner(space, e, db, {"exhaustive", 0, 5});
    CHECK(r.budget_spent);
    CHECK(r.evaluations == 5);
    CHECK(e.calls == 5);
  }
  TrialDatabase db(path, nullptr);
  Synthetic e;
  TuneResult r = run_tuner(space, e, db, {"exhaustive", 0, 0});
  CHECK(r.evaluations == 13);  // the first five came from the database
  CHECK(r.trials.size() == 18);
  CHECK(r.trials[0].from_database);
  CHECK(!r.trials[5].from_database);
  // Another context (evaluator) shares the file but none of its trials.
  CHECK(db.trials("synthetic").size() == 18);
  CHECK(db.trials("another").empty());
  std::filesystem::remove(path);
}

TEST_CASE("the database survives a sweep killed mid-write: the partial last line is dropped with a warning, the rest kept") {
  SearchSpace space = space_of(kFig6);
  std::string path = temp_path("killed.jsonl");
  std::filesystem::remove(path);
  {
    TrialDatabase db(path, nullptr);
    Synthetic e;
    run_tuner(space, e, db, {"exhaustive", 0, 3});
  }
  std::ofstream(path, std::ios::app) << R"({"context": "synthetic", "key": "micro_batch=)";  // killed here
  std::ostringstream warnings;
  {
    TrialDatabase db(path, &warnings);
    CHECK(warnings.str() == "warning: " + path + ":4 is an unfinished trial (the sweep was stopped while writing it); dropped it\n");
    CHECK(db.trials("synthetic").size() == 3);
    Synthetic e;
    CHECK(run_tuner(space, e, db, {"exhaustive", 0, 0}).evaluations == 15);
  }
  TrialDatabase reread(path, &warnings);  // every line whole again
  CHECK(reread.trials("synthetic").size() == 18);

  std::ofstream(path) << "not json\n{}\n";
  CHECK_THROWS_WITH_AS(TrialDatabase(path, nullptr),
                       doctest::Contains((path + ":1 is not a trial").c_str()), UserError);
  std::filesystem::remove(path);
}
