// Sharded optimizer checkpoints that reshard. Whatever the sharding, each tensor the optimizer
// updates is a range of one parameter's flat (padded) tensor: the whole parameter under data
// parallelism, a 1/s_os slice under ZeRO-1/2 and the sharded executor. The ranks of the first
// optimizer block (world ranks 0..s_os-1, which together hold every range once) each write
// DIR/optim/rank-R.pt with the AdamW states of their ranges and DIR/optim/rank-R.json naming
// the ranges. Loading at any world size or sharding reads the files whose ranges overlap the
// loader's and copies the overlaps, so 2 -> 4 -> 1 ranks, or ZeRO-3 -> ZeRO-1, resume exactly.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

namespace loom {

struct OptimizedRange {
  std::string param;      // parameter name (named_parameters)
  int64_t numel = 0;      // the parameter's element count
  int64_t offset = 0;     // start of the range in the flat padded parameter
  torch::Tensor tensor;   // the tensor the optimizer updates (range length = its numel)
};

// Writes this rank's file pair under dir/optim. Every range must belong to `optimizer`.
void save_optimizer_ranges(const std::filesystem::path& dir, int rank, const std::vector<OptimizedRange>& ranges,
                           torch::optim::AdamW& optimizer);

// Fills `optimizer`'s states for `ranges` from the files under dir/optim. Throws a UserError
// when a range's parameter is missing from the checkpoint or a part of it is not covered.
void load_optimizer_ranges(const std::filesystem::path& dir, const std::vector<OptimizedRange>& ranges,
                           torch::optim::AdamW& optimizer);

}  // namespace loom
