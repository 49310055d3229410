// The one place for code that differs between LibTorch 1.13 (Debian, CPU) and 2.x
// (the CUDA builds), and for everything that needs CUDA. Without LOOM_WITH_CUDA the
// CUDA functions report that CUDA is unavailable.
#pragma once

#include <chrono>
#include <memory>
#include <cstdint>
#include <utility>
#include <vector>

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/optim/adamw.h>

namespace loom::compat {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: ProcessGroupGloo and ProcessGroupNCCL are c10d::Backends; collectives are called on them.
using C10dGroup = c10d::Backend;
#else
// 1.13: ProcessGroupGloo is itself a c10d::ProcessGroup.
using C10dGroup = c10d::ProcessGroup;
#endif

// c10::Allocator: 1.13's allocate() is const; 2.x's is not, and 2.x adds a pure copy_data().
#if TORCH_VERSION_MAJOR >= 2
#define LOOM_ALLOCATOR_ALLOCATE_QUALIFIER
#define LOOM_ALLOCATOR_COPY_DATA \
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
#define LOOM_ALLOCATOR_ALLOCATE_QUALIFIER const
#define LOOM_ALLOCATOR_COPY_DATA
#endif

// Whether this build has CUDA and a GPU is visible.
bool cuda_available();
int cuda_device_count();
void set_cuda_device(int index);
void cuda_synchronize();
// The CUDA caching allocator's peak of allocated bytes on `device` since the last reset.
int64_t cuda_peak_bytes(int device);
void cuda_reset_peak(int device);
// A CUDA event with timing, recorded on the current stream (the profiler's GPU clock). CUDA
// builds only; elsewhere cuda_record_event throws.
struct CudaEvent;
std::shared_ptr<CudaEvent> cuda_record_event();
// Milliseconds from `start` to `end`; waits until `end` has happened.
double cuda_elapsed_ms(const std::shared_ptr<CudaEvent>& start, const std::shared_ptr<CudaEvent>& end);
// Copies each (to, from) pair on the side stream of the copies (one per process), after the
// work queued on the current stream so far; returns the event recorded when they are done.
// Adaptive offloading's host <-> device copies (backend/exec/state_copier.h) overlap compute so.
std::shared_ptr<CudaEvent> cuda_copy_on_side_stream(const std::vector<std::pair<at::Tensor, at::Tensor>>& pairs);
// Makes the current stream wait for `done` (the host does not wait).
void cuda_stream_wait(const std::shared_ptr<CudaEvent>& done);
// The host waits for `done`.
void cuda_host_wait(const std::shared_ptr<CudaEvent>& done);
// The CUDA caching allocator's allocated bytes on `device` now.
int64_t cuda_current_bytes(int device);
// The memory of GPU `device` in bytes (0 without CUDA).
int64_t cuda_total_bytes(int device);

// An NCCL process group (CUDA builds only; throws otherwise).
c10::intrusive_ptr<C10dGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout);

// Shuts a process group down cleanly before exit (2.x NCCL warns otherwise; 1.13 has no shutdown).
void shutdown_group(const c10::intrusive_ptr<C10dGroup>& group);

// bf16 autocast of CUDA operations, weights staying fp32 (the master copy).
void set_bf16_autocast(bool enabled);
// Drops autocast's cast cache; call after each forward.
void clear_autocast_cache();

// Zeroes the optimizer's gradients in place, keeping their memory, as LibTorch 1.13's
// zero_grad() does; 2.x's frees them by default (set_to_none), so backward would allocate them
// again and a step's memory (the walk keeps gradients resident) would differ between versions.
void zero_gradients(torch::optim::Optimizer& optimizer);

// The AdamW state of parameter `p`, created (zeros, step 0) when the optimizer has none yet.
// The optimizer's state map is keyed by a string of the TensorImpl address in 1.13 and by the
// address itself in later versions.
torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& optimizer, const at::Tensor& p);

}  // namespace loom::compat
