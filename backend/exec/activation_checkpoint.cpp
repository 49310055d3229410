#include "backend/exec/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace loom {
namespace {

struct ForwardHolder : torch::CustomClassHolder {
  nn::Forward forward;
  size_t module_inputs = 0;  // the inputs the module takes; a grad anchor may follow them
  at::Tensor rng_state;
  // The forward's module-call hooks (the executors, the profiler): autograd may run the backward
  // on another thread (on CUDA, the device's), where none is installed, and the recomputation's
  // module calls must go through them as the forward's did.
  nn::CallInterceptor* interceptor = nullptr;
  nn::CallObserver* observer = nullptr;
};

// forward: run without a graph; backward: rerun with a graph and backpropagate
// through it. Parameter gradients accumulate inside the nested backward, as in
// PyTorch's reentrant checkpoint.
struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                c10::intrusive_ptr<ForwardHolder> holder) {
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      holder->rng_state = gen.get_state();
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["forward"] = c10::IValue::make_capsule(holder);
    std::vector<torch::Tensor> detached;
    for (size_t i = 0; i < holder->module_inputs; ++i) detached.push_back(inputs[i].detach());
    return {holder->forward(detached)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto holder = c10::static_intrusive_pointer_cast<ForwardHolder>(ctx->saved_data["forward"].toCapsule());
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (auto& t : saved) {
      torch::Tensor d = t.detach();
      if (t.is_floating_point()) d.requires_grad_(t.requires_grad());
      inputs.push_back(d);
    }
    torch::Tensor out;
    {
      // Replay the random state of the forward, then put the current one back.
      auto gen = at::detail::getDefaultCPUGenerator();
      at::Tensor now;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        now = gen.get_state();
        gen.set_state(holder->rng_state);
      }
      torch::AutoGradMode enable(true);
      nn::CallHooksScope hooks(holder->interceptor, holder->observer);
      out = holder->forward({inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(holder->module_inputs)});
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(now);
    }
    if (out.requires_grad()) torch::autograd::backward({out}, {grad_outputs[0]});
    torch::autograd::variable_list grads;
    for (auto& t : inputs) grads.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    grads.push_back(torch::Tensor());  // for the holder
    return grads;
  }
};

}  // namespace

torch::Tensor checkpointed_call(const nn::Forward& forward, const std::vector<torch::Tensor>& inputs) {
  auto holder = c10::make_intrusive<ForwardHolder>();
  holder->forward = forward;
  holder->module_inputs = inputs.size();
  holder->interceptor = nn::call_interceptor();
  holder->observer = nn::call_observer();
  // A module whose inputs need no gradient (an embedding of token ids) still trains its
  // parameters: an empty anchor that does makes autograd call the backward, which recomputes.
  std::vector<torch::Tensor> with_anchor = inputs;
  bool any = false;
  for (const torch::Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) with_anchor.push_back(torch::empty({0}, torch::requires_grad()));
  return CheckpointFunction::apply(at::TensorList(with_anchor), holder)[0];
}

torch::Tensor ActivationCheckpointer::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                                const nn::Forward& forward) {
  // Outside training (no grad) or for modules not marked, run as usual.
  if (!modules_.count(&module) || !torch::GradMode::is_enabled()) return forward(inputs);
  return checkpointed_call(forward, inputs);
}

}  // namespace loom
