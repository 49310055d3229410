// Checkpoints on disk: DIR/step-000010/{model.pt, optim/rank-R.{pt,json}, rank_state/rank-R.{pt,json},
// rng.pt, trainer.json} and DIR/latest. model.pt is the consolidated model (it loads into the plain
// LibTorch model); optim/ holds the optimizer states by range, written by the ranks of the first
// optimizer block, so any later world size and sharding can resume from it (optimizer_checkpoint.h);
// rank_state/ holds per-rank state that does not reshard (TAGC's error-feedback accumulators).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include "backend/comm/communicator.h"
#include "backend/train/optimizer_checkpoint.h"
#include "backend/train/trainer.h"

namespace loom {

// "step-000010".
std::string checkpoint_step_name(int64_t step);

// The ranks a checkpoint was written by: per-rank state (TAGC's accumulators) is read back
// only by the same layout.
struct CheckpointLayout {
  int world = 1, tp = 1, pp = 1;
  bool operator==(const CheckpointLayout& o) const { return world == o.world && tp == o.tp && pp == o.pp; }
  std::string describe() const;  // "4 ranks (tp 2, pp 1)"
};

// Writes the checkpoint of `steps_done` under `options.save_dir`. Every rank calls it; rank 0
// writes `model` (the whole model, every parameter resident); ranks whose `writes_optimizer`
// write their optimizer ranges, every rank its `rank_state`. The directory appears whole or
// not at all: `latest` moves only once it is. A failed write (a full disk) is a UserError
// saying that the previous checkpoint is intact.
void write_checkpoint(const TrainOptions& options, comm::Group& world, int64_t steps_done, torch::nn::Module& model,
                      torch::optim::AdamW& optimizer, const std::vector<OptimizedRange>& ranges, bool writes_optimizer,
                      const CheckpointLayout& layout, const std::map<std::string, torch::Tensor>& rank_state);

// Loads `options.resume` (a checkpoint, or a --save directory: its latest) into the model and
// the random state; `params` are the model's unique parameters. Returns the checkpoint's folder
// and step. A missing checkpoint, or one of another model, is a UserError.
std::pair<std::filesystem::path, int64_t> load_model_checkpoint(const TrainOptions& options, torch::nn::Module& model,
                                                                const std::vector<torch::Tensor>& params);

// The ranks a checkpoint was written by, and this rank's per-rank state in it (empty when it
// has none).
CheckpointLayout checkpoint_layout(const std::filesystem::path& dir);
std::map<std::string, torch::Tensor> load_rank_state(const std::filesystem::path& dir, int rank);

}  // namespace loom
