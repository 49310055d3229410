// The C++ fluent API and the .sched interpreter produce the same traces; traces replay.
#include <doctest/doctest.h>

#include "helpers.h"
#include "lang/trace.h"
#include "primitives/all.h"
#include "primitives/registry.h"
#include "verifier/schedule_rules.h"

using namespace loom;
using loom::testing::evaluate;
using loom::testing::fixture_tree;
using loom::testing::read_file;
using loom::testing::source_path;

TEST_CASE("fluent API calls record the same trace as the .sched text") {
  Schedule sch(fixture_tree("gpt2"), {4, 0});
  sch.mesh(2, 2);
  for (auto& b : sch["h.*"].elements()) {
    b["attn.c_attn"].shard({"weight", "bias"}, 0).sync("bwd_post", "all_reduce");
    b["attn.c_proj"].shard({"weight"}, 1).sync("fwd_post", "all_reduce");
    b["mlp.c_fc"].shard({"weight", "bias"}, 0).sync("bwd_post", "all_reduce");
    b["mlp.c_proj"].shard({"weight"}, 1).sync("fwd_post", "all_reduce");
  }
  sch["h.5"].pipeline_split();
  sch.verify();
  auto text = evaluate(read_file(source_path("examples/gpt_tp.sched")), "gpt2", {4, 0}, source_path("examples/gpt_tp.sched"));
  // The .sched file shards c_proj with a string ("weight"), the C++ call with a list: same effect, different spelling.
  REQUIRE(sch.trace().size() == text->schedule->trace().size());
  for (size_t i = 0; i < sch.trace().size(); ++i) {
    CHECK(sch.trace()[i].target == text->schedule->trace()[i].target);
    CHECK(sch.trace()[i].primitive == text->schedule->trace()[i].primitive);
  }
  // C++ call sites are the locations of fluent calls.
  CHECK(sch.trace()[0].where.file.find("schedule_api_test.cpp") != std::string::npos);
}

TEST_CASE("fluent API errors are user errors at the C++ call site") {
  Schedule sch(fixture_tree("gpt2"));
  int line = __LINE__ + 1;
  CHECK_THROWS_AS(sch["h.0.mlp.c_fc"].sync("fwd_post", "all_reduce"), UserError);
  try {
    sch["h.0.mlp.c_fc"].sync("fwd_post", "all_reduce");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().range.file.find("schedule_api_test.cpp") != std::string::npos);
    CHECK(e.diagnostic().range.begin.line == line + 2);
    CHECK(e.diagnostic().message == "sync on `h.0.mlp.c_fc`: module is synced in mode fwd_post but was never sharded");
  }
}

TEST_CASE("whole-schedule rules point at the C++ call site of a fluent schedule") {
  Schedule sch(fixture_tree("gpt2"), {4, 0});
  sch.mesh(2, 1);
  sch["h.0.mlp.c_fc"].shard({"weight", "bias"}, 0);
  int line = __LINE__ + 1;
  sch["h.0.mlp"].unshard(Value::boolean(true));
  try {
    check_schedule_rules(sch);
    FAIL("unshard of a tensor-sharded module was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().range.file.find("schedule_api_test.cpp") != std::string::npos);
    CHECK(e.diagnostic().range.begin.line == line);
    CHECK(e.diagnostic().message.find("unshard on `h.0.mlp` keeps its parameters whole on every rank, but shard at ") == 0);
  }
}

TEST_CASE("shorthands expand to shard_states with the Lins factors") {
  auto z1 = evaluate("sch.zero(stage=1)\n", "gpt2", {8, 0});
  CHECK(z1->schedule->trace()[0].to_sched() == "sch.shard_states(params=1, grads=1, optim=8)");
  auto z2 = evaluate("sch.zero(stage=2)\n", "gpt2", {8, 0});
  CHECK(z2->schedule->trace()[0].to_sched() == "sch.shard_states(params=1, grads=8, optim=8)");
  auto f = evaluate("sch.fsdp()\n", "gpt2", {8, 0});
  CHECK(f->schedule->trace()[0].to_sched() == "sch.shard_states(params=8, grads=8, optim=8)");
  // Lins Table III: LLaMA-13B on 1024 GPUs, 8 per node.
  auto lins = evaluate(read_file(source_path("examples/llama_lins.sched")), "llama-13b", {1024, 8});
  CHECK(lins->schedule->sharding().params == 4);
  CHECK(lins->schedule->sharding().optim == 8);
}

namespace {
// Every example and stdlib schedule, with the run each is written for.
struct Case {
  const char* file;
  const char* model;
  ScheduleContext ctx;
};
const Case kCases[] = {
    {"examples/gpt_tuned.sched", "gpt2", {8, 0}},
    {"examples/gpt_tp.sched", "gpt2", {4, 0}},
    {"examples/gpt_tp2.sched", "gpt:tiny", {2, 0}},
    {"examples/llama_lins.sched", "llama-13b", {1024, 8}},
    {"stdlib_schedules/zero3.sched", "gpt:tiny", {2, 0}},
    {"stdlib_schedules/zero1.sched", "gpt2", {8, 0}},
    {"stdlib_schedules/zero2.sched", "gpt2", {8, 0}},
    {"stdlib_schedules/ddp.sched", "gpt2", {2, 0}},
    {"stdlib_schedules/checkpoint_all.sched", "gpt2", {1, 0}},
};
}  // namespace

TEST_CASE("traces round-trip through canonical .sched text and through JSON") {
  for (auto& c : kCases) {
    CAPTURE(c.file);
    std::string path = source_path(c.file);
    auto original = evaluate(read_file(path), c.model, c.ctx, path);
    const auto& trace = original->schedule->trace();
    REQUIRE(!trace.empty());

    std::string text = trace_to_sched(*original->schedule);
    auto from_text = evaluate(text, c.model, c.ctx, "replayed.sched");
    CHECK(compare_traces(trace, from_text->schedule->trace()) == "");

    Schedule from_json(fixture_tree(c.model), c.ctx);
    replay(directives_from_json(trace_to_json(*original->schedule)), from_json);
    CHECK(compare_traces(trace, from_json.trace()) == "");
  }
}

TEST_CASE("golden traces of the examples") {
  for (auto& c : kCases) {
    CAPTURE(c.file);
    std::string path = source_path(c.file);
    auto e = evaluate(read_file(path), c.model, c.ctx, path);
    std::string name = std::string(c.file);
    name = name.substr(name.find('/') + 1);
    std::string golden_path = source_path("tests/golden/traces/" + name);
    std::string actual = trace_to_sched(*e->schedule);
    if (std::getenv("LOOM_UPDATE_GOLDEN")) std::ofstream(golden_path) << actual;
    CHECK(actual == read_file(golden_path));
  }
}

// A primitive defined only here: registered with the one macro, usable from .sched and C++.
LOOM_PRIMITIVE(test_tag) {
  return loom::PrimitiveSpec("test_tag", "Attach a label to a module (test-only).")
      .on(loom::Scope::NonRoot)
      .param("label", loom::ParamType::string(), "the label")
      .param("weight", loom::ParamType::floating(), loom::Value::floating(1.0), "a number")
      .check([](const loom::PrimitiveCall& c) {
        if (c.string_arg("label").empty()) c.fail_at(c.arg_range("label"), "label must not be empty", "pass a name");
      });
}

TEST_CASE("a user-registered primitive works from .sched files and the fluent API") {
  auto e = evaluate("sch[\"h.0.mlp\"].test_tag(\"hot\", weight=2)\n");
  REQUIRE(e->schedule->trace().size() == 1);
  CHECK(e->schedule->trace()[0].to_sched() == "sch[\"h.0.mlp\"].test_tag(label=\"hot\", weight=2.0)");

  Schedule sch(fixture_tree("gpt2"));
  CallArgs args;
  args.positional.push_back({Value::string("cold"), {}});
  sch["h.1.mlp"].apply("test_tag", args);
  CHECK(sch.trace()[0].to_sched() == "sch[\"h.1.mlp\"].test_tag(label=\"cold\", weight=1.0)");
  CHECK(testing::error_of("sch[\"h.0\"].test_tag(\"\")\n") == "test.sched:1:21: test_tag on `h.0`: label must not be empty");
  CHECK(testing::error_of("sch.test_tag(\"x\")\n").find("applies to a module, not the whole model") != std::string::npos);
}

TEST_CASE("docs/primitives.md documents every built-in primitive with its exact signature") {
  register_builtin_primitives();
  std::string doc = read_file(source_path("docs/primitives.md"));
  for (auto& spec : PrimitiveRegistry::global().all()) {
    if (spec.name == "test_tag") continue;
    CAPTURE(spec.name);
    CHECK(doc.find("### `" + signature(spec) + "`") != std::string::npos);
  }
}

TEST_CASE("a clone records on its own: the original keeps its directives, states and warnings") {
  Schedule sch(fixture_tree("gpt2"), {8, 0});
  sch.mesh(2, 1);
  sch["h.0"].checkpoint();
  std::unique_ptr<Schedule> copy = sch.clone();
  CHECK(trace_to_sched(*copy) == trace_to_sched(sch));
  CHECK(copy->mesh_state().tp == 2);
  CHECK(copy->dp() == 4);
  copy->shard_states(2, 2, 4);
  (*copy)["h.0"].checkpoint();  // twice: the clone knows the first one, and warns
  CHECK(copy->trace().size() == 4);
  CHECK(sch.trace().size() == 2);
  CHECK(copy->sharding().params == 2);
  CHECK(sch.sharding().params == 1);
  CHECK(copy->warnings().size() == sch.warnings().size() + 1);
  CHECK(copy->directives_on("h.0", "checkpoint").size() == 2);
  CHECK(sch.directives_on("h.0", "checkpoint").size() == 1);
}
