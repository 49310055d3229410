// The autotuner's parts (issue #16 §2) on Slapo's Fig. 6 space and a synthetic evaluator whose
// best point is known: the space, the strategies, the tuner's budget and database, and the
// database surviving a sweep killed mid-write.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "autotuner/confirm.h"
#include "autotuner/heatmap.h"
#include "autotuner/successive_halving.h"
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
  // A file that is not a trial database is refused and left whole, however it ends: a one-line
  // JSON file, a one-line schedule without its newline, a whole trial line with a bad field.
  for (const std::string text : {std::string(R"({"name": "my notes"})") + "\n", std::string("sch.zero(stage=3)"),
                                 std::string(R"({"context": "synthetic"})")}) {
    CAPTURE(text);
    std::ofstream(path, std::ios::trunc) << text;
    CHECK_THROWS_WITH_AS(TrialDatabase(path, nullptr),
                         doctest::Contains((path + ":1 is not a trial").c_str()), UserError);
    CHECK(std::filesystem::file_size(path) == text.size());
  }
  // A sweep killed while writing its first trial: that line alone, dropped.
  std::ofstream(path, std::ios::trunc) << R"({"context":"synthetic","key":"micro_bat)";
  std::ostringstream first;
  CHECK(TrialDatabase(path, &first).trials("synthetic").empty());
  CHECK(first.str().find(path + ":1 is an unfinished trial") != std::string::npos);
  CHECK(std::filesystem::file_size(path) == 0);
  std::filesystem::remove(path);
}

namespace {

// Synthetic's objective measured with noise that shrinks as the effort grows (a real run's few
// steps against many): at the base effort the noise ranks micro_batch=8, ckpt_ratio=0.5 first.
class Noisy : public Synthetic {
 public:
  std::string context() const override { return "noisy scale=" + std::to_string(scale); }
  bool scale_effort(int s) override {
    scale = s;
    return true;
  }
  Trial evaluate(const Point& p) override {
    Trial t = Synthetic::evaluate(p);
    t.steps = 4 * scale;
    if (t.ok() && point_text(p) == "micro_batch=8, ckpt_ratio=0.5") t.objective += 40.0 / scale;
    return t;
  }
  int scale = 1;
};

}  // namespace

TEST_CASE("successive halving: every point at the base effort, the better half at twice it, ... until one, the true best") {
  SearchSpace space = space_of(kFig6);
  CHECK(halving_evaluations(18) == 18 + 9 + 5 + 3 + 2);
  CHECK(halving_evaluations(1) == 1);
  CHECK(halving_evaluations(3, 3) == 3);
  TrialDatabase db("", nullptr);
  Noisy e;
  TuneResult r = run_tuner(space, e, db, {"successive-halving", 0, 0});
  CHECK(r.evaluations == 37);
  REQUIRE(r.best.has_value());
  CHECK(point_text(r.best->knobs) == "micro_batch=4, ckpt_ratio=0.5");  // the noise misled the first rungs only
  CHECK(r.best->steps == 4 * 16);                                         // measured in the last rung, with 16x the steps
  std::map<int, size_t> per_rung;
  for (const Trial& t : r.trials) ++per_rung[t.steps];
  CHECK(per_rung == std::map<int, size_t>{{4, 18}, {8, 9}, {16, 5}, {32, 3}, {64, 2}});
  // Each rung's trials are their own in the database (its context names the effort).
  CHECK(db.trials("noisy scale=1").size() == 18);
  CHECK(db.trials("noisy scale=16").size() == 2);
  // The infeasible point never survives the first rung.
  for (const Trial& t : r.trials) CHECK((t.steps == 4 || point_text(t.knobs) != "micro_batch=8, ckpt_ratio=0.0"));
}

TEST_CASE("sim+run: real runs confirm the simulator's best points; the regret is how much slower its choice ran") {
  SearchSpace space = space_of(kFig6);
  TrialDatabase db("", nullptr);
  Synthetic sim;
  TuneResult predicted = run_tuner(space, sim, db, {"exhaustive", 0, 0});
  REQUIRE(point_text(predicted.best->knobs) == "micro_batch=4, ckpt_ratio=0.5");
  // The real machine disagrees: micro_batch=4, ckpt_ratio=0.25 (the simulator's second or third) runs 20% faster.
  class Runs : public Synthetic {
   public:
    std::string context() const override { return "runs"; }
    Trial evaluate(const Point& p) override {
      Trial t = Synthetic::evaluate(p);
      if (point_text(p) == "micro_batch=4, ckpt_ratio=0.25") t.objective = 120;
      if (point_text(p) == "micro_batch=4, ckpt_ratio=0.5") t.objective = 96;
      return t;
    }
  } runs;
  Confirmation c = confirm_best(predicted, 3, runs, db, {"exhaustive", 0, 0});
  REQUIRE(c.points.size() == 3);
  CHECK(point_text(c.points[0].predicted.knobs) == "micro_batch=4, ckpt_ratio=0.5");
  CHECK(c.points[0].measured.objective == 96);
  REQUIRE(c.best.has_value());
  CHECK(point_text(c.best->knobs) == "micro_batch=4, ckpt_ratio=0.25");
  REQUIRE(c.regret.has_value());
  CHECK(*c.regret == doctest::Approx(1 - 96.0 / 120.0));
  CHECK(c.evaluations == 3);
  CHECK(confirm_best(predicted, 3, runs, db, {"exhaustive", 0, 0}).evaluations == 0);  // the database has them
  // The simulator's choice does not run: the regret is 1.
  class Breaks : public Runs {
   public:
    std::string context() const override { return "breaks"; }
    Trial evaluate(const Point& p) override {
      Trial t = Runs::evaluate(p);
      if (point_text(p) == "micro_batch=4, ckpt_ratio=0.5") t.status = TrialStatus::Failed, t.objective = 0;
      return t;
    }
  } breaks;
  CHECK(confirm_best(predicted, 3, breaks, db, {"exhaustive", 0, 0}).regret == 1.0);
  // No confirming run is Ok: no best, no regret.
  class Fails : public Synthetic {
   public:
    std::string context() const override { return "fails"; }
    Trial evaluate(const Point& p) override {
      Trial t;
      t.knobs = p;
      t.message = "crashed";
      return t;
    }
  } fails;
  Confirmation none = confirm_best(predicted, 2, fails, db, {"exhaustive", 0, 0});
  CHECK(none.points.size() == 2);
  CHECK_FALSE(none.best.has_value());
  CHECK_FALSE(none.regret.has_value());
  // --max-trials counts the confirming runs.
  TrialDatabase fresh("", nullptr);
  Confirmation cut = confirm_best(predicted, 3, runs, fresh, {"exhaustive", 0, 2});
  CHECK(cut.points.size() == 2);
  CHECK(cut.budget_spent);
}

TEST_CASE("the heatmap: a cell per pair of values, Ok cells labelled, infeasible crossed, pruned hatched, the best outlined") {
  SearchSpace space = space_of(kFig6);
  TrialDatabase db("", nullptr);
  Synthetic e;
  TuneResult r = run_tuner(space, e, db, {"exhaustive", 0, 0});
  std::string svg = tune_heatmap_svg(r.trials, space.points(), {"micro_batch", "ckpt_ratio", "Fig. 6 <synthetic>"});
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count("<rect class=\"ok\"") == 17);
  CHECK(count("<rect class=\"infeasible\"") == 1);
  CHECK(count("<rect class=\"pruned\"") == 2);  // micro_batch 8 at ratios 0.75 and 1.0
  CHECK(count("<rect class=\"best\"") == 1);
  CHECK(svg.find(">100</text>") != std::string::npos);  // the best cell's label
  CHECK(svg.find("Fig. 6 &lt;synthetic&gt;") != std::string::npos);
  CHECK(svg.rfind("</svg>\n") == svg.size() - 7);
  // Only part of the space measured: the rest is blank.
  std::vector<Trial> some(r.trials.begin(), r.trials.begin() + 5);
  std::string part = tune_heatmap_svg(some, space.points(), {"ckpt_ratio", "micro_batch", ""});
  CHECK(part.find("class=\"unmeasured\"") != std::string::npos);
  CHECK_THROWS_AS(tune_heatmap_svg(r.trials, space.points(), {"micro_batch", "nosuch", ""}), std::invalid_argument);
}

TEST_CASE("successive halving keeps what earlier rungs found: a rung cut short by --max-trials, or where nothing ran") {
  SearchSpace space = space_of(kFig6);
  {
    TrialDatabase db("", nullptr);
    Noisy e;
    TuneResult r = run_tuner(space, e, db, {"successive-halving", 0, 19});  // the second rung's second point is over budget
    CHECK(r.budget_spent);
    REQUIRE(r.best.has_value());
    CHECK(r.best->steps == 8);  // the second rung's first point, which has more steps than the first rung's
  }
  {
    // Every run of the third rung (4x the steps) times out: the second rung's best is the answer.
    class TimesOut : public Noisy {
     public:
      Trial evaluate(const Point& p) override {
        Trial t = Noisy::evaluate(p);
        if (scale >= 4) t.status = TrialStatus::TimedOut, t.objective = 0;
        return t;
      }
    } e;
    TrialDatabase db("", nullptr);
    TuneResult r = run_tuner(space, e, db, {"successive-halving", 0, 0});
    REQUIRE(r.best.has_value());
    CHECK(r.best->steps == 8);
    CHECK(r.evaluations == 18 + 9 + 5);
  }
  // The simulator predicts once: halving over it is refused, as is a rate below 2.
  TrialDatabase db("", nullptr);
  Synthetic fixed;
  CHECK_THROWS_AS(run_tuner(space, fixed, db, {"successive-halving", 0, 0}), std::invalid_argument);
  CHECK_THROWS_AS(halving_evaluations(5, 1), std::invalid_argument);
}

TEST_CASE("the heatmap: failed cells grey, bool and string knobs, a knob declared in one branch only, the chosen trial outlined") {
  SearchSpace space = space_of(R"(let mode = tune("mode", ["plain", "fast"])
let pf = tune("prefetch", [false, true])
if mode == "fast" {
    let level = tune("level", [1, 2])
}
)");
  std::vector<Point> points = space.points();
  REQUIRE(points.size() == 6);  // plain x 2, fast x 2 x 2
  std::vector<Trial> trials;
  for (const Point& p : points) {
    Trial t;
    t.knobs = p;
    t.status = point_text(p).find("level=2") != std::string::npos ? TrialStatus::Failed : TrialStatus::Ok;
    t.objective = t.ok() ? 10 + static_cast<double>(trials.size()) : 0;
    trials.push_back(t);
  }
  std::string svg = tune_heatmap_svg(trials, points, {"mode", "prefetch", "", &trials[0]});
  CHECK(svg.find(">\"plain\"<") != std::string::npos);
  CHECK(svg.find(">true<") != std::string::npos);
  CHECK(svg.find("class=\"ok\"") != std::string::npos);
  // Over mode x level, the plain points (no level) are left out: two cells, one Ok, one failed (grey).
  std::string levels = tune_heatmap_svg(trials, points, {"mode", "level", ""});
  size_t cells = 0;
  for (size_t at = levels.find("<rect class="); at != std::string::npos; at = levels.find("<rect class=", at + 1)) ++cells;
  CHECK(cells == 2 + 1);  // two cells and the best's outline
  CHECK(levels.find("stroke=\"#888\"") != std::string::npos);
  // The chosen trial is outlined, not the highest objective.
  std::string chosen = tune_heatmap_svg(trials, points, {"mode", "prefetch", "", &trials[0]});
  size_t outline = chosen.find("class=\"best\"");
  REQUIRE(outline != std::string::npos);
  CHECK(chosen.find("y=\"100.0\"", outline) != std::string::npos);  // plain, prefetch=false: the bottom row
}
