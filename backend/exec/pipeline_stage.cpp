#include "backend/exec/pipeline_stage.h"

#include <torch/types.h>
#include <torch/utils.h>

namespace loom {
namespace {
// The two-rank groups of neighbouring stages: {stage - 1, this rank} and {this rank, stage + 1}.
constexpr int kPrevious = 0, kNext = 1;
// Tags keep an activation and a gradient on the same pair apart.
constexpr int kActivation = 0, kGradient = 1;
}  // namespace

PipelineStage::PipelineStage(torch::nn::Module& root, PipelineStages stages, const MeshGroups& groups,
                             nn::CallInterceptor* next)
    : stages_(std::move(stages)), at_(groups.at), previous_(groups.previous), next_stage_(groups.next),
      pipeline_(groups.pipeline), next_(next) {
  std::string prefix = stages_.list + ".";
  for (auto& item : root.named_modules("", false)) {
    const std::string& path = item.key();
    if (path.rfind(prefix, 0) == 0 && path.find('.', prefix.size()) == std::string::npos)
      entry_[item.value().get()] = std::stoi(path.substr(prefix.size()));
  }
}

torch::Tensor PipelineStage::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                       const nn::Forward& forward) {
  auto run = [&](const std::vector<torch::Tensor>& xs) { return next_ ? next_->intercept(module, xs, forward) : forward(xs); };
  auto it = entry_.find(&module);
  if (it == entry_.end()) return run(inputs);
  int entry = it->second, begin = stages_.begins[at_.stage], end = stages_.begins[at_.stage + 1];
  if (entry < begin) return inputs.at(0);  // an earlier stage's: its output arrives below
  std::vector<torch::Tensor> xs = inputs;
  if (entry == begin && !at_.first_stage()) {
    // The previous stage's activation has the shape this stage computed locally for it.
    received_ = torch::empty_like(xs.at(0)).contiguous();
    comm::recv(*previous_, received_, kPrevious, {kActivation}).wait();
    received_.requires_grad_(torch::GradMode::is_enabled());
    xs[0] = received_;
  }
  torch::Tensor out = run(xs);
  if (entry == end - 1 && !at_.last_stage()) {
    sent_ = out;
    torch::Tensor outgoing = out.detach().contiguous();
    comm::send(*next_stage_, outgoing, kNext, {kActivation}).wait();
    throw StageForwardDone();
  }
  return out;
}

void PipelineStage::backward_from_next_stage() {
  torch::Tensor grad = torch::empty_like(sent_.detach()).contiguous();
  comm::recv(*next_stage_, grad, kNext, {kGradient}).wait();
  sent_.backward(grad);
  sent_ = torch::Tensor();
}

void PipelineStage::send_gradient_to_previous_stage() {
  if (at_.first_stage()) return;
  torch::Tensor grad = received_.grad().defined() ? received_.grad().contiguous() : torch::zeros_like(received_);
  comm::send(*previous_, grad, kPrevious, {kGradient}).wait();
  received_ = torch::Tensor();
}

void PipelineStage::sum_shared_gradients(const std::vector<torch::Tensor>& shared) {
  if (!pipeline_ || shared.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat_grads;
  for (torch::Tensor p : shared) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    flat_grads.push_back(p.grad().reshape({-1}));
  }
  // One collective for all of them, in the program's order, which is every stage's.
  torch::Tensor flat = torch::cat(flat_grads);
  comm::all_reduce(*pipeline_, flat).wait();
  int64_t at = 0;
  for (const torch::Tensor& p : shared) {
    p.grad().copy_(flat.narrow(0, at, p.numel()).view_as(p.grad()));
    at += p.numel();
  }
}

}  // namespace loom
