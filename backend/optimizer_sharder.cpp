#include "backend/optimizer_sharder.h"

#include "backend/sharded_grad_clip.h"

namespace loom {

struct OptimizerSharder::State {
  std::shared_ptr<comm::Group> group;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> chunk;
  std::vector<torch::Tensor> shards;
};

OptimizerSharder::OptimizerSharder(const std::vector<torch::Tensor>& params, std::shared_ptr<comm::Group> group)
    : s_(std::make_unique<State>()) {
  s_->group = std::move(group);
  s_->params = params;
  int k = s_->group->size(), r = s_->group->rank();
  torch::NoGradGuard no_grad;
  for (auto& p : params) {
    int64_t c = (p.numel() + k - 1) / k;
    torch::Tensor padded = torch::zeros({c * k}, p.options().requires_grad(false));
    padded.narrow(0, 0, p.numel()).copy_(p.detach().reshape({-1}));
    s_->chunk.push_back(c);
    s_->shards.push_back(padded.narrow(0, r * c, c).clone().requires_grad_(true));
  }
}

OptimizerSharder::~OptimizerSharder() = default;

const std::vector<torch::Tensor>& OptimizerSharder::shards() const { return s_->shards; }

int64_t OptimizerSharder::offset(size_t i) const { return s_->group->rank() * s_->chunk[i]; }

void OptimizerSharder::take_gradients() {
  int k = s_->group->size(), r = s_->group->rank();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < s_->params.size(); ++i) {
    torch::Tensor& p = s_->params[i];
    int64_t c = s_->chunk[i];
    torch::Tensor padded = torch::zeros({c * k}, p.options().requires_grad(false));
    if (p.grad().defined()) padded.narrow(0, 0, p.numel()).copy_(p.grad().reshape({-1}));
    s_->shards[i].mutable_grad() = padded.narrow(0, r * c, c).clone();
    p.mutable_grad() = torch::Tensor();  // select & drop
  }
}

void OptimizerSharder::clip_gradients(double max_norm) {
  clip_sharded_grad_norm(s_->shards, s_->group.get(), max_norm);
}

void OptimizerSharder::publish() {
  int k = s_->group->size();
  torch::NoGradGuard no_grad;
  // The step is done: its gradients go (LibTorch 1.13's zero_grad would keep them, zeroed).
  for (auto& shard : s_->shards) shard.mutable_grad() = torch::Tensor();
  for (size_t i = 0; i < s_->params.size(); ++i) {
    torch::Tensor gathered = torch::empty({s_->chunk[i] * k}, s_->shards[i].options().requires_grad(false));
    comm::all_gather(*s_->group, s_->shards[i].detach(), gathered).wait();
    torch::Tensor& p = s_->params[i];
    p.data().view({-1}).copy_(gathered.narrow(0, 0, p.numel()));
  }
}

}  // namespace loom
