// Adaptive offloading at run time (deepcompile.txt §4.4; the program's offload_states and
// reload_states, placed by backend/passes/adaptive_offload.h): the optimizer states of the
// named parameter slices go to the host and come back, on the copy stream, while the step
// runs. An offload copies the states into host buffers; its wait frees them on the device. A
// reload allocates them on the device again and copies them back; its wait makes them usable,
// so the optimizer steps on the device. The host buffers are allocated outside LibTorch's
// allocator (pinned on a CUDA run), so the device's memory accounting, on CPU the counting
// allocator, does not see them, as a GPU's would not. On CPU the copies run on the copy
// stream's thread; on CUDA on a side CUDA stream (compat::cuda_copy_on_side_stream), ordered
// after the compute queued before them: an offload's wait blocks the host until its copy is
// done, then frees; a reload's wait only makes the compute stream wait for it.
#pragma once

#include <functional>
#include <future>
#include <map>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "backend/exec/copy_stream.h"
#include "backend/torch_compat.h"

namespace loom {

class StateCopier {
 public:
  // The optimizer-state tensors of the program's parameter `q` (AdamW's exp_avg and exp_avg_sq
  // of its slice); they must exist before the first copy.
  using StatesOf = std::function<std::vector<torch::Tensor>(int q)>;
  explicit StateCopier(StatesOf states_of);

  void offload(int handle, const std::vector<int>& params);
  void reload(int handle, const std::vector<int>& params);
  // Finishes the copy `handle`: an offload's frees the device states, a reload's leaves them there.
  void wait(int handle);

 private:
  struct Copy {
    bool offload = true;
    std::vector<torch::Tensor> device;
    std::future<void> done;                           // CPU: the copy stream's task
    std::shared_ptr<compat::CudaEvent> cuda_done;     // CUDA: the side stream's event
  };
  // Queues the copies (to, from) on the copy stream as copy `handle`.
  void start(int handle, Copy c, std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs);
  // The host buffers of parameter q's states, made at its first offload and kept.
  std::vector<torch::Tensor>& host_buffers(int q, const std::vector<torch::Tensor>& device);

  StatesOf states_of_;
  std::map<int, std::vector<torch::Tensor>> host_;  // by parameter
  std::map<int, Copy> in_flight_;                   // by handle
  std::map<int, bool> on_host_;                     // by parameter: offloaded and not reloaded
  CopyStream stream_;  // last: it finishes its copies before the buffers they use go
};

}  // namespace loom
