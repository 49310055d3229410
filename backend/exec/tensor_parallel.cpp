#include "backend/exec/tensor_parallel.h"

#include <algorithm>

#include <torch/types.h>
#include <torch/utils.h>

#include "models/nn/layers.h"

namespace loom {

TensorParallel::TensorParallel(torch::nn::Module& root, const std::vector<TensorShard>& shards,
                               const std::vector<SyncRequest>& syncs, std::shared_ptr<comm::Group> group,
                               nn::CallInterceptor* next)
    : root_(root), group_(std::move(group)), next_(next) {
  for (const TensorShard& s : shards)
    for (const std::string& p : s.params) split_axis_[s.module + "." + p] = s.axis;
  std::unordered_map<std::string, const torch::nn::Module*> by_path;
  for (auto& item : root.named_modules("", true)) by_path[item.key()] = item.value().get();
  for (const SyncRequest& r : syncs) {
    Sync& s = syncs_[by_path.at(r.module)];
    if (r.mode == "fwd_post") (r.op == "all_gather" ? s.gather_output : s.reduce_output) = true;
    if (r.mode == "bwd_post") s.reduce_input_grad = true;
    // Each rank's partial sum would carry the whole bias: it is added once, after the sum.
    auto* linear = dynamic_cast<const nn::LinearImpl*>(by_path.at(r.module));
    if (r.mode == "fwd_post" && r.op == "all_reduce" && linear && linear->bias.defined() &&
        split_axis(r.module + ".weight") == 1 && split_axis(r.module + ".bias") < 0)
      s.bias_after_reduce = true;
  }
}

int TensorParallel::split_axis(const std::string& param) const {
  auto it = split_axis_.find(param);
  return it == split_axis_.end() ? -1 : it->second;
}

void TensorParallel::shard_parameters() {
  if (!group_) return;
  torch::NoGradGuard no_grad;
  for (auto& p : root_.named_parameters()) {
    int axis = split_axis(p.key());
    torch::Tensor& t = p.value();
    if (axis < 0 || t.numel() == 0) continue;  // whole, or another stage's (never materialized here)
    int64_t part = t.size(axis) / group_->size();
    t.set_(t.narrow(axis, group_->rank() * part, part).clone());
  }
}

torch::Tensor TensorParallel::reduce(const torch::Tensor& partial) const {
  torch::Tensor sum = partial.detach().clone();
  comm::all_reduce(*group_, sum).wait();
  // The value is the sum, bit for bit on every rank; the gradient reaches `partial` unchanged.
  return sum + (partial - partial.detach());
}

torch::Tensor TensorParallel::gather_last_dim(const torch::Tensor& part) const {
  torch::Tensor mine = part.contiguous();
  torch::Tensor all = torch::empty({group_->size() * mine.numel()}, mine.options().requires_grad(false));
  comm::all_gather(*group_, mine.detach(), all).wait();
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < group_->size(); ++r)
    parts.push_back(r == group_->rank() ? mine : all.narrow(0, r * mine.numel(), mine.numel()).view(mine.sizes()));
  // Only this rank's slice carries a gradient back: the others' ranks compute theirs.
  return torch::cat(parts, -1);
}

torch::Tensor TensorParallel::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                        const nn::Forward& forward) {
  auto run = [&](const std::vector<torch::Tensor>& xs) { return next_ ? next_->intercept(module, xs, forward) : forward(xs); };
  auto it = group_ ? syncs_.find(&module) : syncs_.end();
  if (it == syncs_.end()) return run(inputs);
  const Sync& s = it->second;
  std::vector<torch::Tensor> xs = inputs;
  if (s.reduce_input_grad && torch::GradMode::is_enabled())
    for (auto& x : xs)
      if (x.defined() && x.requires_grad()) {
        x = x.view_as(x);  // a node of its own, whose hook sums only this module's input gradient
        std::shared_ptr<comm::Group> group = group_;
        x.register_hook([group](torch::Tensor grad) {
          torch::Tensor sum = grad.contiguous().clone();
          comm::all_reduce(*group, sum).wait();
          return sum;
        });
      }
  if (s.bias_after_reduce) {
    // The whole bias once, after the sum: inside the call the next interceptor runs, where a
    // sharded executor has the parameters resident.
    auto& linear = static_cast<nn::LinearImpl&>(module);
    nn::Forward split = [this, &linear](const std::vector<torch::Tensor>& in) {
      return reduce(torch::linear(in.at(0), linear.weight)) + linear.bias;
    };
    return next_ ? next_->intercept(module, xs, split) : split(xs);
  }
  torch::Tensor out = run(xs);
  if (s.reduce_output) out = reduce(out);
  if (s.gather_output) out = gather_last_dim(out);
  return out;
}

}  // namespace loom
