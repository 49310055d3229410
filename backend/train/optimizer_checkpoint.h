// Sharded optimizer checkpoints that reshard. Whatever the sharding, each tensor the optimizer
// updates is a range of the flat (padded) tensor of one parameter, or of its tensor-parallel
// part: the whole under data parallelism, a 1/s_os slice under ZeRO-1/2 and the sharded
// executor. The ranks of the first optimizer block of each data-parallel group (which together
// hold every range once) each write DIR/optim/rank-R.pt with the AdamW states of their ranges
// and DIR/optim/rank-R.json naming the ranges and the parts they belong to. Loading at any
// world size, sharding or mesh puts each parameter's states together whole from the files,
// then takes the loader's part and range, so 2 -> 4 -> 1 ranks, ZeRO-3 -> ZeRO-1, or
// tp 2 x dp 2 -> dp 4 -> tp 2 x pp 2 resume exactly.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

namespace loom {

struct OptimizedRange {
  std::string param;      // parameter name (named_parameters)
  int64_t numel = 0;      // the element count of the parameter (or of its part)
  int64_t offset = 0;     // start of the range in the flat padded parameter (or part)
  torch::Tensor tensor;   // the tensor the optimizer updates (range length = its numel)
  // Tensor parallelism: the range lies in part `part` of `parts` equal slices of the parameter
  // along `axis` (-1: the whole parameter). `shape`: the whole parameter's.
  std::vector<int64_t> shape;
  int64_t axis = -1;
  int parts = 1, part = 0;
};

// Writes this rank's file pair under dir/optim. Every range must belong to `optimizer`.
void save_optimizer_ranges(const std::filesystem::path& dir, int rank, const std::vector<OptimizedRange>& ranges,
                           torch::optim::AdamW& optimizer);

// Fills `optimizer`'s states for `ranges` from the files under dir/optim. Throws a UserError
// when a range's parameter is missing from the checkpoint or a part of it is not covered.
void load_optimizer_ranges(const std::filesystem::path& dir, const std::vector<OptimizedRange>& ranges,
                           torch::optim::AdamW& optimizer);

}  // namespace loom
