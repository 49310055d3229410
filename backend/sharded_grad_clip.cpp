#include "backend/sharded_grad_clip.h"

#include <cmath>

namespace loom {

void clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, comm::Group* group, double max_norm) {
  torch::NoGradGuard no_grad;
  torch::Tensor sq = torch::zeros({1}, torch::kDouble);
  for (auto& t : tensors) sq += t.grad().to(torch::kDouble).pow(2).sum();
  if (group) comm::all_reduce(*group, sq).wait();
  double coef = max_norm / (std::sqrt(sq.item<double>()) + 1e-6);
  if (coef < 1)
    for (auto& t : tensors) t.mutable_grad().mul_(coef);
}

}  // namespace loom
