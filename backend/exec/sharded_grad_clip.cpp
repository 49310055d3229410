#include "backend/exec/sharded_grad_clip.h"

#include <cmath>

namespace loom {

double clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, comm::Group* group, double max_norm,
                            const std::vector<bool>& counted) {
  torch::NoGradGuard no_grad;
  // On the gradients' device: NCCL reduces GPU tensors only.
  torch::Device device = tensors.empty() ? torch::Device(torch::kCPU) : tensors.front().device();
  torch::Tensor sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  for (size_t i = 0; i < tensors.size(); ++i)
    if (counted.empty() || counted[i]) sq += tensors[i].grad().to(torch::kDouble).pow(2).sum();
  if (group) comm::all_reduce(*group, sq).wait();
  double norm = std::sqrt(sq.item<double>());
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (auto& t : tensors) t.mutable_grad().mul_(coef);
  return norm;
}

}  // namespace loom
