#include "backend/torch_compat.h"

#include <ATen/autocast_mode.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#ifdef LOOM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace loom::compat {

#ifdef LOOM_WITH_CUDA
bool cuda_available() { return c10::cuda::device_count() > 0; }
int cuda_device_count() { return c10::cuda::device_count(); }
void set_cuda_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }
void cuda_synchronize() { c10::cuda::device_synchronize(); }

int64_t cuda_peak_bytes(int device) {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[0].peak;  // index 0: all pools
}
void cuda_reset_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}
struct CudaEvent {
  at::cuda::CUDAEvent event{cudaEventDefault};  // the default flags disable timing
};
std::shared_ptr<CudaEvent> cuda_record_event() {
  auto e = std::make_shared<CudaEvent>();
  e->event.record();
  return e;
}
double cuda_elapsed_ms(const std::shared_ptr<CudaEvent>& start, const std::shared_ptr<CudaEvent>& end) {
  end->event.synchronize();
  return start->event.elapsed_time(end->event);
}
std::shared_ptr<CudaEvent> cuda_copy_on_side_stream(const std::vector<std::pair<at::Tensor, at::Tensor>>& pairs) {
  static const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent queued;  // what the current stream did so far: the states' last writer, a refill
  queued.record(c10::cuda::getCurrentCUDAStream());
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    for (const auto& [to, from] : pairs) to.copy_(from, /*non_blocking=*/true);
  }
  auto done = std::make_shared<CudaEvent>();
  done->event.record(side);
  return done;
}
void cuda_stream_wait(const std::shared_ptr<CudaEvent>& done) { done->event.block(c10::cuda::getCurrentCUDAStream()); }
void cuda_host_wait(const std::shared_ptr<CudaEvent>& done) { done->event.synchronize(); }
int64_t cuda_current_bytes(int device) {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[0].current;
}
int64_t cuda_total_bytes(int device) {
  return static_cast<int64_t>(at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->totalGlobalMem);
}

c10::intrusive_ptr<C10dGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#else
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
void set_cuda_device(int) {}
void cuda_synchronize() {}
int64_t cuda_peak_bytes(int) { return 0; }
void cuda_reset_peak(int) {}
int64_t cuda_current_bytes(int) { return 0; }
int64_t cuda_total_bytes(int) { return 0; }
struct CudaEvent {};
std::shared_ptr<CudaEvent> cuda_record_event() { throw std::runtime_error("this loom was built without CUDA"); }
double cuda_elapsed_ms(const std::shared_ptr<CudaEvent>&, const std::shared_ptr<CudaEvent>&) {
  throw std::runtime_error("this loom was built without CUDA");
}
std::shared_ptr<CudaEvent> cuda_copy_on_side_stream(const std::vector<std::pair<at::Tensor, at::Tensor>>&) {
  throw std::runtime_error("this loom was built without CUDA");
}
void cuda_stream_wait(const std::shared_ptr<CudaEvent>&) { throw std::runtime_error("this loom was built without CUDA"); }
void cuda_host_wait(const std::shared_ptr<CudaEvent>&) { throw std::runtime_error("this loom was built without CUDA"); }
c10::intrusive_ptr<C10dGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds) {
  throw std::runtime_error("this loom was built without CUDA; rebuild with -DLOOM_WITH_CUDA=ON against a CUDA LibTorch");
}
#endif

#if TORCH_VERSION_MAJOR >= 2
void zero_gradients(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(/*set_to_none=*/false); }
void shutdown_group(const c10::intrusive_ptr<C10dGroup>& group) {
  if (group) group->shutdown();
}
void set_bf16_autocast(bool enabled) {
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
}
#else
void zero_gradients(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
void shutdown_group(const c10::intrusive_ptr<C10dGroup>&) {}
void set_bf16_autocast(bool enabled) {
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
}
#endif

void clear_autocast_cache() { at::autocast::clear_cache(); }

namespace {

template <typename Key>
Key state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;  // what c10::guts::to_string(p.unsafeGetTensorImpl()) gives
    s << static_cast<const void*>(p.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace

torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& p) {
  auto& states = optimizer.state();
  using Key = typename std::decay_t<decltype(states)>::key_type;
  Key key = state_key<Key>(p);
  auto it = states.find(key);
  if (it == states.end()) {
    auto fresh = std::make_unique<torch::optim::AdamWParamState>();
    fresh->step(0);
    fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
    it = states.insert({key, std::move(fresh)}).first;
  }
  return static_cast<torch::optim::AdamWParamState&>(*it->second);
}

}  // namespace loom::compat
