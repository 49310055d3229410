#include "backend/exec/pipeline_stage.h"

#include <algorithm>

#include <torch/types.h>
#include <torch/utils.h>

#include "lang/diagnostics.h"

namespace loom {
namespace {
// The two-rank groups of neighbouring stages: {stage - 1, this rank} and {this rank, stage + 1}.
constexpr int kPrevious = 0, kNext = 1;
// Tags keep an activation and a gradient on the same pair apart.
constexpr int kActivation = 0, kGradient = 1;

// A list entry's index ("12"), or -1 when `name` is not one.
int entry_index(const std::string& name) {
  if (name.empty() || name.size() > 9 || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoi(name);
}
}  // namespace

PipelineStage::PipelineStage(torch::nn::Module& root, const ir::Program& step, const MeshGroups& groups,
                             nn::CallInterceptor* next)
    : previous_(groups.previous), next_stage_(groups.next), pipeline_(groups.pipeline), next_(next) {
  // The split list's entries are the modules the program's sends and receives name ("h.2").
  std::string list;
  auto index_of = [&](const std::string& entry) {
    size_t dot = entry.rfind('.');
    int index = dot == std::string::npos ? -1 : entry_index(entry.substr(dot + 1));
    if (index < 0) throw InternalError("pipeline stage: the program exchanges at `" + entry + "`, not a list entry");
    list = entry.substr(0, dot);
    return index;
  };
  for (const ir::Instr& in : step.instrs) {
    if (in.kind == ir::OpKind::Recv && in.phase == ir::Phase::Forward) receive_at_ = index_of(in.module);
    if (in.kind == ir::OpKind::Send && in.phase == ir::Phase::Forward) send_after_ = index_of(in.module);
    if (in.kind == ir::OpKind::Send && in.phase == ir::Phase::Backward) returns_gradient_ = true;
  }
  if (list.empty()) throw InternalError("pipeline stage: the program of a stage neither sends nor receives");
  for (auto& item : root.named_modules("", false)) {
    const std::string& path = item.key();
    if (path.rfind(list + ".", 0) == 0 && path.find('.', list.size() + 1) == std::string::npos)
      if (int index = entry_index(path.substr(list.size() + 1)); index >= 0) entry_[item.value().get()] = index;
  }
}

torch::Tensor PipelineStage::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                       const nn::Forward& forward) {
  auto run = [&](const std::vector<torch::Tensor>& xs) { return next_ ? next_->intercept(module, xs, forward) : forward(xs); };
  auto it = entry_.find(&module);
  if (it == entry_.end()) return run(inputs);
  int entry = it->second;
  if (entry < receive_at_) return inputs.at(0);  // an earlier stage's: its output arrives below
  std::vector<torch::Tensor> xs = inputs;
  if (entry == receive_at_) {
    // The previous stage's activation has the shape this stage computed locally for it.
    received_ = torch::empty_like(xs.at(0)).contiguous();
    comm::recv(*previous_, received_, kPrevious, {kActivation}).wait();
    received_.requires_grad_(torch::GradMode::is_enabled());
    xs[0] = received_;
  }
  torch::Tensor out = run(xs);
  if (entry == send_after_) {
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
  if (!returns_gradient_) return;
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
