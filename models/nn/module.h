// LOOM_MODULE and the call interception point: every call of a Loom module goes
// through loom::nn::dispatch, where a schedule's runtime (gather, checkpoint,
// replace, hooks) can act. Modules stay ordinary torch::nn::Modules.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "models/nn/deferred_init.h"

namespace loom::nn {

using Forward = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// Sees every Loom module call. `forward` runs the module on (possibly different) inputs,
// so an interceptor can run it, rerun it (checkpointing) or wrap it.
class CallInterceptor {
 public:
  virtual ~CallInterceptor() = default;
  virtual torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                  const Forward& forward) = 0;
};

// Sees the start and end of every Loom module call, whatever the interceptor does (timelines).
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual void begin(torch::nn::Module& module) = 0;
  virtual void end(torch::nn::Module& module) = 0;
};

// Installs the observer for this thread (nullptr removes it); returns the previous one.
CallObserver* set_call_observer(CallObserver* observer);

// Installs the interceptor for this thread (nullptr removes it); returns the previous one.
CallInterceptor* set_call_interceptor(CallInterceptor* interceptor);

// This thread's interceptor and observer (null where none is installed).
CallInterceptor* call_interceptor();
CallObserver* call_observer();

// Installs an interceptor and an observer for a scope on this thread, and puts back the ones
// before when it ends: a recomputation in backward runs where autograd runs it (on CUDA, the
// device's own thread), under the forward's.
class CallHooksScope {
 public:
  CallHooksScope(CallInterceptor* interceptor, CallObserver* observer)
      : interceptor_(set_call_interceptor(interceptor)), observer_(set_call_observer(observer)) {}
  ~CallHooksScope() {
    set_call_interceptor(interceptor_);
    set_call_observer(observer_);
  }
  CallHooksScope(const CallHooksScope&) = delete;
  CallHooksScope& operator=(const CallHooksScope&) = delete;

 private:
  CallInterceptor* interceptor_;
  CallObserver* observer_;
};

// Runs one module call through the current interceptor, or directly when there is none.
torch::Tensor dispatch(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs, const Forward& forward);

// Where new parameters are created; kMeta builds a model's structure without memory.
torch::Device construction_device();
// Sets the construction device for a scope (e.g. ConstructionDevice meta(torch::kMeta);).
class ConstructionDevice {
 public:
  explicit ConstructionDevice(torch::Device device);
  ~ConstructionDevice();

 private:
  torch::Device previous_;
};

// A parameter tensor on the construction device, filled by `init` (from the default
// generator); on meta, only its shape; inside a DeferredInit scope, a placeholder that
// materialize() fills (deferred_init.h).
torch::Tensor new_parameter(torch::IntArrayRef shape, const Init& init);
// A buffer (float), the same way.
torch::Tensor new_buffer(torch::IntArrayRef shape, const Init& init);

// The holder behind LOOM_MODULE: like TORCH_MODULE's, but operator() dispatches through Loom.
template <class Impl>
class ModuleHolder : public torch::nn::ModuleHolder<Impl> {
 public:
  using torch::nn::ModuleHolder<Impl>::ModuleHolder;

  template <class... Tensors>
  torch::Tensor operator()(Tensors&&... inputs) {
    Impl* impl = this->get();
    return dispatch(*impl, {torch::Tensor(inputs)...}, [impl](const std::vector<torch::Tensor>& xs) {
      return call(impl, xs, std::index_sequence_for<Tensors...>{});
    });
  }

 private:
  template <size_t... I>
  static torch::Tensor call(Impl* impl, const std::vector<torch::Tensor>& xs, std::index_sequence<I...>) {
    return impl->forward(xs[I]...);
  }
};

}  // namespace loom::nn

// Declares `Name` as the holder of `NameImpl`, whose calls go through Loom.
#define LOOM_MODULE(Name)                                          \
  class Name : public ::loom::nn::ModuleHolder<Name##Impl> {       \
   public:                                                         \
    using ::loom::nn::ModuleHolder<Name##Impl>::ModuleHolder;      \
  }
