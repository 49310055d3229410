// One golden test per pass (as MLIR keeps one test file per pass): tests/golden/passes/<pass>.txt
// holds the IR text before and after the pass, on a small model, with the pipeline's earlier
// passes applied first. LOOM_UPDATE_GOLDEN=1 rewrites the files; review the diff.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "backend/lower/step_program.h"
#include "backend/passes/pass_pipeline.h"
#include "helpers.h"

using namespace loom;

namespace {

// Two blocks: h.0 = fc, proj; h.1 = fc, with 10-element weights, and a tied embedding used twice.
ir::OpTrace two_blocks() {
  ir::OpTrace t;
  t.model = "blocks";
  t.params = {{"wte", 40, 4}, {"h.0.fc.w", 10, 4}, {"h.0.proj.w", 10, 4}, {"h.1.fc.w", 10, 4}};
  t.forward = {{"wte", {"wte"}}, {"h.0.fc", {"h.0.fc.w"}}, {"h.0.proj", {"h.0.proj.w"}}, {"h.1.fc", {"h.1.fc.w"}}, {"head", {"wte"}}};
  return t;
}

// The run each pass is shown on: a sharding and the schedule's requests that make it act.
struct GoldenCase {
  ir::Sharding sharding;
  passes::PassInputs inputs;
  std::string described;
};

std::map<std::string, GoldenCase> golden_cases() {
  std::map<std::string, GoldenCase> cases;
  ir::Sharding zero3{2, 2, 2, 2};
  cases["insert_gather_release"] = {zero3, {}, "ZeRO-3 at dp 2"};
  cases["insert_gradient_reduction"] = {zero3, {}, "ZeRO-3 at dp 2"};
  cases["insert_parameter_broadcast"] = {{4, 2, 4, 4}, {}, "Lins (2, 4, 4) at dp 4"};
  passes::PassInputs compress;
  compress.compress = {{"h.0.fc", 10}};
  cases["compress"] = {zero3, compress, "ZeRO-3 at dp 2, h.0.fc compressed at ratio 10"};
  passes::PassInputs unshard;
  unshard.unshard = {{"h.0.proj"}};
  cases["unshard"] = {zero3, unshard, "ZeRO-3 at dp 2, h.0.proj unsharded"};
  passes::PassInputs bucket;
  bucket.buckets = {"h.0"};
  cases["bucket"] = {zero3, bucket, "ZeRO-3 at dp 2, h.0 bucketed"};
  passes::PassInputs sized;
  sized.sized_buckets = {{"h.0", 80, false}, {"h.1", 80, false}};
  cases["auto_bucket"] = {zero3, sized, "ZeRO-3 at dp 2, h.0 and h.1 in buckets of at most 80 bytes"};
  passes::PassInputs ddp;
  ddp.data_parallel_bucket_bytes = 80;
  cases["bucket_data_parallel"] = {{2, 1, 1, 1}, ddp, "plain data parallelism at dp 2, 80-byte buckets"};
  passes::PassInputs prefetch;
  prefetch.prefetch = {{"h.0", 0}, {"h.1", 0}};
  cases["prefetch"] = {zero3, prefetch, "ZeRO-3 at dp 2, h.0 and h.1 prefetched (auto)"};
  // The step starts with 70 elements at (2, 2, 2): 420 bytes (parameter shards and optimizer
  // slices); a gather in flight holds twice its parameter: 320 bytes (wte), 80 (the others).
  passes::PassInputs proactive;
  proactive.prefetch = {{"h.0", 0}, {"h.1", 0}};
  proactive.memory.limit = 420 + 320 + 160;
  cases["proactive_prefetch"] = {zero3, proactive, "ZeRO-3 at dp 2, h.0 and h.1 prefetched (auto) under a 900-byte limit"};
  passes::PassInputs selective;
  selective.unshard = {{"h.0", true}};
  selective.memory.limit = 1040;  // room for one of h.0's two 40-byte parameters kept (both need 1,060)
  cases["selective_unshard"] = {zero3, selective, "ZeRO-3 at dp 2, h.0 unsharded (auto) under a 1040-byte limit"};
  passes::PassInputs offload;
  offload.offload = true;
  offload.offload_budget = 8 * 30;  // the states of the slices of wte (20 elements), h.0.fc.w and h.0.proj.w (5 each) fit
  cases["offload_optimizer"] = {zero3, offload, "ZeRO-3 at dp 2, optimizer states offloaded beyond a 240-byte budget"};
  passes::PassInputs adaptive;
  adaptive.offload = adaptive.offload_automatic = true;
  adaptive.memory.limit = 1200;  // the walk peaks at 1,360 bytes
  cases["adaptive_offload"] = {zero3, adaptive, "ZeRO-3 at dp 2, offload(\"optimizer\", budget=auto) under a 1200-byte limit"};
  passes::PassInputs window;
  window.reductions_in_flight = 2;
  cases["window_reductions"] = {zero3, window, "ZeRO-3 at dp 2, two reductions in flight"};
  passes::PassInputs unpacked;
  unpacked.buckets = {"h.0"};
  cases["mark_unpacks"] = {zero3, unpacked, "ZeRO-3 at dp 2, h.0 bucketed: its gathers' waits copy the members out"};
  return cases;
}

}  // namespace

TEST_CASE("every pass has a golden test of the IR before and after it") {
  std::map<std::string, GoldenCase> cases = golden_cases();
  const auto& pipeline = pipeline_passes();
  for (size_t k = 0; k < pipeline.size(); ++k) {
    const std::string& name = pipeline[k].name;
    CAPTURE(name);
    REQUIRE_MESSAGE(cases.count(name), "add a golden case for pass " << name << " in tests/unit/pass_golden_test.cpp");
    const GoldenCase& c = cases[name];
    PassList before(pipeline.begin(), pipeline.begin() + static_cast<long>(k));
    ir::Program program = run_passes(ir::lower(two_blocks(), c.sharding), c.inputs, before, nullptr, {});
    std::string text = "# pass " + name + " on " + c.described + "\n# before\n" + program.to_text();
    ir::Program after = run_passes(program, c.inputs, {pipeline[k]}, nullptr, {});
    text += "# after\n" + after.to_text();
    std::string path = testing::source_path("tests/golden/passes/" + name + ".txt");
    if (std::getenv("LOOM_UPDATE_GOLDEN")) std::ofstream(path) << text;
    CHECK(text == testing::read_file(path));
  }
}
