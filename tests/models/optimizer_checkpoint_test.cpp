// Optimizer checkpoints by range (backend/train/optimizer_checkpoint.h), in one process: states
// saved whole load into sharded slices (one lying wholly in the padding) and into
// tensor-parallel parts, and back.
#include "doctest_torch.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>
#include <unistd.h>

#include "backend/torch_compat.h"
#include "backend/train/checkpoint_io.h"
#include "backend/train/optimizer_checkpoint.h"
#include "lang/diagnostics.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

// An AdamW over `tensors` after one step (gradients 1, 2, 3, ...), so its states are set.
std::unique_ptr<torch::optim::AdamW> stepped(const std::vector<torch::Tensor>& tensors) {
  auto opt = std::make_unique<torch::optim::AdamW>(tensors, torch::optim::AdamWOptions(0.1));
  for (auto& t : tensors) t.mutable_grad() = torch::arange(t.numel(), torch::kFloat).view_as(t) + 1;
  opt->step();
  return opt;
}

}  // namespace

TEST_CASE("optimizer ranges reshard: whole -> four 1/4 slices of a padded 5-element parameter, one all padding") {
  fs::path dir = fs::temp_directory_path() / ("loom_optim_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  torch::Tensor whole = torch::zeros({5}, torch::requires_grad());
  auto saver = stepped({whole});
  save_optimizer_ranges(dir, 0, {{"w", 5, 0, whole, {5}}}, *saver);
  // s_os = 4: padded to 8, slices of 2 at offsets 0, 2, 4, 6 (the last holds only padding).
  std::vector<torch::Tensor> slices;
  std::vector<OptimizedRange> ranges;
  for (int k = 0; k < 4; ++k) {
    slices.push_back(torch::zeros({2}, torch::requires_grad()));
    ranges.push_back({"w", 5, 2 * k, slices.back(), {5}});
  }
  auto loader = stepped(slices);
  load_optimizer_ranges(dir, ranges, *loader);
  torch::Tensor saved = compat::adamw_state(*saver, whole).exp_avg();
  for (int k = 0; k < 4; ++k) {
    torch::Tensor got = compat::adamw_state(*loader, slices[k]).exp_avg();
    int64_t n = std::max<int64_t>(0, std::min<int64_t>(2, 5 - 2 * k));
    if (n == 0) continue;  // the slice in the padding loaded nothing (and did not throw)
    CHECK(torch::equal(got.narrow(0, 0, n), saved.narrow(0, 2 * k, n)));
  }
  fs::remove_all(dir);
}

TEST_CASE("optimizer ranges reshard across tensor-parallel parts: two column slices -> whole -> two row slices") {
  fs::path dir = fs::temp_directory_path() / ("loom_optim_tp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A 4 x 6 parameter split along axis 1 into two 4 x 3 parts, saved by two "ranks".
  std::vector<torch::Tensor> parts{torch::zeros({4, 3}, torch::requires_grad()), torch::zeros({4, 3}, torch::requires_grad())};
  auto saver = stepped(parts);
  for (int t = 0; t < 2; ++t) {
    OptimizedRange r{"w", 12, 0, parts[t], {4, 6}, 1, 2, t};
    save_optimizer_ranges(dir, t, {r}, *saver);
  }
  torch::Tensor expected = torch::cat({compat::adamw_state(*saver, parts[0]).exp_avg(), compat::adamw_state(*saver, parts[1]).exp_avg()}, 1);
  // Whole, on one rank.
  torch::Tensor whole = torch::zeros({4, 6}, torch::requires_grad());
  auto one = stepped({whole});
  load_optimizer_ranges(dir, {{"w", 24, 0, whole, {4, 6}}}, *one);
  CHECK(torch::equal(compat::adamw_state(*one, whole).exp_avg(), expected));
  // Split the other way: rows.
  torch::Tensor rows = torch::zeros({2, 6}, torch::requires_grad());
  auto other = stepped({rows});
  load_optimizer_ranges(dir, {{"w", 12, 0, rows, {4, 6}, 0, 2, 1}}, *other);
  CHECK(torch::equal(compat::adamw_state(*other, rows).exp_avg(), expected.narrow(0, 2, 2)));
  // Another model's parameter shape is refused.
  CHECK_THROWS_WITH_AS(load_optimizer_ranges(dir, {{"w", 24, 0, torch::zeros({24}, torch::requires_grad()), {24}}}, *one),
                       doctest::Contains("with another shape than this model's"), UserError);
  fs::remove_all(dir);
}

TEST_CASE("a damaged checkpoint is a user error naming its file, not an internal error") {
  fs::path dir = fs::temp_directory_path() / ("loom_optim_damaged_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  torch::Tensor whole = torch::zeros({4}, torch::requires_grad());
  auto saver = stepped({whole});
  save_optimizer_ranges(dir, 0, {{"w", 4, 0, whole, {4}}}, *saver);
  fs::path index = dir / "optim" / "rank-0.json";
  nlohmann::json good = nlohmann::json::parse(std::ifstream(index));
  auto load_with = [&](const std::string& text) {
    std::ofstream(index, std::ios::trunc) << text;
    load_optimizer_ranges(dir, {{"w", 4, 0, whole, {4}}}, *saver);
  };
  std::string named = "checkpoint file " + index.string() + " is damaged: ";
  CHECK_THROWS_WITH_AS(load_with("{\"param\": "), (named + "it is not JSON").c_str(), UserError);
  nlohmann::json wrong_type = good;
  wrong_type[0]["offset"] = "0";
  CHECK_THROWS_WITH_AS(load_with(wrong_type.dump()), doctest::Contains((named + "[json.exception.type_error").c_str()), UserError);
  nlohmann::json no_parts = good;
  no_parts[0]["parts"] = 0;  // it divided a shape by zero
  CHECK_THROWS_WITH_AS(load_with(no_parts.dump()),
                       doctest::Contains((named + "range 0 (offset 0, length ").c_str()), UserError);
  CHECK_THROWS_WITH_AS(load_with(no_parts.dump()), doctest::Contains("part 0 of 0 along axis -1) is not part of a parameter"), UserError);
  nlohmann::json past_the_shape = good;
  past_the_shape[0]["axis"] = 3;
  past_the_shape[0]["parts"] = 2;
  CHECK_THROWS_WITH_AS(load_with(past_the_shape.dump()), doctest::Contains("along axis 3) is not part of a parameter"), UserError);
  // The states' archive missing.
  fs::remove(dir / "optim" / "rank-0.pt");
  CHECK_THROWS_WITH_AS(load_with(good.dump()),
                       doctest::Contains(("checkpoint file " + (dir / "optim" / "rank-0.pt").string() + " is damaged: ").c_str()), UserError);
  // trainer.json: missing, not JSON, a world of none.
  fs::path trainer = dir / "trainer.json";
  CHECK_THROWS_WITH_AS(checkpoint_layout(dir), ("checkpoint file " + trainer.string() + " is damaged: it is missing or cannot be read").c_str(),
                       UserError);
  std::ofstream(trainer) << R"({"world": 0, "step": 3, "model": "gpt:tiny"})";
  CHECK_THROWS_WITH_AS(checkpoint_layout(dir), doctest::Contains("its world, tp and pp must be at least 1"), UserError);
  std::ofstream(trainer, std::ios::trunc) << R"({"world": "2"})";
  CHECK_THROWS_WITH_AS(checkpoint_layout(dir), doctest::Contains("trainer.json is damaged: [json.exception.type_error"), UserError);
  fs::remove_all(dir);
}
