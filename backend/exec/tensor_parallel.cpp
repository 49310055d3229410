#include "backend/exec/tensor_parallel.h"

#include <algorithm>

#include <torch/types.h>
#include <torch/utils.h>

#include "lang/diagnostics.h"
#include "models/nn/layers.h"

namespace loom {

TensorParallel::TensorParallel(torch::nn::Module& root, const std::vector<TensorShard>& shards,
                               std::shared_ptr<comm::Group> group, nn::CallInterceptor* next)
    : root_(root), group_(std::move(group)), next_(next) {
  for (const TensorShard& s : shards)
    for (const std::string& p : s.params) split_axis_[s.module + "." + p] = s.axis;
}

void TensorParallel::follow(const ir::Program& step) {
  std::unordered_map<std::string, const torch::nn::Module*> by_path;
  for (auto& item : root_.named_modules("", true)) by_path[item.key()] = item.value().get();
  auto module_at = [&](const ir::Instr& in) {
    auto it = by_path.find(in.module);
    if (it == by_path.end()) throw InternalError("tensor parallelism: the program syncs `" + in.module + "`, no module of the model");
    return it->second;
  };
  std::unordered_map<std::string, bool> backward_ran;  // modules whose backward compute came already
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  syncs_.clear();
  for (const ir::Instr& in : step.instrs) {
    if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward) backward_ran[in.module] = true;
    bool tp = in.kind == ir::OpKind::TpAllReduce || in.kind == ir::OpKind::TpAllGather;
    if (!tp) continue;
    const torch::nn::Module* module = module_at(in);
    path_of[module] = in.module;
    Sync& s = syncs_[module];
    if (in.phase == ir::Phase::Forward) {
      (in.kind == ir::OpKind::TpAllGather ? s.gather_output : s.reduce_output) = true;
    } else if (backward_ran.count(in.module)) {
      if (in.kind != ir::OpKind::TpAllReduce) throw InternalError("tensor parallelism: a backward " + std::string(ir::op_name(in.kind)) + " of " + in.module);
      s.reduce_input_grad = true;
    }  // else: a recomputation's replay of the forward's sync
  }
  for (auto& [module, s] : syncs_) {
    // Each rank's partial sum would carry the whole bias: it is added once, after the sum.
    const std::string& path = path_of.at(module);
    auto* linear = dynamic_cast<const nn::LinearImpl*>(module);
    if (s.reduce_output && linear && linear->bias.defined() && split_axis(path + ".weight") == 1 && split_axis(path + ".bias") < 0)
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
