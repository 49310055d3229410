#include "backend/train/mesh_model.h"

#include <unordered_set>

#include <torch/types.h>
#include <torch/utils.h>

namespace loom {

std::pair<std::vector<torch::Tensor>, std::vector<std::string>> unique_parameters(torch::nn::Module& model) {
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::unordered_set<const void*> seen;
  for (auto& p : model.named_parameters())
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) {
      params.push_back(p.value());
      names.push_back(p.key());
    }
  return {params, names};
}

void keep_stage_parameters(const PipelineStages& stages, int stage, std::vector<torch::Tensor>& params,
                           std::vector<std::string>& names) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> kept;
  std::vector<std::string> kept_names;
  for (size_t i = 0; i < params.size(); ++i) {
    int s = stages.stage_of_param(names[i]);
    if (s >= 0 && s != stage) {
      params[i].set_(torch::empty({0}, params[i].options()));
      continue;
    }
    kept.push_back(params[i]);
    kept_names.push_back(names[i]);
  }
  params = std::move(kept);
  names = std::move(kept_names);
}

void gather_whole_model(comm::Group& world, const MeshLayout& at, torch::nn::Module& model, const TensorParallel& tensor_parallel,
                        const PipelineStages* stages, torch::nn::Module* whole) {
  torch::NoGradGuard no_grad;
  auto [mine, names] = unique_parameters(model);  // every rank lists them alike: freed ones too
  std::vector<torch::Tensor> out;
  if (whole) out = unique_parameters(*whole).first;
  for (size_t i = 0; i < names.size(); ++i) {
    int stage = stages ? std::max(stages->stage_of_param(names[i]), 0) : 0;
    int axis = tensor_parallel.split_axis(names[i]);
    std::vector<torch::Tensor> slices;
    for (int t = 0; t < (axis >= 0 ? at.tp : 1); ++t) {
      int holder = at.rank_at(stage, 0, t);
      comm::PointToPointOptions tag{static_cast<int>(i)};
      if (world.rank() == holder && holder != 0) comm::send(world, mine[i].detach().contiguous(), 0, tag).wait();
      if (world.rank() != 0) continue;
      if (holder == 0) {
        slices.push_back(mine[i].detach().to(torch::kCPU));
        continue;
      }
      std::vector<int64_t> shape = out[i].sizes().vec();
      if (axis >= 0) shape[static_cast<size_t>(axis)] /= at.tp;
      torch::Tensor slice = torch::empty(shape, mine[i].options());
      comm::recv(world, slice, holder, tag).wait();
      slices.push_back(slice.to(torch::kCPU));
    }
    if (whole) out[i].copy_(axis >= 0 ? torch::cat(slices, axis) : slices[0]);
  }
}

}  // namespace loom
