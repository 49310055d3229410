#include "models/nn/module.h"

namespace loom::nn {
namespace {
thread_local CallInterceptor* current_interceptor = nullptr;
thread_local CallObserver* current_observer = nullptr;

struct ObservedCall {
  torch::nn::Module& module;
  CallObserver* observer;
  ObservedCall(torch::nn::Module& m, CallObserver* o) : module(m), observer(o) {
    if (observer) observer->begin(module);
  }
  ~ObservedCall() {
    if (observer) observer->end(module);
  }
};
thread_local torch::Device current_device = torch::kCPU;
}  // namespace

CallInterceptor* set_call_interceptor(CallInterceptor* interceptor) {
  std::swap(current_interceptor, interceptor);
  return interceptor;
}

CallObserver* set_call_observer(CallObserver* observer) {
  std::swap(current_observer, observer);
  return observer;
}

CallInterceptor* call_interceptor() { return current_interceptor; }
CallObserver* call_observer() { return current_observer; }

torch::Tensor dispatch(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs, const Forward& forward) {
  ObservedCall observed(module, current_observer);
  if (!current_interceptor) return forward(inputs);
  // Calls made inside the interceptor's own forward see the interceptor again (nested modules).
  return current_interceptor->intercept(module, inputs, forward);
}

torch::Device construction_device() { return current_device; }

ConstructionDevice::ConstructionDevice(torch::Device device) : previous_(current_device) { current_device = device; }
ConstructionDevice::~ConstructionDevice() { current_device = previous_; }

torch::Tensor new_parameter(torch::IntArrayRef shape, const Init& init) {
  torch::TensorOptions options = torch::TensorOptions().dtype(torch::kFloat32).device(current_device);
  if (current_device.is_meta()) return torch::empty(shape, options);
  if (deferring()) {
    torch::Tensor placeholder = torch::empty({0}, options);
    defer(placeholder, shape.vec(), init);
    return placeholder;
  }
  torch::Tensor t = torch::empty(shape, options);
  torch::NoGradGuard no_grad;
  init(t, c10::nullopt);
  return t;
}

torch::Tensor new_buffer(torch::IntArrayRef shape, const Init& init) { return new_parameter(shape, init); }

}  // namespace loom::nn
